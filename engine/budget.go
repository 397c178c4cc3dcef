package engine

import (
	"context"
	"maps"
	"time"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/ladder"
	"github.com/ovtoolkit/ovrun/runtime"
)

// Compile budgets of the static form (BatchConfig.CompileCost): the
// variants of the next rung up are launched by ladder's deadline rule
// instead of when a sequence passes half of its rung. A rung's sequences
// advance one position per loop iteration, so the time left before the
// furthest of them needs the next rung is its remaining positions times
// the iteration's duration, measured live; the next rung's variant for one
// more sequence is launched when that falls to its predicted compile (the
// profile's, for the rung's capacity, corrected online from the variants
// that finished, runtime.Predictor) plus the compiles queued before it,
// plus ladder.DeadlineMargin. The profile measures one graph per capacity;
// a variant of another batch size is predicted at the same figure until
// the correction has learnt from the compiles that finished.
//
// Every launch of a budgeted engine opens a runtime.Budget (capacity and
// batch), with its reason: deadline, admission (a prompt placed on a rung
// with no variant for its batch), boundary (a sequence moved up before any
// rule launched it), batch_size (a rung's batch is full). A variant that
// sequences wait for when it becomes ready counts as a missed deadline.

// budgets are the static form's compile budgets; guarded by Batched.mu.
type budgets struct {
	pred     *runtime.Predictor
	byIndex  map[int]*runtime.Budget // by variant, its latest launch
	order    []int
	launches map[string]int
	misses   map[string]int
	blocked  map[int]time.Time // variants sequences wait for, since when
	start    time.Time         // the engine's start: budgets' offsets count from it
}

func newBudgets(profile *compilecost.Profile) *budgets {
	return &budgets{pred: runtime.NewPredictor(profile), byIndex: map[int]*runtime.Budget{},
		launches: map[string]int{}, misses: map[string]int{}, blocked: map[int]time.Time{}, start: time.Now()}
}

// launch queues variant i for a reason, with window seconds left before a
// sequence needs it (0: needed now), under a budget when the engine has a
// profile, and marks it queued in the loop's view.
//
// overlap is the decoding expected beside its compile (see openBudget).
func (b *Batched) launch(v rungView, i int, reason string, window, overlap float64) {
	if v.state[i] != RungIdle {
		return
	}
	if b.budgets != nil {
		b.mu.Lock()
		b.openBudget(i, reason, window, overlap)
		b.mu.Unlock()
	}
	b.wantIdle(v, i)
}

// openBudget opens variant i's budget, with overlap seconds of decoding
// expected beside its compile (-1: throughout; see runtime.Predictor),
// and returns its predicted seconds until ready, the queue before it
// included; b.mu is held.
func (b *Batched) openBudget(i int, reason string, window, overlap float64) float64 {
	bg := b.budgets
	spec := b.rungs[i].spec
	now := time.Now()
	ahead := b.queuedS(now)
	p := bg.pred.Predict(spec.Capacity, false, overlap)
	bu := runtime.NewBudget(spec.Capacity, p, window, reason)
	bu.Batch, bu.LaunchS = spec.Batch, now.Sub(bg.start).Seconds()
	if bu.MissedS > 0 || (reason == ladder.ReasonDeadline && window <= 0) {
		bg.misses[runtime.MissPredicted]++
	}
	if bg.byIndex[i] == nil {
		bg.order = append(bg.order, i)
	}
	bg.byIndex[i] = bu
	bg.launches[reason]++
	return ahead + bu.PredictedS
}

// queuedS is the predicted remainder of the budgeted compiles queued or
// running: what a compile launched now waits for; b.mu is held.
func (b *Batched) queuedS(now time.Time) float64 {
	var s float64
	for i, bu := range b.budgets.byIndex {
		r := &b.rungs[i]
		switch r.state {
		case RungQueued:
			s += bu.PredictedS
		case RungCompiling:
			s += max(0, bu.PredictedS-now.Sub(r.started).Seconds())
		}
	}
	return s
}

// dueNext is the deadline rule for rung k's sequences and variant next of
// the rung above: launched when the furthest of them is due.
func (b *Batched) dueNext(v rungView, k, next int) {
	st := b.static
	if v.state[next] != RungIdle || st.iterS == 0 {
		return
	}
	r := &st.rungs[k]
	furthest := -1 // of the sequences that will outgrow the rung
	for _, s := range r.seqs {
		if len(s.req.Prompt)+s.req.MaxTokens > r.capacity {
			furthest = max(furthest, s.past)
		}
	}
	if furthest < 0 {
		return // they all end on this rung
	}
	left := float64(r.capacity-furthest) * st.iterS
	capNext := b.rungs[next].spec.Capacity
	b.mu.Lock()
	ahead := b.queuedS(time.Now())
	overlap := max(0, left-ahead) // it starts after the queue, then compiles beside the steps left
	p := b.budgets.pred.Predict(capNext, false, overlap)
	b.mu.Unlock()
	if ladder.Due(left, ahead, p.Seconds) {
		b.launch(v, next, ladder.ReasonDeadline, left, overlap)
	}
}

// blockedOn records that rung sequences wait for variant i; the loop calls
// it each iteration they wait.
func (b *Batched) blockedOn(i int) {
	if b.budgets == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.budgets.blocked[i]; !ok {
		b.budgets.blocked[i] = time.Now()
	}
}

// compiled closes variant i's budget when its compile ends; b.mu is held.
func (b *Batched) compiled(i int, dur time.Duration, failed bool) {
	bg := b.budgets
	if bg == nil {
		return
	}
	bu := bg.byIndex[i]
	since, waited := bg.blocked[i]
	delete(bg.blocked, i)
	if bu == nil || failed {
		return
	}
	now := time.Now()
	bu.ReadyS = now.Sub(bg.start).Seconds()
	bg.pred.Learn(bu.Basis, bu.ProfileS, dur.Seconds())
	if bu.Finish(dur.Seconds()) {
		bg.misses[runtime.MissActual]++
	}
	if waited {
		bu.WaitS = now.Sub(since).Seconds()
		if bu.Reason != ladder.ReasonAdmission {
			bg.misses[runtime.MissWaited]++
		}
	}
}

// Budgets is a snapshot of the compile budgets (each variant's latest
// launch, its capacity and batch), safe from any goroutine; zero without a
// profile.
func (b *Batched) Budgets() runtime.BudgetStats {
	if b.budgets == nil {
		return runtime.BudgetStats{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := runtime.BudgetStats{Launches: maps.Clone(b.budgets.launches), Misses: maps.Clone(b.budgets.misses)}
	for _, i := range b.budgets.order {
		out.Budgets = append(out.Budgets, *b.budgets.byIndex[i])
	}
	return out
}

// Await waits, for a server's admission, until a variant of the rung a
// prompt of n tokens is placed on is compiled (any batch size: the rung's
// sequences step on the largest ready variant while a larger one
// compiles), launching its variant for one sequence when none is queued;
// see Awaiter. The paged form returns at once: its sequences wait for
// their rung's graph in the step plan.
func (b *Batched) Await(ctx context.Context, n int, expect func(seconds float64) error) (bool, error) {
	st := b.static
	k, ok := b.cfg.Ladder.RungFor(n)
	if st == nil || !ok {
		return false, nil
	}
	b.mu.Lock()
	first := st.variant(k, 0)
	var wait chan struct{}
	expected := -1.0
	for j := range st.batches {
		switch r := &b.rungs[st.variant(k, j)]; r.state {
		case RungReady:
			b.mu.Unlock()
			return false, nil
		case RungQueued, RungCompiling:
			if wait == nil {
				wait = r.done
				if bu := b.budgets; bu != nil && bu.byIndex[st.variant(k, j)] != nil {
					own := bu.byIndex[st.variant(k, j)].PredictedS
					if r.state == RungCompiling {
						expected = max(0, own-time.Since(r.started).Seconds())
					} else {
						expected = b.queuedS(time.Now()) // queued: at most the whole queue
					}
				}
			}
		}
	}
	launch := wait == nil
	if launch {
		if b.rungs[first].state == RungFailed {
			b.mu.Unlock()
			return false, nil // the sequence fails with the compile's error
		}
		wait = b.rungs[first].done
		if b.budgets != nil {
			overlap := -1.0 // beside the sequences decoding now ...
			if b.snap.Running == 0 {
				overlap = 0 // ... or alone on an idle server
			}
			expected = b.openBudget(first, ladder.ReasonAdmission, 0, overlap)
		}
	}
	b.mu.Unlock()
	if launch {
		b.want(first)
	}
	if expect != nil {
		if err := expect(expected); err != nil {
			return true, err
		}
	}
	select {
	case <-wait:
		return true, nil
	case <-ctx.Done():
		return true, context.Cause(ctx)
	case <-b.ctx.Done():
		return true, b.stopErr()
	}
}

var _ Awaiter = (*Batched)(nil)
