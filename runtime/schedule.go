package runtime

import (
	"fmt"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/ladder"
)

// Schedule decides when a ladder compiles each rung's decode graph. The
// ladder calls it with its lock held, from the goroutine of the sequence
// whose progress caused the call, so an implementation needs no locking of
// its own. Rungs are indices into the ladder's capacities.
type Schedule interface {
	// Foreground is the last rung compiled in the foreground, before a
	// sequence whose first rung is first decodes (first itself, or the
	// largest rung for an up-front schedule).
	Foreground(first, rungs int) int
	// Bound is told that a sequence bound rung i: at its start, or at a
	// boundary.
	Bound(l Launcher, i int)
	// Stepped is told after every decode step of a sequence on rung i:
	// stepS is the measured seconds per step on that rung (0 until enough
	// steps were seen), next the next position the sequence writes and
	// reach the tokens it will hold at most (its prompt and decode steps).
	Stepped(l Launcher, i int, stepS float64, next, reach int)
	// Compiled is told once for each background compile the ladder sees
	// finish without error, with its duration.
	Compiled(l Launcher, i int, seconds float64)
}

// Launcher is the ladder as a Schedule sees it.
type Launcher interface {
	// Rungs is the number of rungs; Capacity(i) the capacity of rung i.
	Rungs() int
	Capacity(i int) int
	// Launched reports whether rung i has a compile, running or done.
	Launched(i int) bool
	// Launch queues a background compile of rung i.
	Launch(i int)
	// Queued reports whether rung i's background compile is queued or
	// running, and how long it has run (0 while queued).
	Queued(i int) (queued bool, elapsedS float64)
	// Note records a scheduling decision for the run's notes.
	Note(format string, args ...any)
}

// NewSchedule makes the schedule a policy names; with a compile-cost
// profile a one-ahead schedule becomes a Budgeted one, launching by
// deadline when byDeadline is set (a kept ladder).
func NewSchedule(kind ladder.Schedule, profile *compilecost.Profile, byDeadline bool) (Schedule, error) {
	switch kind {
	case ladder.UpFront:
		return UpFront{}, nil
	case ladder.OneAhead:
		switch {
		case profile != nil && byDeadline:
			return NewDeadlineBudgeted(profile), nil
		case profile != nil:
			return NewBudgeted(profile), nil
		}
		return OneAhead{}, nil
	case ladder.LazySchedule:
		return LazyCompile{}, nil
	}
	return nil, fmt.Errorf("unknown compile schedule %q", kind)
}

// UpFront compiles every rung from the first one a sequence needs to the
// largest before it decodes (direct, pyramid, grow-eager).
type UpFront struct{}

func (UpFront) Foreground(first, rungs int) int          { return rungs - 1 }
func (UpFront) Bound(Launcher, int)                      {}
func (UpFront) Stepped(Launcher, int, float64, int, int) {}
func (UpFront) Compiled(Launcher, int, float64)          {}

// OneAhead compiles the first rung in the foreground and, once rung k is
// bound, rung k+1 in the background (grow-one-ahead, grow-remap).
type OneAhead struct{}

func (OneAhead) Foreground(first, rungs int) int { return first }

func (OneAhead) Bound(l Launcher, i int) {
	if next := i + 1; next < l.Rungs() && !l.Launched(next) {
		l.Launch(next)
	}
}

func (OneAhead) Stepped(Launcher, int, float64, int, int) {}
func (OneAhead) Compiled(Launcher, int, float64)          {}

// LazyCompile compiles the first rung in the foreground and every later one
// when a sequence reaches its boundary, on the critical path (lazy).
type LazyCompile struct{}

func (LazyCompile) Foreground(first, rungs int) int          { return first }
func (LazyCompile) Bound(Launcher, int)                      {}
func (LazyCompile) Stepped(Launcher, int, float64, int, int) {}
func (LazyCompile) Compiled(Launcher, int, float64)          {}

var (
	_ Schedule = UpFront{}
	_ Schedule = OneAhead{}
	_ Schedule = LazyCompile{}
	_ Schedule = (*Budgeted)(nil)
)
