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
