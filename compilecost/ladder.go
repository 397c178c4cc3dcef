package compilecost

import (
	"errors"
	"fmt"
)

// ErrInvalidLadder is wrapped by ValidateLadder's errors.
var ErrInvalidLadder = errors.New("invalid capacity ladder")

// RungFor returns the index of the rung that holds tokens KV entries: the
// smallest capacity >= tokens. Rounding is always up to the next rung, and a
// capacity that equals tokens holds it exactly, so a token at position p
// (which makes p+1 entries) needs a rung with capacity > p. tokens = 0 fits
// the smallest rung. ok is false, and idx is -1, when tokens is negative, the
// ladder is empty, or tokens exceeds the largest capacity. The ladder is
// expected to ascend (see ValidateLadder); if it does not, the smallest
// qualifying capacity is still the one returned.
func RungFor(ladder []int, tokens int) (idx int, ok bool) {
	if tokens < 0 {
		return -1, false
	}
	idx = -1
	for i, c := range ladder {
		if c >= tokens && (idx < 0 || c < ladder[idx]) {
			idx = i
		}
	}
	return idx, idx >= 0
}

// ValidateLadder checks that ladder is non-empty, positive and strictly
// ascending. Errors wrap ErrInvalidLadder.
func ValidateLadder(ladder []int) error {
	if len(ladder) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidLadder)
	}
	for i, c := range ladder {
		if c <= 0 {
			return fmt.Errorf("%w: capacity %d at index %d is not positive", ErrInvalidLadder, c, i)
		}
		if i > 0 && c <= ladder[i-1] {
			return fmt.Errorf("%w: capacity %d at index %d does not exceed %d (ladder must strictly ascend)", ErrInvalidLadder, c, i, ladder[i-1])
		}
	}
	return nil
}
