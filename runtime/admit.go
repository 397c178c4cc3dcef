package runtime

import (
	"context"
	"fmt"

	"github.com/ovtoolkit/ovrun/ladder"
)

// Admission on a kept ladder: a request whose prompt starts on a rung that
// is not compiled (a long prompt, or a rung freed after --rung-idle) would
// otherwise compile it in the foreground while it holds a decode slot.
// Await lets the server wait for the rung in its queue instead, knowing
// when to expect it.

// Await makes sure the rung a prompt of n tokens starts on is compiled.
// When it is ready Await returns at once with waited false. Otherwise it
// launches the rung's compile in the background unless it is queued or
// compiling already (and, where every prompt goes through a prefill graph,
// that graph's), calls expect with the predicted seconds until the rung is
// ready (the compile and the queue before it; -1 without a compile-cost
// profile), and waits for the compile or ctx. An error from expect (a
// server refusing a request the compile would outlast) is returned at once;
// the compile goes on for the requests to come. A compile that fails is
// not an error here: the sequence that starts on the rung retries it and
// reports it.
func (l *CompiledLadder) Await(ctx context.Context, n int, expect func(seconds float64) error) (waited bool, err error) {
	i, ok := l.caps.RungFor(n + 1)
	if !ok {
		return false, fmt.Errorf("%w: a prompt of %d tokens plus one decoded token needs %d slots; the largest rung holds %d",
			ErrCapacity, n, n+1, l.caps.Max())
	}
	r := l.rungs[i]
	l.mu.Lock()
	if j := r.job; j != nil && j.ready() {
		l.mu.Unlock()
		return false, nil
	}
	expected := -1.0
	if r.job == nil {
		if l.budgets != nil {
			expected = l.budgets.Launch(launcher{l}, i, ladder.ReasonAdmission, len(l.seqs) > 0)
		}
		launcher{l}.Launch(i)
		l.notef("rung %d: compiling in the background for a prompt of %d tokens, which waits for it in the queue", l.caps[i], n)
	} else if l.budgets != nil {
		expected = l.budgets.remaining(launcher{l}, i)
	}
	if l.prefillMode == PrefillGraph {
		l.launchPrefillLocked(l.caps[i])
	}
	j := r.job
	l.mu.Unlock()
	if expect != nil {
		if err := expect(expected); err != nil {
			return true, err
		}
	}
	t0 := l.cfg.Clock()
	select {
	case <-j.done:
		l.waited(i, l.cfg.Clock().Sub(t0))
		return true, nil
	case <-ctx.Done():
		return true, context.Cause(ctx)
	}
}
