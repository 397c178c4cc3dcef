package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/ladder"
	"github.com/ovtoolkit/ovrun/runtime"
)

// The static form's budgets and idle release, in virtual time: the fake
// compiles in 10 ms and steps in 1 ms, so one position of a sequence takes
// one 1 ms iteration. One sequence at most: a variant of each rung, no
// batch sizes launched beside them.

func budgetConfig(scale float64, idle time.Duration) BatchConfig {
	cfg := staticConfig(1, 16, 32)
	cfg.CompileCost = &compilecost.Profile{Model: "fake", Device: "CPU", Attention: "static", Rungs: []compilecost.Rung{
		{Capacity: 16, CompileS: []float64{0.010 * scale}}, {Capacity: 32, CompileS: []float64{0.010 * scale}}}}
	cfg.RungIdle = idle
	return cfg
}

func budgetEngine(t *testing.T, cfg BatchConfig) (*Batched, *fakeCompiler) {
	f := newFakeCompiler(staticShape(), testVocab)
	f.compileDelay, f.stepDelay = 10*time.Millisecond, time.Millisecond
	b := newTestEngine(t, f, cfg)
	if err := b.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b, f
}

func budgetFor(bs []runtime.Budget, capacity, batch int) runtime.Budget {
	for _, b := range bs {
		if b.Capacity == capacity && b.Batch == batch {
			return b
		}
	}
	return runtime.Budget{}
}

var budgetRequest = Request{Prompt: randTokens(rand.New(rand.NewPCG(3, 3)), 2), MaxTokens: 25}

// An exact profile launches rung 32's variant for one sequence by deadline,
// 12 ms (the 10 ms compile and the margin) before the sequence needs it,
// and nothing waits; the answer is the one without budgets.
func TestStaticBudgetLaunchesByDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, f := budgetEngine(t, budgetConfig(1, 0))
		got, fin, err := collectBatched(context.Background(), b, budgetRequest)
		if err != nil {
			t.Fatal(err)
		}
		checkSolo(t, f, 32, "budgeted", budgetRequest, got, fin)
		bs := b.Budgets()
		bu := budgetFor(bs.Budgets, 32, 1)
		if bu.Reason != ladder.ReasonDeadline || math.Abs(bu.WindowS-0.012) > 1e-3 || bu.WaitS != 0 {
			t.Errorf("rung 32 x 1: %+v, want launched by deadline about 12 ms ahead, no wait", bu)
		}
		if bs.Misses[runtime.MissWaited] != 0 || bs.Launches[ladder.ReasonDeadline] != 1 {
			t.Errorf("launches %v, misses %v", bs.Launches, bs.Misses)
		}
	})
}

// A profile 40x too fast launches it at the last step: the sequence waits
// and the miss is counted; the answer does not change.
func TestStaticBudgetCountsAMissedDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, f := budgetEngine(t, budgetConfig(1.0/40, 0))
		got, fin, err := collectBatched(context.Background(), b, budgetRequest)
		if err != nil {
			t.Fatal(err)
		}
		checkSolo(t, f, 32, "budgeted", budgetRequest, got, fin)
		bs := b.Budgets()
		if bu := budgetFor(bs.Budgets, 32, 1); bu.WaitS <= 0 || bs.Misses[runtime.MissWaited] != 1 || bs.Misses[runtime.MissActual] != 1 {
			t.Errorf("rung 32 x 1: %+v; misses %v, want a wait counted", bu, bs.Misses)
		}
	})
}

// Variants idle for RungIdle are freed (never the first rung's for one
// sequence), then compiled again for the next request, whose answer is
// the same.
func TestStaticReleasesIdleVariants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, f := budgetEngine(t, budgetConfig(1, time.Second))
		first, _, err := collectBatched(context.Background(), b, budgetRequest)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		st := b.Stats()
		ready := 0
		for _, r := range st.Rungs {
			if r.State == RungReady {
				ready++
			}
		}
		if ready != 1 || st.Rungs[0].State != RungReady || st.Released == 0 {
			t.Fatalf("after the idle time: %d variants ready, %d freed; want only the first", ready, st.Released)
		}
		if f.open.Load() != 1 {
			t.Errorf("%d graphs open, want 1", f.open.Load())
		}
		again, _, err := collectBatched(context.Background(), b, budgetRequest)
		if err != nil || !slices.Equal(again, first) {
			t.Fatalf("again: %v (%v), first %v", again, err, first)
		}
		if f.compiles(32) != 2 {
			t.Errorf("rung 32 compiled %d times, want twice", f.compiles(32))
		}
	})
}

// A prompt placed on rung 32 waits at admission for its variant, with the
// predicted compile as its expected wait.
func TestStaticAwait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := budgetEngine(t, budgetConfig(1, 0))
		expected := -2.0
		waited, err := b.Await(context.Background(), 20, func(s float64) error { expected = s; return nil })
		if err != nil || !waited || math.Abs(expected-0.010) > 1e-9 {
			t.Fatalf("Await: waited %v, expected %v, %v", waited, expected, err)
		}
		if waited, _ := b.Await(context.Background(), 20, nil); waited {
			t.Error("a second Await waited")
		}
		if bu := budgetFor(b.Budgets().Budgets, 32, 1); bu.Reason != ladder.ReasonAdmission {
			t.Errorf("rung 32 x 1: %+v, want launched at admission", bu)
		}
	})
}
