package runtime

import "github.com/ovtoolkit/ovrun/ladder"

// Ladder is the ascending list of context capacities (ladder.Ladder).
type Ladder = ladder.Ladder

// NewLadder validates capacities: positive, at most MaxCapacity, strictly
// ascending.
func NewLadder(caps []int) (Ladder, error) { return ladder.New(caps) }
