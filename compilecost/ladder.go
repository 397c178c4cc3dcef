package compilecost

import (
	"fmt"

	"github.com/ovtoolkit/ovrun/ladder"
)

// ErrInvalidLadder is wrapped by ValidateLadder's errors (it is
// ladder.ErrInvalid).
var ErrInvalidLadder = ladder.ErrInvalid

// RungFor is ladder.RungFor: the index of the smallest capacity >= tokens
// (a token at position p needs p+1), -1 and false when none holds it.
func RungFor(caps []int, tokens int) (idx int, ok bool) { return ladder.RungFor(caps, tokens) }

// ValidateLadder checks that caps is non-empty, positive and strictly
// ascending (ladder.Validate). Errors wrap ErrInvalidLadder.
func ValidateLadder(caps []int) error {
	if err := ladder.Validate(caps); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidLadder, err)
	}
	return nil
}
