package runtime

import (
	"context"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/ladder"
)

// The deadline rule of a kept ladder (ladder.Due), in virtual time: the
// timed backend compiles and steps in fixed times, so every launch falls
// on a known position.

var (
	dlCaps    = Ladder{32, 64, 128}
	dlCompile = map[int]time.Duration{32: 5 * time.Millisecond, 64: 10 * time.Millisecond, 128: 20 * time.Millisecond}
	dlStep    = map[int]time.Duration{32: time.Millisecond, 64: 2 * time.Millisecond, 128: 3 * time.Millisecond}
)

// dlProfile is a compile-cost profile of the timed backend whose compile
// figures are scale times the real ones.
func dlProfile(scale float64) *compilecost.Profile {
	p := &compilecost.Profile{Model: "timed", Device: "CPU"}
	for _, c := range dlCaps {
		p.Rungs = append(p.Rungs, compilecost.Rung{Capacity: c, CompileS: []float64{dlCompile[c].Seconds() * scale}})
	}
	return p
}

// dlLadder is a kept ladder on the timed backend, budgeted by profile;
// call it inside a synctest bubble.
func dlLadder(t *testing.T, profile *compilecost.Profile, idle time.Duration) *CompiledLadder {
	t.Helper()
	l, err := NewCompiledLadder(context.Background(), &timedCompiler{compile: dlCompile, step: dlStep},
		LadderConfig{Ladder: dlCaps, Policy: GrowOneAhead, Shape: testShape, CompileCost: profile, KeepRungs: true, RungIdle: idle})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// dlRun decodes one sequence on l to the end.
func dlRun(t *testing.T, l *CompiledLadder, seed uint64, prompt, decode int) *Summary {
	t.Helper()
	q, err := l.NewSequence(SequenceConfig{Prompt: SeededTokens(seed, prompt, 8), DecodeTokens: decode})
	if err != nil {
		t.Error(err)
		return nil
	}
	err = q.Run(context.Background())
	s := q.Finish(err)
	if err = q.Close(); err != nil || s.Error != "" {
		t.Errorf("sequence %d: %v %s", seed, err, s.Error)
	}
	return s
}

// counts are the ladder's launches by reason and misses by kind.
func counts(l *CompiledLadder) (launches, misses map[string]int) {
	bs := l.BudgetStats(time.Time{})
	return bs.Launches, bs.Misses
}

func budgetOf(bs []Budget, capacity int) Budget {
	for _, b := range bs {
		if b.Capacity == capacity {
			return b
		}
	}
	return Budget{}
}

// close6 compares seconds summed from virtual-time steps to 1 µs.
func close6(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

// One sequence, an exact profile: each rung is launched at the first step
// where the time left before the sequence needs it is within the predicted
// compile plus the margin, at the live rate, and nothing waits. Rung 64
// (10 ms) is due at position 20 (12 ms left at 1 ms a step); rung 128
// (20 ms) once rung 64's rate is measured and 24 ms are left (position 52
// at 2 ms a step).
func TestDeadlineLaunchesEachRungWhenItIsDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := dlLadder(t, dlProfile(1), 0)
		defer l.Close()
		s := dlRun(t, l, 1, 4, 100)
		if s.BoundaryWaitS != 0 {
			t.Errorf("waited %.4f s at boundaries", s.BoundaryWaitS)
		}
		b64, b128 := budgetOf(s.Budgets, 64), budgetOf(s.Budgets, 128)
		if b64.Reason != ladder.ReasonDeadline || !close6(b64.WindowS, 0.012) || b64.MissedS != 0 {
			t.Errorf("rung 64: %+v, want launched by deadline with 12 ms left", b64)
		}
		if b128.Reason != ladder.ReasonDeadline || !close6(b128.WindowS, 0.024) || !close6(b128.ActualS, 0.020) || !close6(b128.Error, 0) {
			t.Errorf("rung 128: %+v, want launched by deadline with 24 ms left, compiled in the predicted 20 ms", b128)
		}
		if launches, misses := counts(l); launches[ladder.ReasonDeadline] != 2 || len(launches) != 1 || misses[MissWaited] != 0 {
			t.Errorf("launches %v, misses %v", launches, misses)
		}
		// A short request after them launches nothing on a fresh ladder.
		fresh := dlLadder(t, dlProfile(40), 0)
		defer fresh.Close()
		dlRun(t, fresh, 2, 4, 27) // 31 tokens: it never leaves rung 32
		if launches, _ := counts(fresh); len(launches) != 0 {
			t.Errorf("a request that ends on rung 32 launched %v", launches)
		}
	})
}

// Several growing sequences make one deadline, the earliest: a sequence
// that joins late, with a prompt near the end of rung 32, launches rung 64
// at its first step (6 ms before it needs it, at the rate the first
// sequence measured), long before the first sequence would have at
// position 20, and neither waits. The two step in turn from one goroutine:
// a bubble's time stands still while a goroutine waits on a mutex, such as
// a rung's, held by one that sleeps.
func TestDeadlineOfSeveralSequencesIsTheEarliest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := dlLadder(t, dlProfile(1), 0)
		defer l.Close()
		start := func(seed uint64, prompt, decode int) *Sequence {
			q, err := l.NewSequence(SequenceConfig{Prompt: SeededTokens(seed, prompt, 8), DecodeTokens: decode})
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Start(ctx); err != nil {
				t.Fatal(err)
			}
			return q
		}
		a := start(1, 4, 60)
		for range 10 { // to position 15: its rate measured, rung 64 not due
			if err := a.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if l.rungs[1].job != nil {
			t.Fatal("rung 64 launched before it was due")
		}
		b := start(2, 25, 20)
		for !a.Done() || !b.Done() {
			for _, q := range []*Sequence{a, b} {
				if !q.Done() {
					if err := q.Step(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		for _, q := range []*Sequence{a, b} {
			if s := q.Finish(nil); s.BoundaryWaitS != 0 {
				t.Errorf("a sequence waited %.4f s at a boundary", s.BoundaryWaitS)
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if b64 := budgetOf(l.BudgetStats(time.Time{}).Budgets, 64); b64.Reason != ladder.ReasonDeadline || !close6(b64.WindowS, 0.006) {
			t.Errorf("rung 64 %+v, want launched by the late sequence's deadline, 6 ms ahead", b64)
		}
	})
}

// A profile 40x too slow launches every rung as soon as the rate is
// measured (earlier than an exact one; nothing waits); one 40x too fast
// launches rung 64 at the last step before it, the sequence waits and the
// miss is counted,
// and the correction learnt from that compile (x40) budgets rung 128 right.
func TestDeadlineWithAWrongProfile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := dlLadder(t, dlProfile(40), 0)
		defer l.Close()
		s := dlRun(t, l, 1, 4, 100)
		b64 := budgetOf(s.Budgets, 64)
		if s.BoundaryWaitS != 0 || b64.Reason != ladder.ReasonDeadline || !close6(b64.WindowS, 0.020) || b64.MissedS <= 0 {
			t.Errorf("40x too slow: waited %.4f s; rung 64 %+v, want launched at the first measured step (20 ms left), predicted to miss", s.BoundaryWaitS, b64)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		l := dlLadder(t, dlProfile(1.0/40), 0)
		defer l.Close()
		s := dlRun(t, l, 1, 4, 100)
		b64, b128 := budgetOf(s.Budgets, 64), budgetOf(s.Budgets, 128)
		if b64.Reason != ladder.ReasonDeadline || b64.WindowS != 0 || !close6(b64.WaitS, 0.010) || !close6(s.BoundaryWaitS, 0.010) {
			t.Errorf("40x too fast: waited %.4f s; rung 64 %+v, want launched at the last step before it and waited for its 10 ms", s.BoundaryWaitS, b64)
		}
		if b128.Reason != ladder.ReasonDeadline || !close6(b128.Correction, 40) || b128.WaitS != 0 || !close6(b128.Error, 0) {
			t.Errorf("rung 128 %+v, want the x40 correction learnt from rung 64 and no wait", b128)
		}
		if _, misses := counts(l); misses[MissWaited] != 1 || misses[MissActual] != 1 || misses[MissPredicted] != 1 {
			t.Errorf("misses %v, want rung 64 waited for and over its budget", misses)
		}
	})
}

// A rung freed after RungIdle is launched again by deadline for the next
// sequence that grows toward it, which predicts what the first did.
func TestDeadlineRelaunchesAFreedRung(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := dlLadder(t, dlProfile(1), time.Second)
		defer l.Close()
		first := dlRun(t, l, 1, 4, 100)
		time.Sleep(3 * time.Second)
		if c, r := l.RungCounts(); c != 1 || r != 2 {
			t.Fatalf("after the idle time: %d rungs compiled, %d freed; want 1 and 2", c, r)
		}
		again := dlRun(t, l, 1, 4, 100)
		if !slices.Equal(again.Predictions, first.Predictions) || again.BoundaryWaitS != 0 {
			t.Errorf("again: waited %.4f s, same predictions %v", again.BoundaryWaitS, slices.Equal(again.Predictions, first.Predictions))
		}
		if launches, _ := counts(l); launches[ladder.ReasonDeadline] != 4 {
			t.Errorf("launches %v, want rungs 64 and 128 twice by deadline", launches)
		}
	})
}

// A prompt that starts on a rung not compiled waits for it at admission
// (Await), with the predicted compile as its expected wait, and then
// starts without compiling anything in the foreground.
func TestAwaitLaunchesThePromptsRung(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := dlLadder(t, dlProfile(1), 0)
		defer l.Close()
		dlRun(t, l, 1, 4, 1) // the server's warm-up: rung 32
		expected := -2.0
		waited, err := l.Await(context.Background(), 40, func(s float64) error { expected = s; return nil })
		if err != nil || !waited || !close6(expected, 0.010) {
			t.Fatalf("Await: waited %v, expected %.4f s, %v; want a wait of the 10 ms compile", waited, expected, err)
		}
		if waited, err := l.Await(context.Background(), 40, nil); waited || err != nil {
			t.Errorf("a second Await waited %v (%v)", waited, err)
		}
		s := dlRun(t, l, 2, 40, 10)
		if s.ForegroundCompileS != 0 {
			t.Errorf("the sequence compiled %.4f s in the foreground after admission", s.ForegroundCompileS)
		}
		if b := budgetOf(s.Budgets, 64); b.Reason != ladder.ReasonAdmission || !close6(b.WaitS, 0.010) {
			t.Errorf("rung 64 %+v, want launched at admission and waited for", b)
		}
	})
}

// A sequence that reaches a rung before any rate was measured (a prompt
// 7 tokens from the boundary on a fresh ladder) launches it there, on the
// worker and under its budget: the wait is counted as a missed deadline.
func TestDeadlineLaunchesAtTheBoundaryWithoutARate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := dlLadder(t, dlProfile(1), 0)
		defer l.Close()
		s := dlRun(t, l, 1, 25, 10)
		if b := budgetOf(s.Budgets, 64); b.Reason != ladder.ReasonBoundary || !close6(b.WaitS, 0.010) || !close6(b.ActualS, 0.010) {
			t.Errorf("rung 64 %+v, want launched at the boundary and waited for", b)
		}
		if _, misses := counts(l); misses[MissWaited] != 1 {
			t.Errorf("misses %v", misses)
		}
	})
}
