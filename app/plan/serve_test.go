package plan

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/compilecost"
)

// runServe runs plan --serve with args and returns its --json report and
// its printed text.
func runServe(t *testing.T, args ...string) (ServeReport, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "plan.json")
	var text strings.Builder
	app := &cli.App{Name: "ovrun", Commands: []*cli.Command{Command}, Writer: &text, ErrWriter: &text}
	if err := app.Run(append([]string{"ovrun", "plan", "--serve", "--json", out}, args...)); err != nil {
		t.Fatalf("plan --serve %v: %v\n%s", args, err, text.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep ServeReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep, text.String()
}

// serveProfile saves a two-rung profile (16, 32) whose rung 32 compiles
// in 2 s as a successor and, when under > 0, in under seconds beside
// decoding.
func serveProfile(t *testing.T, under float64) string {
	t.Helper()
	prof := compilecost.Profile{Model: "m", Device: "CPU", Rungs: []compilecost.Rung{
		{Capacity: 16, CompileS: []float64{1}, SuccessorS: []float64{1}},
		{Capacity: 32, CompileS: []float64{3}, SuccessorS: []float64{2}},
	}}
	if under > 0 {
		prof.Rungs[1].UnderDecodeS = []float64{under}
	}
	path := filepath.Join(t.TempDir(), "cost.json")
	if err := prof.Save(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPlanServe plans compilecost's hand-checked request (a 1-token
// prompt, 21 answer tokens at 10 tok/s, rung 32 due after 8 steps, 0.7 s
// before it is needed) from a profile: with the successor figure (2 s) it
// waits 1.3 s; measured beside decoding at 4 s with the successor 2 s
// alone, the compile runs 0.7 s at 4 s (17.5%), then alone, ready at
// 0.9 + 0.7 + 0.825 * 2 = 3.25 s, a 1.65 s wait.
func TestPlanServe(t *testing.T) {
	args := []string{"--decode-rate", "10", "--prompt-tokens", "1", "--answer-tokens", "21", "--requests", "1", "--kv-bytes-per-token", "1024"}
	rep, text := runServe(t, append([]string{"--compile-cost", serveProfile(t, 0)}, args...)...)
	r := rep.Result
	if !near(r.BoundaryWaitS, 1.3) || r.BoundaryWaits != 1 || !near(r.MakespanS, 3.4) || r.Launches["deadline"] != 1 || r.PeakKVReservedBytes != 32*1024 {
		t.Errorf("successor profile: %+v", r)
	}
	for _, want := range []string{"boundary waits   1, 1.30 s", "admission waits  0", "TTFT p50 / p99   0.100 s / 0.100 s", "peak KV reserved  0.0 MiB", "launched by deadline 1"} {
		if !strings.Contains(strings.Join(strings.Fields(text), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("the table lacks %q:\n%s", want, text)
		}
	}
	if rep.MaxSeqs != 8 || rep.Queue != 16 || rep.Seed != 1 || rep.PrefillRate != 10 {
		t.Errorf("defaults: %+v", rep)
	}
	rep, _ = runServe(t, append([]string{"--compile-cost", serveProfile(t, 4)}, args...)...)
	if r := rep.Result; !near(r.BoundaryWaitS, 1.65) {
		t.Errorf("under-decode profile: wait %.4f s, want 1.65 (%+v)", r.BoundaryWaitS, r)
	}
}

// TestPlanServeLoad: a seeded mix plans the same twice, and every request
// is answered or refused.
func TestPlanServeLoad(t *testing.T) {
	args := []string{"--compile-cost", serveProfile(t, 4), "--decode-rate", "50", "--prompt-tokens", "2,8,20", "--answer-tokens", "4,12",
		"--rate", "2", "--requests", "40", "--max-seqs", "2", "--queue", "4", "--parallel", "1.5", "--prefill-rate", "500", "--rung-idle", "3s"}
	a, _ := runServe(t, args...)
	b, _ := runServe(t, args...)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatalf("two plans of the same load differ:\n%s\n%s", ja, jb)
	}
	if r := a.Result; r.Answered+r.Refused != 40 || r.Answered == 0 || r.Compiles == 0 {
		t.Errorf("result %+v", r)
	}
}

func TestPlanServeFlagErrors(t *testing.T) {
	cost := serveProfile(t, 0)
	base := []string{"plan", "--compile-cost", cost, "--decode-rate", "10", "--prompt-tokens", "4"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"serve without answers", []string{"--serve"}, "--answer-tokens is required with --serve"},
		{"serve with decode tokens", []string{"--serve", "--answer-tokens", "4", "--decode-tokens", "4"}, "--decode-tokens plans one request; it does not apply to --serve; give the answer lengths with --answer-tokens"},
		{"serve with a policy", []string{"--serve", "--answer-tokens", "4", "--policy", "lazy"}, "--policy plans one request"},
		{"rate without serve", []string{"--decode-tokens", "4", "--rate", "1"}, "--rate needs --serve"},
		{"answers without serve", []string{"--decode-tokens", "4", "--answer-tokens", "4"}, "--answer-tokens needs --serve"},
		{"no decode tokens", nil, "--decode-tokens is required (with --serve: --answer-tokens)"},
		{"a mix for one request", []string{"--decode-tokens", "4", "--prompt-tokens", "4,8"}, "a mix needs --serve"},
		{"answer beyond the ladder", []string{"--serve", "--answer-tokens", "8,29"}, "need 33 tokens; the largest rung holds 32"},
		{"NaN rate", []string{"--serve", "--answer-tokens", "4", "--rate", "NaN"}, "--rate NaN"},
		{"no slots", []string{"--serve", "--answer-tokens", "4", "--max-seqs", "0"}, "--max-seqs 0: want 1..256"},
		{"tiny parallel", []string{"--serve", "--answer-tokens", "4", "--parallel", "0.05"}, "--parallel 0.05"},
		{"bad mix", []string{"--serve", "--answer-tokens", "4,x"}, `--answer-tokens: "x" is not an integer`},
		{"zero answer", []string{"--serve", "--answer-tokens", "0"}, "--answer-tokens 0: want 1.."},
		{"negative idle", []string{"--serve", "--answer-tokens", "4", "--rung-idle", "-1s"}, "--rung-idle -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := &cli.App{Commands: []*cli.Command{Command}, Writer: io.Discard, ErrWriter: io.Discard}
			err := app.Run(append(append([]string{"ovrun"}, base...), tc.args...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
	app := &cli.App{Commands: []*cli.Command{Command}, Writer: io.Discard, ErrWriter: io.Discard}
	if err := app.Run([]string{"ovrun", "plan", "--compile-cost", cost, "--decode-rate", "10", "--decode-tokens", "4"}); err == nil || !strings.Contains(err.Error(), "--prompt-tokens is required") {
		t.Errorf("no prompt tokens: %v", err)
	}
}
