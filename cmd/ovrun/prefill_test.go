package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// TestPrefillModesGiveIdenticalTokensOnSmolLM2 runs the real SmolLM2 GGUF
// through the binary, greedy, with a 70-token prompt (two calls of the
// 64-token prefill graph, or of the shared graph: 64 tokens, then 6)
// under --prefill graph, decode, shared and auto (which on the CPU makes
// the first rung shared for this prompt), and auto once more with static
// attention (no shared graphs) and a cost profile that makes the prefill
// graph look nearly free, so that it switches to it after two prompt
// tokens fed through the decode graph: all must predict the same tokens,
// and each summary must say what the prompt went through.
func TestPrefillModesGiveIdenticalTokensOnSmolLM2(t *testing.T) {
	g := testenv.SmolLM2(t)
	dir := t.TempDir()
	cheap := filepath.Join(dir, "cost.json")
	prof := compilecost.Profile{Model: "SmolLM2", Device: "CPU", Rungs: []compilecost.Rung{{Capacity: 256, CompileS: []float64{2},
		Prefill: []compilecost.PrefillCost{{Chunk: 64, FirstS: []float64{0.001}, SuccessorS: []float64{0.001}}}}}}
	if err := prof.Save(cheap); err != nil {
		t.Fatal(err)
	}
	runs := []struct {
		name, mode, used string
		extra            []string
	}{
		{"graph", "graph", runtime.PrefillUsedGraph, nil},
		{"decode", "decode", runtime.PrefillUsedDecode, nil},
		{"shared", "shared", runtime.PrefillUsedShared, nil},
		{"auto", "auto", runtime.PrefillUsedShared, nil},
		{"auto switching", "auto", runtime.PrefillUsedSwitch, []string{"--compile-cost", cheap, "--attention", "static"}},
	}
	var want []int64
	for _, r := range runs {
		out := filepath.Join(dir, r.name+".json")
		args := append([]string{"run", "--model", g, "--ladder", "256,512", "--prompt-tokens", "70", "--decode-tokens", "16", "--prefill-chunk", "64",
			"--prefill", r.mode, "--json", out, "--quiet"}, r.extra...)
		if _, stderr, code := ovrun(t, nil, args...); code != 0 {
			t.Fatalf("%s: exit %d: %s", r.name, code, stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var s runtime.Summary
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		if s.PrefillMode != r.mode || s.PrefillReason == "" || (r.used != "" && s.PrefillUsed != r.used) {
			t.Errorf("%s: prefill mode %q, used %q (%s); want mode %s, used %s", r.name, s.PrefillMode, s.PrefillUsed, s.PrefillReason, r.mode, r.used)
		}
		if s.TTFTS <= 0 || s.TTFTS != s.PrefillEndS {
			t.Errorf("%s: ttft_s %.3f, prefill ends at %.3f s", r.name, s.TTFTS, s.PrefillEndS)
		}
		if r.used == runtime.PrefillUsedSwitch && s.PrefillDecodeTokens != 2 {
			t.Errorf("%s: %d prompt tokens through the decode graph before switching, want 2", r.name, s.PrefillDecodeTokens)
		}
		// Mode shared makes every rung shared, auto only the one that
		// takes the prompt.
		shared := r.used == runtime.PrefillUsedShared
		next := r.mode == "shared" && s.Rungs[1].CompileSource != ""
		if s.Rungs[0].Shared != shared || s.Rungs[1].Shared != next || shared && s.PrefillDecodeTokens != 0 {
			t.Errorf("%s: rungs shared %v, %v (%d prompt tokens through a decode graph); want %v, %v", r.name, s.Rungs[0].Shared, s.Rungs[1].Shared, s.PrefillDecodeTokens, shared, next)
		}
		// Auto weighs SmolLM2's own estimate (30 layers, about 97 MB read a
		// step: 0.24, not the 0.4 default) on the CPU where its graphs
		// attend bounded, 0.13 where they attend paged; the static
		// switching run compiles no shared graphs, so it weighs none.
		lo, hi := 0.15, 0.35
		if s.Attention == string(model.AttentionPaged) {
			lo, hi = 0.08, 0.2
		}
		if p := s.SharedStepPenalty; r.name == "auto" && (p < lo || p > hi) || r.name != "auto" && p != 0 {
			t.Errorf("%s: shared_step_penalty %v, want SmolLM2's estimate (%v-%v) for auto on the CPU with attention %s, else none", r.name, p, lo, hi, s.Attention)
		}
		if len(s.Predictions) != 17 {
			t.Fatalf("%s: %d predictions, want 17", r.name, len(s.Predictions))
		}
		if want == nil {
			want = s.Predictions
		} else if !slices.Equal(s.Predictions, want) {
			t.Errorf("%s: greedy tokens %v, --prefill graph gave %v", r.name, s.Predictions, want)
		}
	}
}

// TestPrefillGraphNeedsAChunk: asking for the prefill graph without one is
// a one-line error before any work.
func TestPrefillGraphNeedsAChunk(t *testing.T) {
	_, stderr, code := ovrun(t, nil, "run", "--model", testenv.Synth(t, "tiny", "F32"), "--prompt-tokens", "4", "--prefill", "graph", "--prefill-chunk", "0")
	if code == 0 || !containsLine(stderr, "--prefill graph needs a prefill graph") {
		t.Errorf("exit %d, stderr %q; want a one-line error about --prefill-chunk", code, stderr)
	}
	_, stderr, code = ovrun(t, nil, "run", "--model", testenv.Synth(t, "tiny", "F32"), "--prompt-tokens", "4", "--prefill", "eager")
	if code == 0 || !containsLine(stderr, "prefill mode \"eager\"") {
		t.Errorf("exit %d, stderr %q; want a one-line error naming the mode", code, stderr)
	}
}

// TestPrefillSharedRefusals: a shared graph needs a chunk above 1, a device
// that compiles dynamic shapes and attention other than static; each is
// a one-line error before any work.
func TestPrefillSharedRefusals(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--prefill-chunk", "1"}, "--prefill shared takes up to --prefill-chunk tokens per call: 1 is not above 1"},
		{[]string{"--device", "NPU"}, "--prefill shared needs dynamic shapes, which --device NPU does not compile"},
		{[]string{"--attention", "static"}, "--prefill shared needs a dynamic token axis"},
	} {
		for _, cmd := range []string{"run", "generate"} {
			args := append([]string{cmd, "--model", tiny, "--prompt-tokens", "4", "--prefill", "shared"}, tc.args...)
			_, stderr, code := ovrun(t, nil, args...)
			if code == 0 || !containsLine(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Errorf("%v: exit %d, stderr %q; want one line containing %q", args, code, stderr, tc.want)
			}
		}
	}
}

// containsLine reports whether stderr is one line containing want.
func containsLine(stderr, want string) bool {
	s := strings.TrimSpace(stderr)
	return strings.Contains(s, want) && !strings.Contains(s, "\n")
}
