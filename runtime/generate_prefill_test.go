package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/model"
)

// TestGeneratePrefillModesAgree runs one prompt through every prefill mode
// of Generate: identical tokens, a prefill graph compiled exactly where the
// mode says (never for decode, always for graph), and what the prompt went
// through recorded.
func TestGeneratePrefillModesAgree(t *testing.T) {
	var want []int64
	for _, mode := range []PrefillMode{PrefillGraph, PrefillDecode, PrefillAuto} {
		t.Run(string(mode), func(t *testing.T) {
			f := newFakeCompiler(testShape, 97, nil)
			res, err := Generate(context.Background(), f, testShape, GenerateConfig{
				Capacity: 64, PrefillChunk: 8, Prefill: mode, Prompt: SeededTokens(4, 21, 97), MaxNewTokens: 12})
			if err != nil {
				t.Fatal(err)
			}
			if want == nil {
				want = res.Tokens
			} else if !slices.Equal(res.Tokens, want) {
				t.Errorf("tokens %v, graph mode gave %v", res.Tokens, want)
			}
			prefills := 0
			for _, s := range f.calls {
				if s.Chunk > 1 {
					prefills++
				}
			}
			wantUsed := map[PrefillMode][]string{
				PrefillGraph:  {PrefillUsedGraph},
				PrefillDecode: {PrefillUsedDecode},
				PrefillAuto:   {PrefillUsedDecode, PrefillUsedSwitch},
			}[mode]
			if !slices.Contains(wantUsed, res.PrefillUsed) || res.PrefillReason == "" {
				t.Errorf("prefill used %q (%q), want one of %v with a reason", res.PrefillUsed, res.PrefillReason, wantUsed)
			}
			if wantPre := map[string]int{PrefillUsedGraph: 1, PrefillUsedSwitch: 1}[res.PrefillUsed]; prefills != wantPre {
				t.Errorf("%d prefill graphs compiled for %s, want %d", prefills, res.PrefillUsed, wantPre)
			}
			if f.open.Load() != 0 {
				t.Errorf("%d executables left open", f.open.Load())
			}
		})
	}
}

// TestGenerateCompilesPrefillBesideDecode runs a prompt long enough for
// auto mode's shared graph on a compiler whose graphs share one copy of the
// weights: a prefill graph and a static decode graph are compiled instead
// (no shared graph), the tokens are those of the decode graph alone, and a
// prefill graph that fails to compile fails the run with nothing left open.
func TestGenerateCompilesPrefillBesideDecode(t *testing.T) {
	prompt := SeededTokens(4, 40, 97)
	run := func(f *fakeCompiler, mode PrefillMode) (*GenerateResult, error) {
		return Generate(context.Background(), f, testShape, GenerateConfig{
			Capacity: 64, PrefillChunk: 16, Prefill: mode, Prompt: prompt, MaxNewTokens: 12})
	}
	want, err := run(newFakeCompiler(testShape, 97, nil), PrefillDecode)
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeCompiler(testShape, 97, nil)
	f.shared, f.oneCopy = true, true
	res, err := run(f, PrefillAuto)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tokens, want.Tokens) {
		t.Errorf("tokens %v, the decode graph alone gave %v", res.Tokens, want.Tokens)
	}
	var kinds []string
	for _, s := range f.calls {
		kinds = append(kinds, fmt.Sprintf("chunk %d shared %v", s.Chunk, s.Shared))
	}
	slices.Sort(kinds)
	if want := []string{"chunk 1 shared false", "chunk 16 shared false"}; !slices.Equal(kinds, want) {
		t.Errorf("compiled %v, want a decode and a prefill graph %v", kinds, want)
	}
	if res.PrefillUsed != PrefillUsedGraph || !strings.Contains(res.PrefillReason, "beside the decode graph") {
		t.Errorf("prefill used %q (%q), want the prefill graph compiled beside the decode graph", res.PrefillUsed, res.PrefillReason)
	}
	if f.open.Load() != 0 {
		t.Errorf("%d executables left open", f.open.Load())
	}

	f = newFakeCompiler(testShape, 97, nil)
	f.shared, f.oneCopy, f.failPre = true, true, true
	if _, err := run(f, PrefillAuto); !errors.Is(err, errFakeCompile) {
		t.Errorf("a failed prefill graph: %v, want the compile's error", err)
	}
	if f.open.Load() != 0 {
		t.Errorf("a failed prefill graph left %d executables open", f.open.Load())
	}

	f = newFakeCompiler(testShape, 97, nil)
	f.shared = true // weights copied per graph: one shared graph, as before
	if res, err := run(f, PrefillAuto); err != nil || res.PrefillUsed != PrefillUsedShared || len(f.calls) != 1 {
		t.Errorf("without one copy of the weights: used %q, %d compiles, %v; want one shared graph", res.PrefillUsed, len(f.calls), err)
	}
}

// TestPrefillGraphPays pins auto mode's rule at its edge.
func TestPrefillGraphPays(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rest       int
		per        int // tokens a decode call
		step, est  float64
		wantPays   bool
		wantGraphS float64
		wantFeedS  float64
	}{
		{name: "short rest: feed it", rest: 15, per: 1, step: 0.02, est: 2.5, wantPays: false, wantGraphS: 2.52, wantFeedS: 0.3},
		{name: "long rest: compile", rest: 510, per: 1, step: 0.02, est: 2.5, wantPays: true, wantGraphS: 2.66, wantFeedS: 10.2},
		{name: "a tie feeds", rest: 64, per: 1, step: 0.5, est: 31.5, wantPays: false, wantGraphS: 32, wantFeedS: 32},
		// 8 tokens a decode call: 64 calls for 510 tokens, the last one short.
		{name: "8 a call: feed it", rest: 510, per: 8, step: 0.03, est: 2.5, wantPays: false, wantGraphS: 2.74, wantFeedS: 1.92},
		{name: "8 a call: compile", rest: 510, per: 8, step: 0.03, est: 1.5, wantPays: true, wantGraphS: 1.74, wantFeedS: 1.92},
	} {
		t.Run(tc.name, func(t *testing.T) {
			feed, graph, pays := prefillGraphPays(tc.rest, tc.per, 64, tc.step, tc.est)
			if pays != tc.wantPays || abs(graph-tc.wantGraphS) > 1e-9 || abs(feed-tc.wantFeedS) > 1e-9 {
				t.Errorf("prefillGraphPays(%d, %d, 64, %g, %g) = %g, %g, %v; want feed %g, graph %g, pays %v", tc.rest, tc.per, tc.step, tc.est, feed, graph, pays, tc.wantFeedS, tc.wantGraphS, tc.wantPays)
			}
		})
	}
}

// cachedCompiler is a fake compiler with a compiled-rung cache that holds
// the specs in cached.
type cachedCompiler struct {
	*fakeCompiler
	cached map[model.GraphSpec]bool
}

func (c cachedCompiler) Cached(spec model.GraphSpec) bool { return c.cached[spec] }

// TestPrefillEstimate pins fromDecodeGraph, what auto mode takes a
// prefill graph to cost: the decode graph's compile time, unless the
// decode graph was imported (its import time is no compile time, only a
// lower bound): then, once that bound pays, the import time where the
// prefill graph is cached too, else the compile time the cache recorded,
// else unknown (never worth compiling).
func TestPrefillEstimate(t *testing.T) {
	pre := model.GraphSpec{Capacity: 256, Chunk: 64}
	f := newFakeCompiler(testShape, 97, nil)
	exe := &fakeExecutable{}
	imported := func(compiledS float64) Executable {
		return originExecutable{exe, Origin{Source: OriginImported, ImportS: 0.11, CompiledS: compiledS}}
	}
	for _, tc := range []struct {
		name      string
		dec       Executable
		comp      Compiler
		want      float64
		wantExact bool // an exact estimate follows
	}{
		{"compiled", originExecutable{exe, Origin{Source: OriginCompiled}}, f, 0.11, false},
		{"no origin", exe, f, 0.11, false},
		{"imported, prefill graph cached", imported(0.8), cachedCompiler{f, map[model.GraphSpec]bool{pre: true}}, 0.11, true},
		{"imported, compile time recorded", imported(0.8), cachedCompiler{f, nil}, 0.8, true},
		{"imported, nothing recorded", imported(0), f, math.Inf(1), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := fromDecodeGraph(tc.dec, 0.11, pre, tc.comp)
			if a.est != 0.11 || a.source == "" || (a.exact != nil) != tc.wantExact {
				t.Fatalf("first estimate %g (%q), exact %v; want 0.11, exact %v", a.est, a.source, a.exact != nil, tc.wantExact)
			}
			a.chunk = 64
			// 400 tokens left at 10 ms a step: 4 s through the decode graph
			// against 0.11 s + 7 calls: the lower bound pays.
			a.fed(0, 1, 0.01, 402)
			_, pays := a.fed(1, 2, 0.01, 402)
			if a.est != tc.want || pays != (tc.want < 1) {
				t.Errorf("estimate %g (%q), pays %v; want %g", a.est, a.source, pays, tc.want)
			}
		})
	}
	a := autoFeed{chunk: 64, est: math.Inf(1), source: "unknown"}
	for k := range 20 {
		if _, pays := a.fed(k, k+1, 0.01, 500); pays {
			t.Fatalf("an unknown compile cost paid after %d tokens", k+1)
		}
	}
	if r := a.stayedReason(500); strings.Contains(r, "Inf") {
		t.Errorf("reason %q prints an infinity", r)
	}
	// A prompt of one call of a kernel graph: its pace is that call's.
	one := autoFeed{per: 16, chunk: 512, est: 0.2, source: "measured"}
	one.fed(0, 16, 0.12, 16)
	if r := one.stayedReason(16); !strings.Contains(r, "120.0 ms a call of up to 16") {
		t.Errorf("reason %q: want the one call's 120.0 ms", r)
	}
}
