package ladder

// The launch rule of a one-ahead schedule, which the runtime follows and
// the planning simulator predicts:
//
//  1. Rung k+1's decode graph is launched, in the background, when a
//     sequence binds rung k (before its prefill, on the first rung).
//  2. With a compile-cost profile, once rung k has decoded RateSteps steps,
//     rung k+2 is launched at once, two ahead, when its predicted compile
//     exceeds the decode window rung k+1 would give it one ahead
//     (LaunchTwoAhead). It queues behind rung k+1's compile.
//  3. Background compiles run one at a time, in launch order.

// RateSteps is how many decode steps of a rung the rule waits for before it
// trusts the step time measured there.
const RateSteps = 8

// LaunchTwoAhead reports whether, decoding on rung cur at stepS seconds a
// step, rung cur+2 (predicted to compile in compileS) must be launched now:
// one ahead it would start when rung cur+1 is bound and have rung cur+1's
// decode window, capacity(cur+1) - capacity(cur) steps, measured at the
// current step time.
func LaunchTwoAhead(caps []int, cur int, stepS, compileS float64) bool {
	if cur < 0 || cur+2 >= len(caps) {
		return false
	}
	return compileS > TwoAheadWindow(caps, cur, stepS)
}

// TwoAheadWindow is the one-ahead decode window of rung cur+2 as seen from
// rung cur: rung cur+1's new slots at stepS seconds a step.
func TwoAheadWindow(caps []int, cur int, stepS float64) float64 {
	return float64(caps[cur+1]-caps[cur]) * stepS
}

// The deadline rule of a kept ladder (a server's, ovrun serve with a
// compile-cost profile), which launches a rung when it is needed rather
// than when the rung below is bound, so that rungs few requests reach cost
// no compile until one is on its way:
//
//  1. After every decode step of any sequence, each rung above it that is
//     not compiled or compiling has a deadline: the time left before that
//     sequence writes the rung's first position, its remaining tokens on
//     the rungs below at the live step time, plus the waits the compiles
//     queued before it are predicted to cause at those rungs (DueRungs).
//     A sequence counts only for the rungs its prompt and max tokens can
//     reach. Several growing sequences make
//     one deadline per rung, the earliest, because every one of them is
//     checked and the first that is due launches.
//  2. A rung is due when that time falls to its predicted compile, plus
//     the predicted remainder of the compiles queued before it, plus
//     DeadlineMargin of both (Due). Launching it launches the rungs below
//     it that are not launched yet, in ladder order: the sequence passes
//     them first, and compiles run one at a time in launch order.
//  3. A request whose prompt needs a rung that is not compiled launches it
//     at admission and waits for it in the queue, not in a decode slot.

// DeadlineMargin is the share of a predicted compile (and of the queue
// before it) the deadline rule adds as slack: the runtime corrects its
// predictions online to within about 20%, and a compile that finishes a
// step early costs nothing while one a step late costs a boundary wait.
const DeadlineMargin = 0.25

// Due reports whether a compile predicted to take compileS, queued behind
// compiles predicted to need aheadS more, must be launched now for a
// sequence leftS seconds from needing it.
func Due(leftS, aheadS, compileS float64) bool {
	return leftS <= (aheadS+compileS)*(1+DeadlineMargin)
}

// Why a budgeted compile was launched: the reasons ovrun_compile_launches_total
// counts and a budget records.
const (
	ReasonOneAhead  = "one_ahead"  // the rung below was bound
	ReasonTwoAhead  = "two_ahead"  // one ahead was predicted to miss its deadline (LaunchTwoAhead)
	ReasonDeadline  = "deadline"   // a sequence's time left fell to the predicted compile (Due)
	ReasonAdmission = "admission"  // a request's prompt needs the rung
	ReasonBoundary  = "boundary"   // a sequence reached the rung before any rule launched it
	ReasonBatch     = "batch_size" // a batched rung is full: the next sequence to land needs the next batch size
)

// LaunchReasons lists the reasons, for series that report every one.
var LaunchReasons = []string{ReasonOneAhead, ReasonTwoAhead, ReasonDeadline, ReasonAdmission, ReasonBoundary, ReasonBatch}

// DueLaunch is a rung the deadline rule launches now.
type DueLaunch struct {
	Rung int
	// LeftS is the time before the sequence needs the rung; AheadS the
	// predicted remainder of the compiles queued before it. Its compile
	// starts after those and runs beside decoding for what is left:
	// OverlapS, max(0, LeftS - AheadS).
	LeftS, AheadS float64

	compileS float64 // its predicted compile, for the rungs above it
}

// OverlapS is the decoding expected beside the launch's compile.
func (d DueLaunch) OverlapS() float64 { return max(0, d.LeftS-d.AheadS) }

// DueRungs applies the deadline rule after a step of a sequence on rung
// cur that writes position pos next, at stepS seconds a step, with queuedS
// the predicted remainder of the compiles queued or running, and reach the
// tokens it will hold at most (its prompt and max tokens: a rung above
// that is never needed by it): it returns the rungs to launch now, in
// ladder order. launched reports a rung
// compiled or compiling; predict is a rung's predicted compile given the
// decoding expected beside it.
//
// The time left before the sequence needs rung j counts its decode steps
// to j's boundary and the waits the queue is predicted to cause it at the
// rungs between (a rung ready only after the sequence reaches it holds it
// there): compiles run one at a time in ladder order, so those waits end
// before j's compile starts, and the sequence decodes beside all of it.
func DueRungs(caps []int, cur, pos, reach int, stepS, queuedS float64, launched func(rung int) bool, predict func(rung int, overlapS float64) float64) []DueLaunch {
	var out, pending, seen []DueLaunch // seen: every rung considered, for the ready times of the rungs above
	need := queuedS                    // when the next compile launched would start
	arrive := float64(caps[cur]-pos) * stepS
	for j := cur + 1; j < len(caps) && reach > caps[j-1]; j++ { // rungs past its last token are none of its business
		if j > cur+1 {
			// Through rung j-1: from when the sequence may enter it (it
			// arrived, and the graph is ready) to its end.
			arrive = max(arrive, readyOf(j-1, seen, queuedS)) + float64(caps[j-1]-caps[j-2])*stepS
		}
		if launched(j) {
			continue
		}
		d := DueLaunch{Rung: j, LeftS: arrive, AheadS: need}
		p := predict(j, d.OverlapS())
		d.compileS = p
		pending, seen = append(pending, d), append(seen, d)
		need += p
		if Due(d.LeftS, d.AheadS, p) {
			out, pending = append(out, pending...), pending[:0]
		}
	}
	return out
}

// readyOf is when rung j's graph is predicted ready: after its compile,
// when it was considered in this scan (seen), else (launched earlier) by
// the end of the queue at the latest.
func readyOf(j int, seen []DueLaunch, queuedS float64) float64 {
	for _, d := range seen {
		if d.Rung == j {
			return d.AheadS + d.compileS
		}
	}
	return queuedS
}
