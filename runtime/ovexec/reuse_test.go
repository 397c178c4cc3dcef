package ovexec

import (
	"context"
	"slices"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// TestPagedRungsReuseOneGraph: with paged attention a ladder compiles each
// kind of graph once and later rungs are new infer requests on it; the
// tokens are those of a ladder that compiles every rung, boundaries verify,
// and the shared compiled model outlives the rung that compiled it.
func TestPagedRungsReuseOneGraph(t *testing.T) {
	ck, err := model.Load(testenv.Synth(t, "tiny", "F32"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	run := func(perRung bool) *runtime.Summary {
		comp, err := NewCompiler(ck, Options{Device: "CPU", Precision: "f32", GraphPerRung: perRung})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := comp.Close(); err != nil {
				t.Error(err)
			}
		}()
		if !comp.Paged() {
			t.Skip("paged attention unavailable:", comp.PagedUnavailable())
		}
		vocab := ck.Config.VocabSize
		s, err := runtime.Run(context.Background(), comp, comp.KVShape(), runtime.RunConfig{
			Ladder: runtime.Ladder{32, 64, 128, 256}, Policy: runtime.GrowOneAhead,
			Prompt: runtime.SeededTokens(5, 10, vocab), DecodeTokens: 200, Forced: runtime.SeededTokens(6, 200, vocab),
			Verify: true, PrefillChunk: 16,
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range s.Boundaries {
			if !b.Verified || !b.Top1OK || b.Cosine < 0.9999 {
				t.Errorf("per rung %v: boundary %d->%d: verified %v top-1 %v cosine %.7f", perRung, b.From, b.To, b.Verified, b.Top1OK, b.Cosine)
			}
		}
		return s
	}
	reused, each := run(false), run(true)
	if !slices.Equal(reused.Predictions, each.Predictions) || len(reused.Predictions) != 201 {
		t.Fatalf("reusing one graph predicts %v, compiling each rung %v", reused.Predictions, each.Predictions)
	}
	var sources []string
	for _, r := range reused.Rungs {
		sources = append(sources, r.CompileSource)
	}
	// The first rung may be a shared graph (the prompt), the second the
	// decode graph; every rung after those reuses one of them.
	if n := len(sources); n != 4 || sources[n-1] != runtime.OriginReused || sources[n-2] != runtime.OriginReused {
		t.Errorf("rungs came from %v, want the last two reused", sources)
	}
	for _, r := range reused.Rungs {
		// Made at once where asked, not queued behind decoding.
		if r.CompileSource == runtime.OriginReused && !r.ReadyAtBoundary {
			t.Errorf("reused rung %d was not ready at its boundary", r.Capacity)
		}
	}
	for _, r := range each.Rungs {
		if r.CompileSource != runtime.OriginCompiled {
			t.Errorf("--graph-per-rung: rung %d %s, want compiled", r.Capacity, r.CompileSource)
		}
	}
	if runtime.MappedKVBytes() != 0 {
		t.Errorf("%d bytes of KV still mapped", runtime.MappedKVBytes())
	}
}

// TestReusedGraphOutlivesItsFirstRung closes the executable that compiled
// the graph before the one that reuses it, which must still run; once both
// are closed the next compile compiles again.
func TestReusedGraphOutlivesItsFirstRung(t *testing.T) {
	ck, comp := openOV(t, "tiny", "F32")
	if !comp.Paged() {
		t.Skip("paged attention unavailable:", comp.PagedUnavailable())
	}
	ctx := context.Background()
	spec := func(c int) model.GraphSpec { return model.GraphSpec{Capacity: c, Chunk: 1} }
	if comp.Reuses(spec(64)) {
		t.Fatal("Reuses before any graph was compiled")
	}
	first, err := comp.Compile(ctx, spec(32))
	if err != nil {
		t.Fatal(err)
	}
	if !comp.Reuses(spec(64)) || comp.Reuses(model.GraphSpec{Capacity: 64, Chunk: 16}) {
		t.Error("Reuses: want the decode graph of 64 reused, a prefill graph not")
	}
	second, err := comp.Compile(ctx, spec(64))
	if err != nil {
		t.Fatal(err)
	}
	if o := originOf(second); o != runtime.OriginReused || originOf(first) != runtime.OriginCompiled {
		t.Fatalf("origins %s, %s; want compiled, reused", originOf(first), o)
	}
	if c := second.Spec().Capacity; c != 64 {
		t.Errorf("the reused graph serves capacity %d, want 64", c)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	shape := comp.KVShape()
	mem, kv, err := runtime.AllocFullView(shape, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Free()
	if err := second.Bind(kv); err != nil {
		t.Fatal(err)
	}
	for p := range 40 {
		logits, err := second.Step([]int64{int64(p % ck.Config.VocabSize)}, p)
		if err != nil || len(logits) != ck.Config.VocabSize {
			t.Fatalf("step %d after the first rung closed: %d logits, %v", p, len(logits), err)
		}
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := comp.Compile(ctx, spec(32))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if o := originOf(again); o != runtime.OriginCompiled {
		t.Errorf("after every user closed, the graph came from %s, want compiled", o)
	}
}

func originOf(exe runtime.Executable) string { return exe.(*executable).Origin().Source }
