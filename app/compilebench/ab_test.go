package compilebench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/npy"
)

// fakeRunner records the trial order and returns values that encode the
// arm and the call: control compiles take 10 s, the treatment 9 s, plus a
// drift of 0.01 s per call, so that arm and order are both visible.
type fakeRunner struct {
	mu     sync.Mutex
	calls  []string
	logits map[string][][]float32 // per variant, written when asked
	failAt int                    // 1-based call that fails (0: none)
	cancel func()                 // called at call cancelAt
	at     int
}

func (f *fakeRunner) run(ctx context.Context, v Variant, dump string) (*Measurement, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, v.Name)
	n := len(f.calls)
	if n == f.failAt {
		return nil, errors.New("compile failed: out of memory")
	}
	if f.cancel != nil && n == f.at {
		f.cancel()
		return nil, ctx.Err()
	}
	if dump != "" {
		if err := npy.WriteFile(dump, f.logits[v.Name]); err != nil {
			return nil, err
		}
	}
	base := 10.0
	if v.Name != "base" {
		base = 9
	}
	drift := 0.01 * float64(n)
	return &Measurement{CompileS: base + drift, CompileCPUS: 2 * (base + drift), PeakRSSBytes: int64(1000 + n),
		OpenVINOVersion: "2026.3.0", Library: "/libs/" + v.Name}, nil
}

func variants(t *testing.T) []Variant {
	vs, err := ParseVariants([]string{"base=prop:A=1", "memo=prop:A=2"})
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func TestRunABBA(t *testing.T) {
	f := &fakeRunner{logits: map[string][][]float32{
		"base": {{1, 2, 3}, {0, 5, 1}},
		"memo": {{1, 2, 3}, {0, 5, 1.25}},
	}}
	cfg := Config{Variants: variants(t), Pairs: 6, LogitsDir: t.TempDir()}
	var progress []Progress
	rep, err := Run(context.Background(), cfg, f.run, func(p Progress) { progress = append(progress, p) })
	if err != nil {
		t.Fatal(err)
	}
	// Warm-ups first, then AB, BA, AB, ...
	wantCalls := "base memo base memo memo base base memo memo base base memo memo base"
	if got := strings.Join(f.calls, " "); got != wantCalls {
		t.Errorf("calls = %s\nwant    %s", got, wantCalls)
	}
	if len(rep.Order) != 6 || strings.Join(rep.Order[0], ",") != "base,memo" || strings.Join(rep.Order[1], ",") != "memo,base" {
		t.Errorf("order = %v", rep.Order)
	}
	if len(rep.Trials) != 12 || len(rep.Warmup) != 2 || rep.FinishReason != "complete" {
		t.Fatalf("trials %d, warm-up %d, finish %s", len(rep.Trials), len(rep.Warmup), rep.FinishReason)
	}
	for i, tr := range rep.Trials {
		// Values land in the arm that ran: call i+3 (after the warm-ups).
		want := 10.0
		if tr.Variant == "memo" {
			want = 9
		}
		want += 0.01 * float64(i+3)
		if math.Abs(tr.Values["compile_s"]-want) > 1e-9 || tr.Pair != i/2+1 || tr.Position != i%2+1 {
			t.Errorf("trial %d = %+v, want compile_s %v", i, tr, want)
		}
	}
	if len(rep.Comparisons) != 3 {
		t.Fatalf("comparisons = %d, want one per endpoint", len(rep.Comparisons))
	}
	c := rep.Comparisons[0]
	if c.Endpoint != "compile_s" || c.Control != "base" || c.Treatment != "memo" || c.N != 6 || c.TreatmentWins != 6 {
		t.Errorf("comparison = %+v", c)
	}
	// Counterbalancing cancels the drift: the mean difference is -1 s exactly.
	if math.Abs(c.DiffMean+1) > 1e-9 || c.PSignFlip != 0.03125 {
		t.Errorf("diff mean %v, p %v; want -1 and 2/2^6", c.DiffMean, c.PSignFlip)
	}
	if rss := rep.Comparisons[2]; rss.Endpoint != "peak_rss_bytes" || rss.TreatmentWins != 3 {
		t.Errorf("rss comparison = %+v (the drift makes the later run bigger: 3 wins of 6)", rss)
	}
	if e := rep.Equivalent; e == nil || e.Equal || e.MaxAbsDiff != 0.25 || !e.Top1Equal {
		t.Errorf("equivalent = %+v", rep.Equivalent)
	}
	if rep.Variants[1].Library != "/libs/memo" || rep.Variants[1].OpenVINOVersion != "2026.3.0" {
		t.Errorf("variants = %+v", rep.Variants)
	}
	if len(progress) != 14 || !progress[0].Warmup || progress[2].Trial != 1 || progress[13].Trial != 12 || progress[13].Total != 12 {
		t.Errorf("progress = %+v", progress)
	}
	// The JSON carries the contract's field names.
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"variants"`, `"order"`, `"trials"`, `"pair"`, `"position"`, `"comparisons"`, `"control_values"`,
		`"treatment_values"`, `"diff_mean"`, `"pct_change"`, `"ci95_low"`, `"ci95_high"`, `"p_signflip"`, `"treatment_wins"`,
		`"equivalent"`, `"max_abs_diff"`, `"top1_equal"`, `"detail"`} {
		if !bytes.Contains(b, []byte(field)) {
			t.Errorf("report JSON lacks %s", field)
		}
	}
	var out bytes.Buffer
	if err := WriteReport(&out, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"6 pairs, order base→memo, memo→base", "compile_s", "-1.000 s · -9.", "6/6", "logits DIFFER"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRunStops(t *testing.T) {
	t.Run("failed trial", func(t *testing.T) {
		f := &fakeRunner{failAt: 7} // warm-ups, pairs 1 and 2, then the first run of pair 3
		rep, err := Run(context.Background(), Config{Variants: variants(t), Pairs: 6}, f.run, nil)
		if err == nil || !strings.Contains(err.Error(), "pair 3, base: compile failed") {
			t.Fatalf("err = %v", err)
		}
		if rep.FinishReason != "error" || len(rep.Trials) != 4 || rep.Comparisons[0].N != 2 {
			t.Errorf("finish %s, trials %d, comparisons %+v", rep.FinishReason, len(rep.Trials), rep.Comparisons)
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		f := &fakeRunner{cancel: cancel, at: 6} // stops in pair 2 after one run
		rep, err := Run(ctx, Config{Variants: variants(t), Pairs: 6}, f.run, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		if rep.FinishReason != "interrupted" || len(rep.Trials) != 3 || rep.Comparisons[0].N != 1 {
			t.Errorf("finish %s, trials %d, comparisons %+v", rep.FinishReason, len(rep.Trials), rep.Comparisons)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"five pairs", Config{Pairs: 5}, "5 pairs: use an even number >= 6 (with n pairs the smallest two-sided exact sign-flip p is 2/2^n = 0.0625"},
		{"odd pairs", Config{Pairs: 7}, "7 pairs: use an even number"},
		{"unknown endpoint", Config{Pairs: 6, Endpoints: []string{"compile_s", "decode_s"}}, `unknown endpoint "decode_s"`},
		{"small allowed", Config{Pairs: 2, AllowSmall: true}, ""},
		{"zero pairs", Config{Pairs: 0, AllowSmall: true}, "pairs 0 < 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Variants = variants(t)
			err := tt.cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestRunThreeArms(t *testing.T) {
	vs, err := ParseVariants([]string{"base=", "a=prop:X=1", "b=prop:X=2"})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRunner{}
	rep, err := Run(context.Background(), Config{Variants: vs, Pairs: 6, Endpoints: []string{"compile_s"}}, f.run, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Comparisons) != 2 || rep.Comparisons[0].Treatment != "a" || rep.Comparisons[1].Treatment != "b" {
		t.Errorf("comparisons = %+v", rep.Comparisons)
	}
	first := map[string]int{}
	for _, o := range rep.Order {
		first[o[0]]++
	}
	if first["base"] != 2 || first["a"] != 2 || first["b"] != 2 || len(rep.Notes) != 0 {
		t.Errorf("each arm should run first twice in 6 Williams blocks: %v, notes %v", first, rep.Notes)
	}
}

func TestCompareLogits(t *testing.T) {
	a := [][]float32{{1, 2, 3}, {3, 2, 1}}
	e, err := CompareLogits(a, [][]float32{{1, 2, 3}, {3, 2, 1}}, 0)
	if err != nil || !e.Equal || e.MaxAbsDiff != 0 || !e.Top1Equal || e.MinCosine < 0.9999999 {
		t.Errorf("identical: %+v %v", e, err)
	}
	e, err = CompareLogits(a, [][]float32{{1, 2, 3}, {1, 2, 3.5}}, 0.1)
	if err != nil || e.Equal || e.MaxAbsDiff != 2.5 || e.Top1Equal || !strings.Contains(e.Detail, "top-1 equal in 1/2 rows") {
		t.Errorf("different: %+v %v", e, err)
	}
	e, _ = CompareLogits(a, [][]float32{{1, 2, 3.05}, {3, 2, 1}}, 0.1)
	if !e.Equal {
		t.Errorf("within tolerance: %+v", e)
	}
	if _, err := CompareLogits(a, a[:1], 0); err == nil {
		t.Error("row mismatch accepted")
	}
	nan := float32(math.NaN())
	e, _ = CompareLogits(a, [][]float32{{nan, 2, 3}, {3, 2, 1}}, 0)
	if e.Equal {
		t.Error("NaN logits reported equal")
	}
	if _, err := json.Marshal(e); err != nil {
		t.Errorf("NaN comparison does not marshal: %v", err)
	}
}
