// Package ladder is the vocabulary the runtime and the planning simulator
// share: a ladder of context capacities and its rung arithmetic, the run
// policies as rows naming a KV store and a compile schedule, and the launch
// rule that decides how far ahead a background compile starts. It uses only
// the standard library, so compilecost (which knows nothing of the runtime)
// and runtime (which imports compilecost) can both import it.
package ladder

import (
	"errors"
	"fmt"
)

// MaxCapacity is the largest context capacity (and token count) accepted.
const MaxCapacity = 1 << 24

// ErrInvalid is what Validate's errors are (errors.Is); their text says
// what is wrong without repeating it.
var ErrInvalid = errors.New("invalid capacity ladder")

type invalid string

func (e invalid) Error() string      { return string(e) }
func (invalid) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, args ...any) error { return invalid(fmt.Sprintf(format, args...)) }

// Ladder is the ascending list of context capacities, one per rung.
type Ladder []int

// New validates capacities (see Validate) and returns a copy.
func New(caps []int) (Ladder, error) {
	if err := Validate(caps); err != nil {
		return nil, err
	}
	return Ladder(append([]int(nil), caps...)), nil
}

// Validate checks that caps is non-empty, positive, at most MaxCapacity and
// strictly ascending. Its errors are ErrInvalid.
func Validate(caps []int) error {
	if len(caps) == 0 {
		return invalidf("the ladder is empty")
	}
	for i, c := range caps {
		if c <= 0 {
			return invalidf("ladder rung %d is %d: capacities must be positive", i, c)
		}
		if c > MaxCapacity {
			return invalidf("ladder rung %d is %d: capacities are limited to %d", i, c, MaxCapacity)
		}
		if i > 0 && c <= caps[i-1] {
			return invalidf("ladder %v: capacities must be strictly ascending", caps)
		}
	}
	return nil
}

// Max is the largest capacity.
func (l Ladder) Max() int { return l[len(l)-1] }

// RungFor is the index of the smallest rung whose capacity holds tokens
// slots (capacity >= tokens). ok is false when even the largest is too small.
// A token at position p needs tokens = p+1.
func (l Ladder) RungFor(tokens int) (idx int, ok bool) { return RungFor(l, tokens) }

// RungFor returns the index of the rung that holds tokens KV entries: the
// smallest capacity >= tokens. Rounding is always up to the next rung, and a
// capacity that equals tokens holds it exactly, so a token at position p
// (which makes p+1 entries) needs a rung with capacity > p. tokens = 0 fits
// the smallest rung. ok is false, and idx is -1, when tokens is negative, the
// ladder is empty, or tokens exceeds the largest capacity. The ladder is
// expected to ascend (see Validate); if it does not, the smallest
// qualifying capacity is still the one returned.
func RungFor(caps []int, tokens int) (idx int, ok bool) {
	if tokens < 0 {
		return -1, false
	}
	idx = -1
	for i, c := range caps {
		if c >= tokens && (idx < 0 || c < caps[idx]) {
			idx = i
		}
	}
	return idx, idx >= 0
}
