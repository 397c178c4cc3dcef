package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/tracing"
)

// prefillCompiles counts the prefill-graph compiles of a summary.
func prefillCompiles(s *Summary) (fg, bg int) {
	for _, c := range s.Compiles {
		if c.Kind == "prefill" {
			if c.Foreground {
				fg++
			} else {
				bg++
			}
		}
	}
	return fg, bg
}

// TestPrefillModesGiveIdenticalTokens runs every prefill mode on prompts
// that auto feeds through the decode graph, that it switches to the
// prefill graph partway through, and that span several chunks, under every
// policy: the predictions must not depend on how the prompt was processed
// (the fake's logits hash every cached row, so a row written at the wrong
// position, or twice, or not at all, changes them).
func TestPrefillModesGiveIdenticalTokens(t *testing.T) {
	for _, prompt := range []int{1, 2, 5, 40} {
		for _, p := range Policies {
			var want []int64
			for _, mode := range []PrefillMode{PrefillGraph, PrefillDecode, PrefillAuto, PrefillShared} {
				clock := newFakeClock()
				f := newFakeCompiler(testShape, 97, clock)
				f.compileT, f.stepT = 10*time.Millisecond, time.Millisecond
				s, err := fakeRun(t, f, RunConfig{Ladder: Ladder{64, 128}, Policy: p, Prompt: SeededTokens(3, prompt, 97),
					DecodeTokens: 80, PrefillChunk: 16, Prefill: mode})
				if err != nil {
					t.Fatalf("prompt %d, %s, %s: %v", prompt, p, mode, err)
				}
				if want == nil {
					want = s.Predictions
				} else if !slices.Equal(s.Predictions, want) {
					t.Errorf("prompt %d, %s: --prefill %s predicts %v..., graph %v...", prompt, p, mode, s.Predictions[:4], want[:4])
				}
				if s.PrefillMode != string(mode) || s.PrefillUsed == "" || s.PrefillReason == "" {
					t.Errorf("prompt %d, %s, %s: summary says mode %q, used %q, reason %q", prompt, p, mode, s.PrefillMode, s.PrefillUsed, s.PrefillReason)
				}
				if mode == PrefillShared {
					for _, c := range f.calls {
						if !c.Shared || c.Chunk != 16 {
							t.Errorf("prompt %d, %s, shared: compiled %s, want only shared graphs of 16 tokens", prompt, p, c.Name())
						}
					}
					if s.PrefillUsed != PrefillUsedShared {
						t.Errorf("prompt %d, %s, shared: used %q", prompt, p, s.PrefillUsed)
					}
				}
			}
		}
	}
}

// TestPrefillAutoChoosesByPromptLength checks auto's choice on one rung
// (no background compiles to disturb the simulated clock): the decode
// graph compiles in 10 ms and steps in 1 ms, so a 5-token prompt is fed
// through it and never compiles the prefill graph, while a 40-token prompt
// switches after its second token (38 ms left against about 10 + 3 ms) and
// the first token waits for the prefill graph's compile.
func TestPrefillAutoChoosesByPromptLength(t *testing.T) {
	run := func(prompt int, profile *compilecost.Profile) *Summary {
		clock := newFakeClock()
		f := newFakeCompiler(testShape, 97, clock)
		f.compileT, f.stepT = 10*time.Millisecond, time.Millisecond
		s, err := fakeRun(t, f, RunConfig{Ladder: Ladder{64}, Policy: GrowOneAhead, Prompt: SeededTokens(3, prompt, 97),
			DecodeTokens: 4, PrefillChunk: 16, Prefill: PrefillAuto, CompileCost: profile})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	short := run(5, nil)
	if fg, bg := prefillCompiles(short); short.PrefillUsed != PrefillUsedDecode || fg+bg != 0 || short.PrefillDecodeTokens != 5 {
		t.Errorf("5 tokens: used %q (%d through decode), %d+%d prefill compiles; want decode and none (%s)", short.PrefillUsed, short.PrefillDecodeTokens, fg, bg, short.PrefillReason)
	}
	if !near(short.ForegroundCompileS, 0.010) || !near(short.TTFTS, short.PrefillEndS) || !near(short.PrefillS, 0.005) {
		t.Errorf("5 tokens: foreground %.3f s, prefill %.3f s, ttft %.3f s (prefill end %.3f s); want 0.010, 0.005, the prefill's end",
			short.ForegroundCompileS, short.PrefillS, short.TTFTS, short.PrefillEndS)
	}

	long := run(40, nil)
	if fg, _ := prefillCompiles(long); long.PrefillUsed != PrefillUsedSwitch || fg != 1 || long.PrefillDecodeTokens != 2 {
		t.Errorf("40 tokens: used %q after %d decode tokens, %d foreground prefill compiles; want decode+graph after 2 and one (%s)", long.PrefillUsed, long.PrefillDecodeTokens, fg, long.PrefillReason)
	}
	// Decode compile 10 ms + prefill compile 10 ms; 2 decode steps + 3 prefill calls.
	if !near(long.ForegroundCompileS, 0.020) || !near(long.PrefillS, 0.005) {
		t.Errorf("40 tokens: foreground %.3f s, prefill %.3f s; want 0.020 (both graphs) and 0.005 (2 steps, 3 calls)", long.ForegroundCompileS, long.PrefillS)
	}

	// A profile saying the prefill graph compiles in 100 ms after the decode
	// graph keeps a 40-token prompt (40 ms) on the decode graph.
	slow := &compilecost.Profile{Model: "m", Device: "CPU", Rungs: []compilecost.Rung{{Capacity: 64, CompileS: []float64{0.01},
		Prefill: []compilecost.PrefillCost{{Chunk: 16, FirstS: []float64{0.05}, SuccessorS: []float64{0.1}}}}}}
	if s := run(40, slow); s.PrefillUsed != PrefillUsedDecode || !strings.Contains(s.PrefillReason, "profile") {
		t.Errorf("40 tokens with a 100 ms prefill compile in the profile: used %q (%s); want decode, citing the profile", s.PrefillUsed, s.PrefillReason)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// TestPrefillAutoChoosesSharedGraphs checks auto's choice of a shared first
// rung (compilecost.SharedPays: a prompt of n tokens, a rung that decodes
// d, shared when n > p d, p the compiler's estimate of the shared graph's
// slower steps: 0.4 by default, less for a wide model): only on a compiler that compiles shared
// graphs, only for the rung that takes the prompt (the next rung is a
// decode graph), never for a one-token prompt, and never on a ladder kept
// for prompts to come; Generate chooses by the same rule.
func TestPrefillAutoChoosesSharedGraphs(t *testing.T) {
	run := func(shared bool, penalty float64, prompt, decode int) (*Summary, *fakeCompiler) {
		f := newFakeCompiler(testShape, 97, newFakeClock())
		f.shared, f.penalty = shared, penalty
		s, err := fakeRun(t, f, RunConfig{Ladder: Ladder{64, 128}, Policy: GrowOneAhead, Prompt: SeededTokens(3, prompt, 97),
			DecodeTokens: decode, PrefillChunk: 16, Prefill: PrefillAuto})
		if err != nil {
			t.Fatal(err)
		}
		return s, f
	}
	for _, tc := range []struct {
		name           string
		shared         bool
		penalty        float64
		prompt, decode int
		want           bool
	}{
		{"long prompt", true, 0, 40, 60, true},                        // 40 > 0.4 x min(60, 24)
		{"short prompt, long decode", true, 0, 4, 100, false},         // 4 < 0.4 x 60
		{"short prompt, long decode, wide", true, 0.03, 4, 100, true}, // 4 > 0.03 x 60
		{"one token", true, 0.03, 1, 4, false},
		{"no shared graphs", false, 0.03, 40, 60, false},
	} {
		s, f := run(tc.shared, tc.penalty, tc.prompt, tc.decode)
		if got := s.PrefillUsed == PrefillUsedShared; got != tc.want || s.Rungs[0].Shared != tc.want || s.Rungs[1].Shared {
			t.Errorf("%s: used %q, rungs shared %v, %v (%s); want the first rung shared: %v", tc.name, s.PrefillUsed, s.Rungs[0].Shared, s.Rungs[1].Shared, s.PrefillReason, tc.want)
		}
		for _, c := range f.calls {
			if !decodes(c) {
				t.Errorf("%s: compiled a prefill graph %s", tc.name, c.Name())
			}
		}
		// The summary keeps the estimate auto weighed (none without
		// shared graphs).
		want := 0.0
		if tc.shared {
			want = f.SharedStepPenalty()
		}
		if s.SharedStepPenalty != want {
			t.Errorf("%s: shared_step_penalty %v, want %v", tc.name, s.SharedStepPenalty, want)
		}
	}

	f := newFakeCompiler(testShape, 97, newFakeClock())
	f.shared = true
	l, err := NewCompiledLadder(context.Background(), f, LadderConfig{Ladder: Ladder{64}, Policy: GrowOneAhead, Shape: testShape,
		PrefillChunk: 16, Prefill: PrefillAuto, KeepRungs: true})
	if err != nil {
		t.Fatal(err)
	}
	q, err := l.NewSequence(SequenceConfig{Prompt: SeededTokens(3, 40, 97), DecodeTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	s := q.Finish(q.Run(context.Background()))
	if err := errors.Join(q.Close(), l.Close()); err != nil {
		t.Fatal(err)
	}
	if s.PrefillUsed == PrefillUsedShared || s.SharedStepPenalty != 0 {
		t.Errorf("kept ladder: used %q, shared_step_penalty %v; want no shared rung weighed", s.PrefillUsed, s.SharedStepPenalty)
	}

	g := newFakeCompiler(testShape, 97, nil)
	g.shared = true
	res, err := Generate(context.Background(), g, testShape, GenerateConfig{Capacity: 64, PrefillChunk: 16, Prefill: PrefillAuto,
		Prompt: SeededTokens(3, 40, 97), MaxNewTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	if res.PrefillUsed != PrefillUsedShared || len(g.calls) != 1 || !g.calls[0].Shared || !strings.HasPrefix(res.PrefillReason, "auto:") ||
		res.SharedStepPenalty != compilecost.DefaultSharedStepPenalty {
		t.Errorf("generate: used %q (%s, penalty %v), compiled %v; want one shared graph, weighed at the default", res.PrefillUsed, res.PrefillReason, res.SharedStepPenalty, g.calls)
	}
}

// TestPrefillAutoOnASharedLadder: on a ladder that keeps its graphs, a
// short prompt goes through the decode graph and the prefill graph is
// compiled in the background for later prompts, which then use it.
func TestPrefillAutoOnASharedLadder(t *testing.T) {
	clock := newFakeClock()
	f := newFakeCompiler(testShape, 97, clock)
	f.compileT, f.stepT = 10*time.Millisecond, time.Millisecond
	l, err := NewCompiledLadder(context.Background(), f, LadderConfig{Ladder: Ladder{64}, Policy: GrowOneAhead, Shape: testShape,
		PrefillChunk: 16, Prefill: PrefillAuto, KeepRungs: true, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	seq := func(prompt int) *Summary {
		q, err := l.NewSequence(SequenceConfig{Prompt: SeededTokens(uint64(prompt), prompt, 97), DecodeTokens: 3})
		if err != nil {
			t.Fatal(err)
		}
		err = q.Run(context.Background())
		s := q.Finish(err)
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := seq(5)
	if first.PrefillUsed != PrefillUsedDecode {
		t.Errorf("first prompt: used %q, want decode", first.PrefillUsed)
	}
	// Wait for the background prefill compile.
	for range 1000 {
		if r := l.readyPrefill(64); r != nil {
			if err := l.releasePrefill(r); err != nil {
				t.Fatal(err)
			}
			break
		}
		time.Sleep(time.Millisecond)
	}
	second := seq(30)
	if second.PrefillUsed != PrefillUsedGraph || !strings.Contains(second.PrefillReason, "already compiled") {
		t.Errorf("second prompt: used %q (%s); want the prefill graph compiled in the background", second.PrefillUsed, second.PrefillReason)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := f.open.Load(); n != 0 {
		t.Errorf("%d executables left open", n)
	}
	var bg int
	for _, c := range l.Compiles(time.Now()) {
		if c.Kind == "prefill" && !c.Foreground {
			bg++
		}
	}
	if bg != 1 {
		t.Errorf("%d background prefill compiles recorded, want 1", bg)
	}
}

func TestPrefillModeErrors(t *testing.T) {
	f := newFakeCompiler(testShape, 97, nil)
	if _, err := NewCompiledLadder(context.Background(), f, LadderConfig{Ladder: Ladder{64}, Policy: GrowOneAhead, Shape: testShape,
		PrefillChunk: 1, Prefill: PrefillGraph}); err == nil || !strings.Contains(err.Error(), "prefill chunk") {
		t.Errorf("graph mode with chunk 1: %v, want an error naming the prefill chunk", err)
	}
	if _, err := ParsePrefillMode("eager"); err == nil {
		t.Error("ParsePrefillMode accepted eager")
	}
	s, err := fakeRun(t, f, RunConfig{Ladder: Ladder{64}, Policy: GrowOneAhead, Prompt: SeededTokens(3, 20, 97),
		DecodeTokens: 2, PrefillChunk: 0, Prefill: PrefillAuto})
	if err != nil {
		t.Fatal(err)
	}
	if s.PrefillUsed != PrefillUsedDecode || !strings.Contains(s.PrefillReason, "chunk") {
		t.Errorf("auto with chunk 0: used %q (%s), want decode because there is no prefill graph", s.PrefillUsed, s.PrefillReason)
	}
}

// TestPrefillChoiceInSpans: the prefill span and the run span carry the
// mode, what the prompt went through and why, and the time to first token.
func TestPrefillChoiceInSpans(t *testing.T) {
	s := traceSummary()
	s.PrefillMode, s.PrefillUsed, s.PrefillReason, s.PrefillDecodeTokens, s.TTFTS = "auto", PrefillUsedSwitch, "the rest was long", 2, 1.3
	var prefill, root map[attribute.Key]attribute.Value
	for _, sp := range recordSpans(t, s, time.Unix(1000, 0)) {
		switch sp.Name() {
		case tracing.SpanPrefill:
			prefill = attrsOf(sp)
		case tracing.SpanRun:
			root = attrsOf(sp)
		}
	}
	if prefill[tracing.AttrPrefillMode].AsString() != "auto" || prefill[tracing.AttrPrefillUsed].AsString() != PrefillUsedSwitch ||
		prefill[tracing.AttrPrefillReason].AsString() != "the rest was long" || prefill[tracing.AttrPrefillDecodeTokens].AsInt64() != 2 {
		t.Errorf("prefill span attributes %v", prefill)
	}
	if root[tracing.AttrTTFTS].AsFloat64() != 1.3 || root[tracing.AttrPrefillUsed].AsString() != PrefillUsedSwitch {
		t.Errorf("run span attributes %v", root)
	}
}

// TestPrefillAutoLaunchesTheNextRungAfterThePrompt: in auto mode the first
// token may still wait for the prefill graph's compile, so binding the
// first rung (which launches the next rung's background compile) waits for
// the prompt instead of competing with it for the cores.
func TestPrefillAutoLaunchesTheNextRungAfterThePrompt(t *testing.T) {
	for _, prompt := range []int{5, 40} {
		clock := newFakeClock()
		f := newFakeCompiler(testShape, 97, clock)
		f.compileT, f.stepT = 10*time.Millisecond, time.Millisecond
		s, err := fakeRun(t, f, RunConfig{Ladder: Ladder{64, 128}, Policy: GrowOneAhead, Prompt: SeededTokens(3, prompt, 97),
			DecodeTokens: 80, PrefillChunk: 16, Prefill: PrefillAuto})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range s.Compiles {
			if c.Capacity == 128 && c.StartS < s.PrefillEndS {
				t.Errorf("prompt %d: rung 128 compiled from %.3f s, before the prompt ended at %.3f s", prompt, c.StartS, s.PrefillEndS)
			}
		}
	}
}

// TestPrefillAutoSurvivesAFailedPrefillGraph: when the prefill graph auto
// switches to fails to compile, the decode graph takes the rest of the
// prompt and the run gives the tokens a run without it gives.
func TestPrefillAutoSurvivesAFailedPrefillGraph(t *testing.T) {
	run := func(failPre bool, mode PrefillMode) *Summary {
		clock := newFakeClock()
		f := newFakeCompiler(testShape, 97, clock)
		f.compileT, f.stepT, f.failPre = 10*time.Millisecond, time.Millisecond, failPre
		s, err := fakeRun(t, f, RunConfig{Ladder: Ladder{64}, Policy: GrowOneAhead, Prompt: SeededTokens(3, 40, 97),
			DecodeTokens: 4, PrefillChunk: 16, Prefill: mode})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	want := run(false, PrefillDecode).Predictions
	s := run(true, PrefillAuto)
	if !slices.Equal(s.Predictions, want) || s.PrefillUsed != PrefillUsedDecode || s.PrefillDecodeTokens != 40 {
		t.Errorf("used %q for %d tokens (%s), predictions %v; want the decode graph for all 40 and %v", s.PrefillUsed, s.PrefillDecodeTokens, s.PrefillReason, s.Predictions, want)
	}
	if fg, _ := prefillCompiles(s); fg != 1 || len(s.Notes) == 0 {
		t.Errorf("%d prefill compiles recorded, notes %v; want the failed one and a note", fg, s.Notes)
	}
}

// TestDecodeGraphOfSeveralTokensACall runs prompts through decode graphs
// that take 8 tokens a call (StepTokener, as ovexec's kernel decode
// graphs do) in Generate and on the ladder, in modes decode and auto:
// the same tokens as a token a call, every decode-graph call of the
// prompt full but the last, and the decode steps one token each.
func TestDecodeGraphOfSeveralTokensACall(t *testing.T) {
	for _, n := range []int{1, 5, 8, 17, 40} {
		prompt := SeededTokens(9, n, 97)
		for _, mode := range []PrefillMode{PrefillDecode, PrefillAuto} {
			var want, wantRun []int64
			for _, per := range []int{1, 8} {
				name := fmt.Sprintf("prompt %d, %s, %d a call", n, mode, per)
				f := newFakeCompiler(testShape, 97, nil)
				f.perCall = per
				res, err := Generate(context.Background(), f, testShape, GenerateConfig{
					Capacity: 64, PrefillChunk: 16, Prefill: mode, Prompt: prompt, MaxNewTokens: 10})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if want == nil {
					want = res.Tokens
				} else if !slices.Equal(res.Tokens, want) {
					t.Errorf("%s: Generate gave %v, a token a call %v", name, res.Tokens, want)
				}
				if mode == PrefillDecode {
					checkCallSizes(t, name, f.sizes, n, per, 9)
				}

				clock := newFakeClock()
				g := newFakeCompiler(testShape, 97, clock)
				g.perCall, g.compileT, g.stepT = per, 10*time.Millisecond, time.Millisecond
				s, err := fakeRun(t, g, RunConfig{Ladder: Ladder{64, 128}, Policy: Policies[0], Prompt: prompt,
					DecodeTokens: 30, PrefillChunk: 16, Prefill: mode})
				if err != nil {
					t.Fatalf("%s, ladder: %v", name, err)
				}
				if wantRun == nil {
					wantRun = s.Predictions
				} else if !slices.Equal(s.Predictions, wantRun) {
					t.Errorf("%s, ladder: predicts %v..., a token a call %v...", name, s.Predictions[:4], wantRun[:4])
				}
			}
		}
	}
}

// checkCallSizes checks the decode graph's calls of a prompt of n tokens
// fed per a call, then steps one token each.
func checkCallSizes(t *testing.T, name string, sizes []int, n, per, steps int) {
	t.Helper()
	var want []int
	for k := 0; k < n; k += per {
		want = append(want, min(per, n-k))
	}
	for range steps {
		want = append(want, 1)
	}
	if !slices.Equal(sizes, want) {
		t.Errorf("%s: decode graph calls of %v tokens, want %v", name, sizes, want)
	}
}
