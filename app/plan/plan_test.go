package plan

import (
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/compilecost"
)

// runPlan runs the plan command with args and returns its --json report
// and its printed table.
func runPlan(t *testing.T, args ...string) (Report, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "plan.json")
	var text strings.Builder
	app := &cli.App{Name: "ovrun", Commands: []*cli.Command{Command}, Writer: &text, ErrWriter: &text}
	if err := app.Run(append([]string{"ovrun", "plan", "--json", out}, args...)); err != nil {
		t.Fatalf("plan %v: %v\n%s", args, err, text.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep, text.String()
}

// TestPlanReproducesTheSeed feeds plan the seed's published NUC16 figures
// (Qwen2.5-0.5B FP16 on an Intel NPU 5, 1K->8K ladder, 128-token prompt,
// 8064 decoded tokens; docs/reproducing-the-seed.md) and checks that it
// predicts the seed's measured endpoints within 3%:
//
//	                     I1 eager   I2 one-ahead
//	foreground compile    84.29 s     65.33 s
//	critical path        232.43 s    212.98 s
//	overlapped compile       -        20.65 s
//
// The inputs are what the seed publishes: the first rung's foreground
// compile as I2 measured it (65.33 s, the first compile of the process,
// NPUW's prefill model included), the successors' compile as I2 overlapped
// it (20.65 s for 2K, 4K and 8K together; the seed gives no split, so each
// gets a third) and I2's decode inference (142.94 s for 8064 tokens). The
// seed's prefill time is not published (an NPU prefill of 128 tokens is a
// fraction of a second), so --prefill-s stays 0. A plan that charged every
// compile the first compile's cost (one number per rung) would predict a
// 261 s foreground compile for I1; one that did not put the first compile
// first would miss I2's foreground.
func TestPlanReproducesTheSeed(t *testing.T) {
	rate := 8064 / 142.94
	rep, text := runPlan(t, "--compile-cost", "testdata/seed-nuc16-cost.json", "--ladder", "1024,2048,4096,8192",
		"--decode-rate", formatFloat(rate), "--prompt-tokens", "128", "--decode-tokens", "8064",
		"--policy", "grow-eager,grow-one-ahead", "--prefill", "graph")
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want 2\n%s", len(rep.Results), text)
	}
	i1, i2 := rep.Results[0], rep.Results[1]
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"I1 foreground compile", i1.ForegroundCompileS, 84.29},
		{"I2 foreground compile", i2.ForegroundCompileS, 65.33},
		{"I1 critical path", i1.CriticalPathS, 232.43},
		{"I2 critical path", i2.CriticalPathS, 212.98},
		{"I2 successor compile overlapped", i2.OverlappedS, 20.65},
	} {
		t.Logf("%s: predicted %.2f s, seed %.2f s (%+.1f%%)", c.name, c.got, c.want, 100*(c.got-c.want)/c.want)
		if rel := math.Abs(c.got-c.want) / c.want; rel > 0.03 {
			t.Errorf("%s: predicted %.2f s, the seed measured %.2f s (%.1f%% off, want within 3%%)", c.name, c.got, c.want, 100*rel)
		}
	}
	if i2.BoundaryWaitS != 0 {
		t.Errorf("I2 boundary wait %.2f s; the seed's 15/15 successors were ready", i2.BoundaryWaitS)
	}
	if !strings.Contains(text, "TTFT s") {
		t.Errorf("the table has no time-to-first-token column:\n%s", text)
	}
}

func formatFloat(x float64) string { b, _ := json.Marshal(x); return string(b) }

// TestPlanPrefillModes checks that plan charges the prefill graph where
// each mode puts it, from a profile that measured every kind: graph
// compiles it first (and the first rung as a successor), decode never and
// feeds the prompt through the decode graph, shared never and decodes the
// first rung slower by the profile's SharedPenalty (the default for a
// profile without the model's layers and weight bytes, a smaller one for a
// wide model's), and auto picks as the runtime does:
// on a device without shared graphs (NPU) the faster of decode and graph
// for the prompt's length, on the CPU a shared first rung where SharedPays.
func TestPlanPrefillModes(t *testing.T) {
	plan := func(device, prompt string, layers int, weightBytes int64) map[string]compilecost.SimResult {
		prof := compilecost.Profile{Model: "m", Device: device, Layers: layers, WeightBytes: weightBytes, Rungs: []compilecost.Rung{
			{Capacity: 1024, CompileS: []float64{2}, SuccessorS: []float64{5},
				Prefill: []compilecost.PrefillCost{{Chunk: 64, FirstS: []float64{6}, SuccessorS: []float64{9}}}},
			{Capacity: 2048, CompileS: []float64{3}, SuccessorS: []float64{4}},
		}}
		path := filepath.Join(t.TempDir(), "cost.json")
		if err := prof.Save(path); err != nil {
			t.Fatal(err)
		}
		rep, _ := runPlan(t, "--compile-cost", path, "--decode-rate", "20", "--prompt-tokens", prompt, "--decode-tokens", "8", "--prefill-chunk", "64",
			"--policy", "grow-one-ahead", "--prefill", "all", "--prefill-s", "0.5")
		out := map[string]compilecost.SimResult{}
		for _, r := range rep.Results {
			out[r.Prefill] = r
		}
		return out
	}
	short := plan("NPU", "16", 0, 0) // 0.8 s through the decode graph
	if g := short["graph"]; !near(g.ForegroundCompileS, 6+5) || !near(g.TTFTS, 6+5+0.5) {
		t.Errorf("graph: foreground %.2f s, TTFT %.2f s; want the prefill graph first (6 s), the first rung after it (5 s), prefill 0.5 s", g.ForegroundCompileS, g.TTFTS)
	}
	if d := short["decode"]; !near(d.ForegroundCompileS, 2) || !near(d.TTFTS, 2+16.0/20) || d.PrefillCompileS != 0 {
		t.Errorf("decode: foreground %.2f s, TTFT %.2f s, prefill compile %.2f s; want the first rung alone (2 s) and 16 tokens at 20/s", d.ForegroundCompileS, d.TTFTS, d.PrefillCompileS)
	}
	if a := short["auto"]; a.PrefillUsed != "decode" || !near(a.TTFTS, short["decode"].TTFTS) {
		t.Errorf("auto on 16 tokens: used %s, TTFT %.2f s; want decode", a.PrefillUsed, a.TTFTS)
	}
	long := plan("NPU", "1000", 0, 0) // 50 s through the decode graph
	if a := long["auto"]; a.PrefillUsed != "graph" || !near(a.ForegroundCompileS, 2+9) || !near(a.TTFTS, 2+9+0.5) {
		t.Errorf("auto on 1000 tokens: used %s, foreground %.2f s, TTFT %.2f s; want the prefill graph compiled after the first rung (2+9 s)", a.PrefillUsed, a.ForegroundCompileS, a.TTFTS)
	}
	wide := compilecost.SharedStepPenalty(24, 991e6) // the qwen2.5-0.5b shapes: about 0.03
	if wide <= 0 || wide >= compilecost.DefaultSharedStepPenalty/4 {
		t.Fatalf("SharedStepPenalty of a 24-layer model reading 991 MB per step: %.3f, want well under the default %.2f", wide, compilecost.DefaultSharedStepPenalty)
	}
	for _, c := range []struct {
		prompt      string
		layers      int
		weightBytes int64
		penalty     float64
	}{{"16", 0, 0, compilecost.DefaultSharedStepPenalty}, {"1000", 0, 0, compilecost.DefaultSharedStepPenalty}, {"2", 24, 991e6, wide}} {
		cpu := plan("CPU", c.prompt, c.layers, c.weightBytes)
		s := cpu["shared"]
		if s.PrefillUsed != "shared" || !near(s.ForegroundCompileS, 2) || !near(s.TTFTS, 2+0.5) || s.PrefillCompileS != 0 {
			t.Errorf("shared, %s tokens: used %s, foreground %.2f s, TTFT %.2f s, prefill compile %.2f s; want the first rung alone (2 s) and the prompt in 0.5 s",
				c.prompt, s.PrefillUsed, s.ForegroundCompileS, s.TTFTS, s.PrefillCompileS)
		}
		if d := cpu["decode"]; !near(s.DecodeS, d.DecodeS*(1+c.penalty)) {
			t.Errorf("shared, %s tokens, %d layers: decode %.3f s, want the decode graph's %.3f s x %.3f", c.prompt, c.layers, s.DecodeS, d.DecodeS, 1+c.penalty)
		}
		if a := cpu["auto"]; a.PrefillUsed != "shared" || !near(a.TTFTS, s.TTFTS) {
			t.Errorf("auto on the CPU, %s tokens, %d layers: used %s, TTFT %.2f s; want shared (%.2f s)", c.prompt, c.layers, a.PrefillUsed, a.TTFTS, s.TTFTS)
		}
	}
	// 2 prompt tokens against 8 decoded: shared for the wide model (above),
	// not at the default penalty (2 < 0.4 x 8).
	if a := plan("CPU", "2", 0, 0)["auto"]; a.PrefillUsed == "shared" {
		t.Errorf("auto on the CPU, 2 tokens, no model in the profile: used shared, want the decode graph at the default penalty")
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestPlanCached: rungs named by --cached cost the profile's import; a
// profile without imports is refused for --cached.
func TestPlanCached(t *testing.T) {
	prof := compilecost.Profile{Model: "m", Device: "CPU", Rungs: []compilecost.Rung{
		{Capacity: 1024, CompileS: []float64{2}, SuccessorS: []float64{5}, ImportS: []float64{0.5}},
		{Capacity: 2048, CompileS: []float64{3}, SuccessorS: []float64{4}, ImportS: []float64{0.75}},
	}}
	dir := t.TempDir()
	path := filepath.Join(dir, "cost.json")
	if err := prof.Save(path); err != nil {
		t.Fatal(err)
	}
	plan := func(extra ...string) compilecost.SimResult {
		rep, _ := runPlan(t, append([]string{"--compile-cost", path, "--decode-rate", "20", "--prompt-tokens", "16", "--decode-tokens", "8",
			"--policy", "grow-one-ahead", "--prefill", "decode"}, extra...)...)
		return rep.Results[0]
	}
	if r := plan(); !near(r.ForegroundCompileS, 2) {
		t.Errorf("uncached: foreground %.2f s, want the first rung's compile (2 s)", r.ForegroundCompileS)
	}
	if r := plan("--cached", "all"); !near(r.ForegroundCompileS, 0.5) {
		t.Errorf("--cached all: foreground %.2f s, want the first rung's import (0.5 s)", r.ForegroundCompileS)
	}
	if r := plan("--cached", "2048"); !near(r.ForegroundCompileS, 2) {
		t.Errorf("--cached 2048: foreground %.2f s, want the first rung's compile (2 s)", r.ForegroundCompileS)
	}
	old := filepath.Join(dir, "old.json")
	prof.Rungs[0].ImportS, prof.Rungs[1].ImportS = nil, nil
	if err := prof.Save(old); err != nil {
		t.Fatal(err)
	}
	app := &cli.App{Commands: []*cli.Command{Command}, Writer: io.Discard, ErrWriter: io.Discard}
	err := app.Run([]string{"ovrun", "plan", "--compile-cost", old, "--decode-rate", "20", "--prompt-tokens", "16", "--decode-tokens", "8", "--cached", "all"})
	if err == nil || !strings.Contains(err.Error(), "measured no import") {
		t.Errorf("--cached with a profile without imports: %v", err)
	}
}
