package stats

import (
	"fmt"
	"math"
)

// The paired-design rules `ovtrace ab` and `ovrun bench` both apply
// (docs/design.md §7).

// MinPairs is the floor on paired blocks: with n pairs the smallest
// two-sided exact sign-flip p is 2/2^n, so 5 pairs (0.0625) can never reach
// p < 0.05 and 6 pairs (0.03125) can.
const MinPairs = 6

// CycleLen is the number of blocks in one full counterbalancing cycle of an
// experiment with arms arms: 2 (AB, BA) for two arms, the rows of the
// Williams design for more (Orders takes them in turn), 1 for one arm.
func CycleLen(arms int) int {
	if arms <= 1 {
		return 1
	}
	if arms == 2 {
		return 2
	}
	return len(Williams(arms))
}

// BalancedPairs is the smallest number of blocks >= MinPairs that completes
// whole counterbalancing cycles for arms arms.
func BalancedPairs(arms int) int {
	rows := CycleLen(arms)
	return (MinPairs + rows - 1) / rows * rows
}

// SignFlipFloor is the smallest two-sided p an exact sign-flip test can give
// with n pairs: 2/2^n.
func SignFlipFloor(n int) float64 { return 2 / math.Pow(2, float64(n)) }

// CheckPairs applies the rules to an experiment of arms arms in pairs
// blocks: at least MinPairs blocks, in whole counterbalancing cycles (an
// even number for two arms, a multiple of the Williams rows for more), so
// every arm takes every position equally often and the sign-flip p can fall
// below 0.05. The error says which rule failed; callers add how to override.
func CheckPairs(arms, pairs int) error {
	rows := CycleLen(arms)
	if pairs >= MinPairs && pairs%rows == 0 {
		return nil
	}
	if arms <= 2 {
		return fmt.Errorf("%d pairs: use an even number >= %d (with n pairs the smallest two-sided exact sign-flip p is 2/2^n = %.4g here; an even n balances the orders)",
			pairs, MinPairs, SignFlipFloor(pairs))
	}
	return fmt.Errorf("%d pairs: a Williams design for %d arms comes in blocks of %d sequences; use a multiple of %d that is >= %d (e.g. %d)",
		pairs, arms, rows, rows, MinPairs, BalancedPairs(arms))
}
