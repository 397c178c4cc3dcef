package runtime

import (
	"context"
	"errors"
	"github.com/ovtoolkit/ovrun/model"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ovtoolkit/ovrun/compilecost"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testShape = KVShape{Layers: 2, KVHeads: 2, HeadDim: 4} // 32-byte rows

func fakeRun(t *testing.T, f *fakeCompiler, cfg RunConfig) (*Summary, error) {
	t.Helper()
	if cfg.Clock == nil && f.clock != nil {
		cfg.Clock = f.clock.Now
	}
	s, err := Run(context.Background(), f, testShape, cfg)
	if n := f.open.Load(); n != 0 {
		t.Errorf("%d executables left open", n)
	}
	if n := MappedKVBytes(); n != 0 {
		t.Errorf("%d bytes of KV still mapped after the run", n)
	}
	return s, err
}

func TestPoliciesGiveIdenticalPredictions(t *testing.T) {
	ladder := Ladder{32, 64, 128, 256}
	tests := []struct {
		name   string
		prompt int
		decode int
		forced bool
	}{
		{name: "prompt in first rung", prompt: 5, decode: 200},
		{name: "prompt in a later rung", prompt: 70, decode: 150},
		{name: "exactly fills the largest rung", prompt: 20, decode: 236},
		{name: "teacher forced", prompt: 9, decode: 240, forced: true},
		{name: "prefill chunk larger than the prompt", prompt: 3, decode: 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var want []int64
			for _, p := range Policies {
				f := newFakeCompiler(testShape, 97, nil)
				cfg := RunConfig{Ladder: ladder, Policy: p, Prompt: SeededTokens(1, tc.prompt, 97),
					DecodeTokens: tc.decode, PrefillChunk: 16}
				if tc.forced {
					cfg.Forced = SeededTokens(2, tc.decode, 97)
				}
				s, err := fakeRun(t, f, cfg)
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				if s.FinishReason != "length" || s.DecodedTokens != tc.decode {
					t.Fatalf("%s: finish %q after %d steps, want length after %d", p, s.FinishReason, s.DecodedTokens, tc.decode)
				}
				if len(s.Predictions) != tc.decode+1 {
					t.Fatalf("%s: %d predictions, want %d", p, len(s.Predictions), tc.decode+1)
				}
				if want == nil {
					want = s.Predictions
				} else if !slices.Equal(s.Predictions, want) {
					t.Errorf("%s: predictions differ from %s", p, Policies[0])
				}
			}
		})
	}
}

func TestFirstRungAndBoundaries(t *testing.T) {
	f := newFakeCompiler(testShape, 50, nil)
	s, err := fakeRun(t, f, RunConfig{Ladder: Ladder{32, 64, 128}, Policy: GrowEager,
		Prompt: SeededTokens(1, 40, 50), DecodeTokens: 80})
	if err != nil {
		t.Fatal(err)
	}
	// 40 prompt tokens + 1 need 41 slots: the first rung is 64, 32 is never compiled.
	if f.compiled(32) != 0 || f.compiled(64) != 1 || f.compiled(128) != 1 {
		t.Errorf("compiles 32/64/128 = %d/%d/%d, want 0/1/1", f.compiled(32), f.compiled(64), f.compiled(128))
	}
	// Step i feeds position 40+i-1; position 64 is step 25.
	if len(s.Boundaries) != 1 || s.Boundaries[0].From != 64 || s.Boundaries[0].To != 128 || s.Boundaries[0].Step != 25 {
		t.Fatalf("boundaries = %+v, want one 64->128 at step 25", s.Boundaries)
	}
	if got := s.Rungs[1]; got.FirstStep != 1 || got.LastStep != 24 {
		t.Errorf("rung 64 steps %d-%d, want 1-24", got.FirstStep, got.LastStep)
	}
	// 64 live tokens are copied: 2 layers x (K+V) x 64 rows x 32 bytes.
	if want := int64(2 * 2 * 64 * 32); s.MigrateBytes != want {
		t.Errorf("migrated %d bytes, want %d", s.MigrateBytes, want)
	}
}

func TestStopsAtCapacity(t *testing.T) {
	f := newFakeCompiler(testShape, 50, nil)
	s, err := fakeRun(t, f, RunConfig{Ladder: Ladder{16, 32}, Policy: GrowOneAhead,
		Prompt: SeededTokens(1, 10, 50), DecodeTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	if s.FinishReason != "capacity" || s.DecodedTokens != 22 {
		t.Errorf("finish %q after %d steps, want capacity after 22", s.FinishReason, s.DecodedTokens)
	}
}

func TestRejectsPromptLongerThanLargestRung(t *testing.T) {
	f := newFakeCompiler(testShape, 50, nil)
	s, err := fakeRun(t, f, RunConfig{Ladder: Ladder{16, 32}, Policy: GrowOneAhead,
		Prompt: SeededTokens(1, 32, 50), DecodeTokens: 4})
	if !errors.Is(err, ErrCapacity) {
		t.Fatalf("err = %v, want ErrCapacity", err)
	}
	if s.FinishReason != "error" || len(f.calls) != 0 {
		t.Errorf("finish %q with %d compiles, want error before compiling", s.FinishReason, len(f.calls))
	}
}

func TestOneAheadWaitsOnlyWhenSuccessorIsLate(t *testing.T) {
	tests := []struct {
		name      string
		late      bool
		wantReady bool
	}{
		{name: "successor ready before the boundary", late: false, wantReady: true},
		{name: "successor still compiling at the boundary", late: true, wantReady: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCompiler(testShape, 50, nil)
			gate := make(chan struct{})
			f.gate[64] = gate
			cfg := RunConfig{Ladder: Ladder{32, 64}, Policy: GrowOneAhead, Prompt: SeededTokens(1, 8, 50), DecodeTokens: 40}
			if tc.late {
				// Release the compile only once the run reports it is waiting.
				cfg.Progress = func(p Progress) {
					if p.Waiting {
						closeOnce(gate)
					}
				}
			} else {
				close(gate)
				// Hold the first rung's decode until the successor is compiled.
				cfg.Progress = func(p Progress) {
					if p.Step == 1 {
						for f.compiled(64) == 0 {
							time.Sleep(time.Millisecond)
						}
						time.Sleep(20 * time.Millisecond) // let the worker publish the result
					}
				}
			}
			s, err := fakeRun(t, f, cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := s.Rungs[1]
			if r.ReadyAtBoundary != tc.wantReady || r.Foreground {
				t.Errorf("rung 64: ready %v foreground %v, want ready %v background", r.ReadyAtBoundary, r.Foreground, tc.wantReady)
			}
			if tc.late && r.WaitS <= 0 {
				t.Errorf("late successor recorded no wait")
			}
			if !tc.late && r.WaitS != 0 && s.BoundaryWaitS > 0.01 {
				t.Errorf("ready successor recorded a wait of %v s", r.WaitS)
			}
		})
	}
}

func TestFailedBackgroundCompile(t *testing.T) {
	tests := []struct {
		name       string
		failures   int
		wantFinish string
		wantSteps  int
	}{
		{name: "retried in the foreground", failures: 1, wantFinish: "length", wantSteps: 40},
		{name: "retry fails too", failures: 2, wantFinish: "compile_error", wantSteps: 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCompiler(testShape, 50, nil)
			f.fail[32] = tc.failures
			s, err := fakeRun(t, f, RunConfig{Ladder: Ladder{16, 32, 64}, Policy: GrowOneAhead,
				Prompt: SeededTokens(1, 8, 50), DecodeTokens: 40})
			if s.FinishReason != tc.wantFinish || s.DecodedTokens != tc.wantSteps {
				t.Fatalf("finish %q after %d steps, want %q after %d (err %v)", s.FinishReason, s.DecodedTokens, tc.wantFinish, tc.wantSteps, err)
			}
			if tc.wantFinish == "compile_error" {
				if !errors.Is(err, ErrCompile) || s.Error == "" {
					t.Errorf("err = %v, summary error %q; want ErrCompile in both", err, s.Error)
				}
				if len(s.Predictions) != tc.wantSteps+1 {
					t.Errorf("%d predictions kept, want %d", len(s.Predictions), tc.wantSteps+1)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got := s.Rungs[1].CompileAttempts; got != 2 {
				t.Errorf("rung 32 compile attempts = %d, want 2", got)
			}
		})
	}
}

func TestCancelEndsRunWithPartialSummary(t *testing.T) {
	f := newFakeCompiler(testShape, 50, nil)
	f.gate[64] = make(chan struct{}) // never released: the background compile blocks until cancelled
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := RunConfig{Ladder: Ladder{32, 64}, Policy: GrowOneAhead, Prompt: SeededTokens(1, 8, 50), DecodeTokens: 40,
		Progress: func(p Progress) {
			if p.Step == 10 {
				cancel()
			}
		}}
	s, err := Run(ctx, f, testShape, cfg)
	if !errors.Is(err, context.Canceled) || s.FinishReason != "interrupted" {
		t.Fatalf("err %v finish %q, want interrupted", err, s.FinishReason)
	}
	if s.DecodedTokens != 10 || len(s.Predictions) != 11 {
		t.Errorf("kept %d steps and %d predictions, want 10 and 11", s.DecodedTokens, len(s.Predictions))
	}
	if n := f.open.Load(); n != 0 {
		t.Errorf("%d executables left open", n)
	}
}

// TestReservedKVAccounting checks the time-weighted averages and peaks against
// the analytic values: with 1 ms per step and instant compiles and copies,
// the average is the step-weighted mean of each policy's buffer sizes.
func TestReservedKVAccounting(t *testing.T) {
	tb := testShape.TokenBytes() // 256 bytes a token
	// Prompt 8 tokens; 120 steps: positions 8..31 on rung 32 (24 steps),
	// 32..63 on 64 (32 steps), 64..127 on 128 (64 steps).
	steps := map[int]float64{32: 24, 64: 32, 128: 64}
	total := 120.0
	tests := []struct {
		policy   Policy
		wantAvg  float64
		wantPeak int64
	}{
		{Direct, 128 * float64(tb), 128 * tb},
		{Pyramid, 128 * float64(tb), 128 * tb},
		{GrowEager, (32*steps[32] + 64*steps[64] + 128*steps[128]) / total * float64(tb), (64 + 128) * tb},
		{GrowOneAhead, (32*steps[32] + 64*steps[64] + 128*steps[128]) / total * float64(tb), (64 + 128) * tb},
	}
	for _, tc := range tests {
		t.Run(string(tc.policy), func(t *testing.T) {
			clock := newFakeClock()
			f := newFakeCompiler(testShape, 50, clock)
			f.stepT = time.Millisecond
			s, err := fakeRun(t, f, RunConfig{Ladder: Ladder{32, 64, 128}, Policy: tc.policy,
				Prompt: SeededTokens(1, 8, 50), DecodeTokens: 120})
			if err != nil {
				t.Fatal(err)
			}
			if d := s.KVReservedAvgBytes - tc.wantAvg; d > 1 || d < -1 {
				t.Errorf("reserved avg = %.1f, want %.1f", s.KVReservedAvgBytes, tc.wantAvg)
			}
			if s.KVReservedPeakBytes != tc.wantPeak {
				t.Errorf("reserved peak = %d, want %d", s.KVReservedPeakBytes, tc.wantPeak)
			}
			// Live KV after step i holds 8+i tokens during step i+1: mean of 9..128 tokens... computed exactly:
			var live float64
			for i := 0; i < 120; i++ {
				live += float64(8 + i)
			}
			if wantLive := live / total * float64(tb); abs(s.KVLiveAvgBytes-wantLive) > 1 {
				t.Errorf("live avg = %.1f, want %.1f", s.KVLiveAvgBytes, wantLive)
			}
		})
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// noViews is a compiler for a device that cannot read inputs in place.
type noViews struct{ *fakeCompiler }

func (noViews) HostViews() bool { return false }

func TestGrowRemapCommitsOnlyLiveKV(t *testing.T) {
	clock := newFakeClock()
	f := newFakeCompiler(testShape, 50, clock)
	f.stepT = 20 * time.Millisecond // every step is sampled
	cfg := RunConfig{Ladder: Ladder{256, 512, 1024}, Policy: GrowRemap, Prompt: SeededTokens(1, 8, 50), DecodeTokens: 900}
	s, err := fakeRun(t, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.MigrateBytes != 0 || s.KVMeasured != "committed" || len(s.Boundaries) != 2 {
		t.Fatalf("migrated %d bytes, kv measured %q, %d boundaries; want 0, committed, 2", s.MigrateBytes, s.KVMeasured, len(s.Boundaries))
	}
	slack := int64(2*testShape.Layers) * int64(os.Getpagesize()) // one page granule per buffer
	for _, k := range s.KVTimeline {
		if k.ReservedBytes < k.LiveBytes || k.ReservedBytes > k.LiveBytes+slack {
			t.Fatalf("at %.3f s committed %d bytes for %d live: want within [live, live+%d]", k.TS, k.ReservedBytes, k.LiveBytes, slack)
		}
	}
	if len(s.KVTimeline) < 900 {
		t.Errorf("only %d KV samples", len(s.KVTimeline))
	}
	direct, err := fakeRun(t, newFakeCompiler(testShape, 50, nil), RunConfig{Ladder: cfg.Ladder, Policy: Direct, Prompt: cfg.Prompt, DecodeTokens: 900})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Predictions, direct.Predictions) {
		t.Error("grow-remap predictions differ from direct")
	}
}

func TestGrowRemapFallsBackWithoutHostViews(t *testing.T) {
	f := newFakeCompiler(testShape, 50, nil)
	s, err := Run(context.Background(), noViews{f}, testShape, RunConfig{Ladder: Ladder{32, 64}, Policy: GrowRemap,
		Prompt: SeededTokens(1, 8, 50), DecodeTokens: 40})
	if err != nil {
		t.Fatal(err)
	}
	if !s.RemapFallback || s.MigrateBytes == 0 || s.Policy != string(GrowRemap) {
		t.Errorf("fallback %v, migrated %d bytes, policy %q; want a noted copy-and-grow fallback", s.RemapFallback, s.MigrateBytes, s.Policy)
	}
}

func TestCompileCostLaunchesTwoAheadWhenOneAheadCannotMakeIt(t *testing.T) {
	clock := newFakeClock()
	f := newFakeCompiler(testShape, 50, clock)
	f.stepT = time.Millisecond
	profile := &compilecost.Profile{Model: "fake", Device: "CPU", Rungs: []compilecost.Rung{
		{Capacity: 32, CompileS: []float64{0.001}}, {Capacity: 64, CompileS: []float64{0.001}}, {Capacity: 128, CompileS: []float64{10}},
	}}
	s, err := fakeRun(t, f, RunConfig{Ladder: Ladder{32, 64, 128}, Policy: GrowOneAhead, Prompt: SeededTokens(1, 4, 50),
		DecodeTokens: 120, CompileCost: profile})
	if err != nil {
		t.Fatal(err)
	}
	byCap := map[int]Budget{}
	for _, b := range s.Budgets {
		byCap[b.Capacity] = b
	}
	if b, ok := byCap[128]; !ok || b.Lookahead != 2 || b.PredictedS != 10 || !b.Measured {
		t.Fatalf("budget for 128 = %+v (present %v), want launched two ahead with a 10 s prediction", b, ok)
	}
	if b := byCap[64]; b.Lookahead != 1 || b.WindowS <= 0 {
		t.Errorf("budget for 64 = %+v, want one ahead with a predicted window", b)
	}
	if !slices.ContainsFunc(s.Notes, func(n string) bool { return strings.Contains(n, "launching it two ahead") }) {
		t.Errorf("notes %q do not say the rung was launched two ahead", s.Notes)
	}
}

// originCompiler reports an Origin for the graphs of some capacities, as a
// compiled-rung cache or a compile worker would.
type originCompiler struct {
	*fakeCompiler
	origins map[int]Origin
}

type originExecutable struct {
	Executable
	o Origin
}

func (e originExecutable) Origin() Origin { return e.o }

func (c originCompiler) Compile(ctx context.Context, spec model.GraphSpec) (Executable, error) {
	exe, err := c.fakeCompiler.Compile(ctx, spec)
	if o, ok := c.origins[spec.Capacity]; ok && err == nil && spec.Chunk == 1 {
		return originExecutable{exe, o}, nil
	}
	return exe, err
}

func TestSummaryRecordsWhereEachRungCameFrom(t *testing.T) {
	f := newFakeCompiler(testShape, 50, nil)
	comp := originCompiler{f, map[int]Origin{64: {Source: OriginImported, ImportS: 0.25},
		128: {Source: OriginCompiled, ImportS: 0.5, ExportS: 0.75}}}
	s, err := Run(context.Background(), comp, testShape, RunConfig{Ladder: Ladder{32, 64, 128}, Policy: GrowOneAhead,
		Prompt: SeededTokens(1, 10, 50), DecodeTokens: 80, PrefillChunk: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		source          string
		import_, export float64
	}{{OriginCompiled, 0, 0}, {OriginImported, 0.25, 0}, {OriginCompiled, 0.5, 0.75}}
	for i, w := range want {
		r := s.Rungs[i]
		if r.CompileSource != w.source || r.ImportS != w.import_ || r.ExportS != w.export {
			t.Errorf("rung %d: source %q import %v export %v, want %+v", r.Capacity, r.CompileSource, r.ImportS, r.ExportS, w)
		}
	}
	for _, c := range s.Compiles {
		if c.Capacity == 64 && c.Source != OriginImported {
			t.Errorf("compile record of 64 says %q, want imported", c.Source)
		}
	}
}

// A run that ends while a background compile it no longer needs is still
// running stops that compile instead of waiting for it (with the fake, as
// with a compile worker, the compile honours its context; without the stop
// the gated compile below would hold the run forever).
func TestRunEndStopsCompilesItDoesNotNeed(t *testing.T) {
	f := newFakeCompiler(testShape, 50, nil)
	f.gate[128] = make(chan struct{}) // never opened
	f.started[128] = make(chan struct{})
	s, err := fakeRun(t, f, RunConfig{Ladder: Ladder{32, 64, 128}, Policy: GrowOneAhead,
		Prompt: SeededTokens(1, 5, 50), DecodeTokens: 40, PrefillChunk: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s.FinishReason != "length" {
		t.Fatalf("finish %q, want length", s.FinishReason)
	}
	var stopped bool
	for _, c := range s.Compiles {
		if c.Capacity == 128 {
			stopped = c.Stopped && c.Error == ""
		}
	}
	if r := s.Rungs[2]; !stopped || !r.CompileStopped || r.Compiled || r.CompileError != "" {
		t.Errorf("rung 128: compiled %v, error %q, record stopped %v; want a stopped compile, not a failure", r.Compiled, r.CompileError, stopped)
	}
}
