package runtime

import (
	"fmt"
	"sort"
)

// Ladder is the ascending list of compiled context capacities.
type Ladder []int

// NewLadder validates capacities: positive, strictly ascending.
func NewLadder(caps []int) (Ladder, error) {
	if len(caps) == 0 {
		return nil, fmt.Errorf("the ladder is empty")
	}
	for i, c := range caps {
		if c <= 0 {
			return nil, fmt.Errorf("ladder rung %d is %d: capacities must be positive", i, c)
		}
		if c > MaxCapacity {
			return nil, fmt.Errorf("ladder rung %d is %d: capacities are limited to %d", i, c, MaxCapacity)
		}
		if i > 0 && c <= caps[i-1] {
			return nil, fmt.Errorf("ladder %v: capacities must be strictly ascending", caps)
		}
	}
	return Ladder(append([]int(nil), caps...)), nil
}

// Max is the largest capacity.
func (l Ladder) Max() int { return l[len(l)-1] }

// RungFor is the index of the smallest rung whose capacity holds tokens
// slots (capacity >= tokens). ok is false when even the largest is too small.
// A token at position p needs tokens = p+1.
func (l Ladder) RungFor(tokens int) (idx int, ok bool) {
	i := sort.SearchInts(l, tokens)
	return i, i < len(l)
}
