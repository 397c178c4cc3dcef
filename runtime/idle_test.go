package runtime

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestLadderFreesIdleRungs: a kept ladder frees the rungs (never the
// first) that no sequence has used for RungIdle, keeps the ones a sequence
// is on or right below, and a later sequence gets them compiled again one
// ahead, predicting exactly what the first sequence predicted.
func TestLadderFreesIdleRungs(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	f := newFakeCompiler(testShape, 50, nil)
	l, err := NewCompiledLadder(ctx, f, LadderConfig{Ladder: Ladder{16, 32, 64}, Policy: GrowOneAhead, Shape: testShape,
		KeepRungs: true, RungIdle: time.Hour, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	run := func(seed uint64) []int64 {
		q, err := l.NewSequence(SequenceConfig{Prompt: SeededTokens(seed, 4, 50), DecodeTokens: 55})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		return q.Summary().Predictions
	}
	first := run(1)
	if c, r := l.RungCounts(); c != 3 || r != 0 {
		t.Fatalf("after one sequence to rung 64: %d compiled, %d freed", c, r)
	}
	clock.Advance(30 * time.Minute)
	if freed, err := l.ReleaseIdle(clock.Now()); err != nil || len(freed) != 0 {
		t.Fatalf("after half the idle time: freed %v (%v)", freed, err)
	}
	clock.Advance(time.Hour)
	if freed, err := l.ReleaseIdle(clock.Now()); err != nil || !slices.Equal(freed, []int{32, 64}) {
		t.Fatalf("after the idle time: freed %v (%v), want rungs 32 and 64", freed, err)
	}
	if c, r := l.RungCounts(); c != 1 || r != 2 || f.liveGraphs(32) != 0 || f.liveGraphs(64) != 0 {
		t.Fatalf("%d compiled, %d freed, live graphs %d and %d", c, r, f.liveGraphs(32), f.liveGraphs(64))
	}
	if got := run(1); !slices.Equal(got, first) {
		t.Fatal("the same request predicts differently on rungs compiled again")
	}
	if f.compiled(16) != 1 || f.compiled(32) != 2 || f.compiled(64) != 2 {
		t.Fatalf("compiles: rung 16 %d, 32 %d, 64 %d; want 1, 2, 2", f.compiled(16), f.compiled(32), f.compiled(64))
	}

	// A sequence on the first rung keeps the rung above it (it may reach
	// it any step), not the one further up.
	q, err := l.NewSequence(SequenceConfig{Prompt: SeededTokens(2, 4, 50), DecodeTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	if freed, err := l.ReleaseIdle(clock.Now()); err != nil || !slices.Equal(freed, []int{64}) {
		t.Fatalf("with a sequence on rung 16: freed %v (%v), want only 64", freed, err)
	}
	if err := q.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := f.open.Load(); n != 0 || MappedKVBytes() != 0 {
		t.Errorf("%d executables open, %d KV bytes mapped after Close", n, MappedKVBytes())
	}
}
