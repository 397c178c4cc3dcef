package bench

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/stats"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

func TestPlanTwoArmsAlternatesABBA(t *testing.T) {
	cfg := &Config{Arms: []string{"grow-eager", "grow-one-ahead"}, Pairs: 6}
	plan := Plan(cfg)
	if len(plan) != 2+12 {
		t.Fatalf("%d runs planned, want 2 warm-ups + 12", len(plan))
	}
	for i, a := range cfg.Arms {
		if s := plan[i]; !s.Warmup || s.Arm != a || s.Pair != 0 {
			t.Errorf("run %d = %+v, want the warm-up of %s", i, s, a)
		}
	}
	first := map[string]int{}
	ids := map[string]bool{}
	for _, s := range plan {
		if ids[s.ID()] {
			t.Errorf("duplicate run id %s", s.ID())
		}
		ids[s.ID()] = true
		if !s.Warmup && s.Position == 1 {
			first[s.Arm]++
		}
	}
	if first["grow-eager"] != 3 || first["grow-one-ahead"] != 3 {
		t.Errorf("first position counts %v, want 3 each (AB/BA balance)", first)
	}
	want := [][]string{{"grow-eager", "grow-one-ahead"}, {"grow-one-ahead", "grow-eager"}}
	for b, row := range Orders(cfg.Arms, cfg.Pairs) {
		if !slices.Equal(row, want[b%2]) {
			t.Errorf("block %d order %v, want %v", b+1, row, want[b%2])
		}
	}
	if got := plan[2].ID(); got != "01-1-grow-eager" {
		t.Errorf("first measured id %q, want 01-1-grow-eager", got)
	}
	if got := plan[0].ID(); got != "warmup-1-grow-eager" {
		t.Errorf("first warm-up id %q", got)
	}
}

// With BalancedPairs blocks, every arm takes every position equally often
// and every ordered pair of arms is adjacent equally often (Williams).
func TestOrdersWilliamsBalanceThreeToSixArms(t *testing.T) {
	policies := []string{"direct", "pyramid", "grow-eager", "grow-one-ahead", "lazy", "grow-remap"}
	for k := 3; k <= 6; k++ {
		t.Run(fmt.Sprintf("%d arms", k), func(t *testing.T) {
			arms := policies[:k]
			n := stats.BalancedPairs(k)
			if n < stats.MinPairs || n%stats.CycleLen(k) != 0 {
				t.Fatalf("BalancedPairs(%d) = %d", k, n)
			}
			pos := map[[2]string]int{}
			adj := map[[2]string]int{}
			for _, row := range Orders(arms, n) {
				if len(row) != k {
					t.Fatalf("row %v has %d arms", row, len(row))
				}
				for p, a := range row {
					pos[[2]string{a, fmt.Sprint(p)}]++
					if p > 0 {
						adj[[2]string{row[p-1], a}]++
					}
				}
			}
			for _, a := range arms {
				for p := range k {
					if got, want := pos[[2]string{a, fmt.Sprint(p)}], n/k; got != want {
						t.Errorf("%s in position %d %d times, want %d", a, p, got, want)
					}
				}
				for _, b := range arms {
					if a != b && adj[[2]string{a, b}] != adj[[2]string{arms[0], arms[1]}] {
						t.Errorf("%s->%s adjacent %d times, %s->%s %d times", a, b, adj[[2]string{a, b}],
							arms[0], arms[1], adj[[2]string{arms[0], arms[1]}])
					}
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := func() Config {
		return Config{Model: "/m", Ladder: []int{32, 64, 128}, Arms: []string{"grow-eager", "grow-one-ahead"},
			Pairs: 6, PromptTokens: 8, DecodeTokens: 100}
	}
	tests := []struct {
		name       string
		edit       func(*Config)
		allowSmall bool
		wantErr    string // "" for none
	}{
		{name: "default campaign", edit: func(*Config) {}},
		{name: "five pairs", edit: func(c *Config) { c.Pairs = 5 }, wantErr: "the smallest two-sided exact sign-flip p is 2/2^n = 0.0625"},
		{name: "odd pairs above six", edit: func(c *Config) { c.Pairs = 7 }, wantErr: "even number"},
		{name: "two pairs allowed small", edit: func(c *Config) { c.Pairs = 2 }, allowSmall: true},
		{name: "one arm", edit: func(c *Config) { c.Arms = c.Arms[:1] }, wantErr: "at least two arms"},
		{name: "unknown policy", edit: func(c *Config) { c.Arms[1] = "fast" }, wantErr: "unknown policy"},
		{name: "arm twice", edit: func(c *Config) { c.Arms[1] = c.Arms[0] }, wantErr: "appears twice"},
		{name: "bad ladder", edit: func(c *Config) { c.Ladder = []int{64, 32} }, wantErr: "ladder"},
		{name: "no prompt", edit: func(c *Config) { c.PromptTokens = 0 }, wantErr: "--prompt-tokens"},
		{name: "reserved run flag", edit: func(c *Config) { c.RunFlags = []string{"--policy=direct"} }, wantErr: "sets --policy itself"},
		{name: "run flag without dashes", edit: func(c *Config) { c.RunFlags = []string{"infer-threads=1"} }, wantErr: "want a flag"},
		{name: "run flag", edit: func(c *Config) { c.RunFlags = []string{"--infer-threads=1", "--compile-cpus=1,2"} }},
		{name: "four arms six pairs", edit: func(c *Config) { c.Arms = []string{"grow-eager", "grow-one-ahead", "direct", "pyramid"} }, wantErr: "multiple of 4"},
		{name: "four arms eight pairs", edit: func(c *Config) {
			c.Arms = []string{"grow-eager", "grow-one-ahead", "direct", "pyramid"}
			c.Pairs = 8
		}},
		{name: "three arms six pairs", edit: func(c *Config) { c.Arms = []string{"grow-eager", "grow-one-ahead", "lazy"} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok()
			tc.edit(&c)
			err := c.Validate(tc.allowSmall)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("no error, want one containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("error %q does not contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestConfigDiffNamesTheFields(t *testing.T) {
	a := Config{Model: "/m", Ladder: []int{32, 64}, Arms: []string{"grow-eager", "grow-one-ahead"}, Pairs: 6, PromptTokens: 8, DecodeTokens: 100}
	b := a
	b.Pairs, b.Ladder, b.Precision = 8, []int{32, 128}, "f32"
	got := strings.Join(a.Diff(&b), "; ")
	want := "ladder: 32,64 vs 32,128; pairs: 6 vs 8; precision: default vs f32"
	if got != want {
		t.Errorf("Diff = %q, want %q", got, want)
	}
	if d := a.Diff(&a); len(d) != 0 {
		t.Errorf("Diff with itself = %v", d)
	}
}

func TestRunArgs(t *testing.T) {
	c := Config{Model: "/m", Ladder: []int{32, 64}, Arms: []string{"grow-eager", "lazy"}, Pairs: 6,
		PromptTokens: 8, DecodeTokens: 100, TeacherForced: true, Seed: 3, Precision: "f32", Attention: "static",
		VerifyBoundaries: true, RunFlags: []string{"--infer-threads=1"}}
	got := strings.Join(c.RunArgs("lazy", "/out/r.json", ""), " ")
	want := "run --model /m --ladder 32,64 --policy lazy --prompt-tokens 8 --decode-tokens 100 --seed 3 --teacher-forced --precision f32 --attention static --verify --infer-threads=1 --json /out/r.json --quiet"
	if got != want {
		t.Errorf("RunArgs =\n%s\nwant\n%s", got, want)
	}
}

// A text prompt and a compile-cost profile reach every run; a text prompt
// needs no --prompt-tokens, and the campaign's own flags stay its own.
func TestRunArgsTextPromptAndCompileCost(t *testing.T) {
	c := Config{Model: "/m.gguf", Ladder: []int{128, 256}, Arms: []string{"grow-eager", "grow-one-ahead"}, Pairs: 6,
		Prompt: "Why is the sky blue?", DecodeTokens: 50, Seed: 1, CompileCost: "/c/cost.json"}
	if err := c.Validate(false); err != nil {
		t.Fatal(err)
	}
	args := c.RunArgs("grow-one-ahead", "/out/r.json", "")
	got := strings.Join(args, "|")
	for _, want := range []string{"--prompt|Why is the sky blue?", "--compile-cost|/c/cost.json"} {
		if !strings.Contains(got, want) {
			t.Errorf("RunArgs %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "--prompt-tokens") {
		t.Errorf("RunArgs %q: a text prompt with --prompt-tokens", got)
	}
	for _, f := range []string{"--prompt=x", "--prompt-file=x", "--compile-cost=x"} {
		c.RunFlags = []string{f}
		if err := c.Validate(false); err == nil {
			t.Errorf("--run-flag %s accepted; the campaign sets it itself", f)
		}
	}
}

func TestArms(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Arm
		wantErr string
	}{
		{in: "grow-one-ahead", want: Arm{Policy: runtime.GrowOneAhead}},
		{in: "grow-eager+prefill=auto", want: Arm{Policy: runtime.GrowEager, Prefill: runtime.PrefillAuto}},
		{in: "grow-eager+prefill=eager", wantErr: "prefill mode"},
		{in: "grow-eager+chunk=4", wantErr: "POLICY[+prefill=MODE][+compile-in=WHERE][+weights=FORMAT][+attention=FORM]"},
		{in: "grow-one-ahead+attention=bounded+weights=rounded", want: Arm{Policy: runtime.GrowOneAhead, Attention: model.AttentionBounded, Weights: model.WeightsRounded}},
		{in: "grow-one-ahead+attention=dense", wantErr: "want auto, paged, bounded or static"},
		{in: "grow-one-ahead+weights=rounded", want: Arm{Policy: runtime.GrowOneAhead, Weights: model.WeightsRounded}},
		{in: "grow-one-ahead+weights=u4", wantErr: "want native, rounded, f32, kernel or kernel-q8"},
		{in: "grow-one-ahead+weights=", wantErr: "POLICY[+prefill=MODE]"},
		{in: "grow-one-ahead+compile-in=worker", want: Arm{Policy: runtime.GrowOneAhead, CompileIn: runtime.CompileInWorker}},
		{in: "grow-one-ahead+compile-in=worker+prefill=decode", want: Arm{Policy: runtime.GrowOneAhead, Prefill: runtime.PrefillDecode, CompileIn: runtime.CompileInWorker}},
		{in: "grow-one-ahead+compile-in=thread", wantErr: "want process or worker"},
		{in: "grow-one-ahead+prefill=auto+prefill=graph", wantErr: "POLICY[+prefill=MODE]"},
		{in: "eager", wantErr: "eager"},
	} {
		got, err := ParseArm(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseArm(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseArm(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	att := Config{Model: "/m", Ladder: []int{64}, Arms: []string{"grow-one-ahead", "grow-one-ahead+attention=bounded"},
		Pairs: 6, PromptTokens: 4, DecodeTokens: 4, Attention: "static"}
	if err := att.Validate(false); err == nil || !strings.Contains(err.Error(), "the arms set it") {
		t.Errorf("Validate with --attention and attention arms: %v", err)
	}
	weights := Config{Model: "/m", Ladder: []int{64}, Arms: []string{"grow-one-ahead", "grow-one-ahead+weights=rounded"},
		Pairs: 6, PromptTokens: 4, DecodeTokens: 4, RunFlags: []string{"--weights=f32"}}
	if err := weights.Validate(false); err == nil || !strings.Contains(err.Error(), "sets --weights itself") {
		t.Errorf("Validate with --run-flag=--weights and weight arms: %v", err)
	}
	cfg := Config{Model: "/m", Ladder: []int{64}, Arms: []string{"grow-one-ahead+prefill=graph", "grow-one-ahead+prefill=auto"},
		Pairs: 6, PromptTokens: 4, DecodeTokens: 4, RunFlags: []string{"--prefill=decode"}}
	if err := cfg.Validate(false); err == nil || !strings.Contains(err.Error(), "sets --prefill itself") {
		t.Errorf("Validate with --run-flag=--prefill and prefill arms: %v", err)
	}
	cfg.RunFlags = nil
	if err := cfg.Validate(false); err != nil {
		t.Fatal(err)
	}
	worker := Config{Model: "/m", Ladder: []int{64}, Arms: []string{"grow-one-ahead", "grow-one-ahead+compile-in=worker"},
		Pairs: 6, PromptTokens: 4, DecodeTokens: 4, RunFlags: []string{"--compile-in=process"}}
	if err := worker.Validate(false); err == nil || !strings.Contains(err.Error(), "sets --compile-in itself") {
		t.Errorf("Validate with --run-flag=--compile-in and compile-in arms: %v", err)
	}
	if args := strings.Join(worker.RunArgs(worker.Arms[1], "x.json", ""), " "); !strings.Contains(args, "--policy grow-one-ahead --compile-in worker") {
		t.Errorf("run args %q", args)
	}
	args := strings.Join(cfg.RunArgs(cfg.Arms[1], "x.json", ""), " ")
	if !strings.Contains(args, "--policy grow-one-ahead --prefill auto") {
		t.Errorf("run args %q", args)
	}
	s := &runtime.Summary{Policy: "grow-one-ahead", PrefillMode: "graph", Model: "/m", Ladder: []int{64}, PromptTokens: 4, DecodeTokens: 4, FinishReason: "length"}
	if ok, why := cfg.matches(s, cfg.Arms[1]); ok || !strings.Contains(why, "prefill graph, want auto") {
		t.Errorf("a graph run matched the auto arm (%q)", why)
	}
	if ok, why := cfg.matches(s, cfg.Arms[0]); !ok {
		t.Errorf("a graph run did not match the graph arm: %s", why)
	}
}
