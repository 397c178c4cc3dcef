package runtime

import (
	"context"
	"errors"
	"time"
)

// Rung lifetime on a kept ladder (LadderConfig.KeepRungs with RungIdle): a
// server keeps its rungs for the requests to come, but a rung that no
// request has used for RungIdle holds its compiled graph's memory for
// nothing. Such a rung is freed; the next sequence that binds the rung
// below it launches it again one ahead (or the budgets two ahead), from
// the compiled-rung cache where there is one, so it is compiled again
// before that sequence reaches it. The first rung is never freed: it is
// what the server compiled before it said it was ready.
//
// A rung is idle when no open sequence is on it or on the rung below (a
// sequence there may reach it any step; one further down binds the rung
// below first, which launches it) and none has been on it for RungIdle.

// touch records that a sequence is on rung k now; l.mu is held.
func (l *CompiledLadder) touch(k int) {
	if k >= 0 && k < len(l.rungs) {
		l.rungs[k].lastUsed = l.cfg.Clock()
	}
}

// ReleaseIdle frees the rungs idle at now and returns their capacities.
// The ladder calls it itself every RungIdle/4 (at least every second)
// when RungIdle is set.
func (l *CompiledLadder) ReleaseIdle(now time.Time) ([]int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var freed []int
	var errs []error
	for k := 1; k < len(l.rungs); k++ {
		r := l.rungs[k]
		if r.job == nil || !r.job.ready() || l.onOrBelow(k) {
			continue
		}
		if r.lastUsed.IsZero() { // compiled ahead, never entered: idle from now
			r.lastUsed = now
		}
		if now.Sub(r.lastUsed) < l.cfg.RungIdle {
			continue
		}
		errs = append(errs, l.free(r))
		l.released++
		freed = append(freed, l.caps[k])
	}
	if len(freed) > 0 {
		l.notef("freed rungs %v: no sequence used them for %v", freed, l.cfg.RungIdle)
	}
	return freed, errors.Join(errs...)
}

// onOrBelow reports whether an open sequence is on rung k or the rung
// below it; l.mu is held.
func (l *CompiledLadder) onOrBelow(k int) bool {
	for _, cur := range l.seqs {
		if cur == k || cur == k-1 {
			return true
		}
	}
	return false
}

// RungCounts are the rungs whose graphs are compiled now and how many
// times an idle rung was freed.
func (l *CompiledLadder) RungCounts() (compiled, released int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.rungs {
		if r.job != nil && r.job.ready() && r.job.err == nil {
			compiled++
		}
	}
	return compiled, l.released
}

// idleLoop frees idle rungs until ctx ends or the ladder closes.
func (l *CompiledLadder) idleLoop(ctx context.Context) {
	defer close(l.idleDone)
	every := min(max(l.cfg.RungIdle/4, 10*time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.idleStop:
			return
		case <-t.C:
			if _, err := l.ReleaseIdle(l.cfg.Clock()); err != nil {
				l.mu.Lock()
				l.notef("freeing idle rungs: %v", err)
				l.mu.Unlock()
			}
		}
	}
}
