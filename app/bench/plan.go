package bench

import (
	"fmt"

	"github.com/ovtoolkit/ovrun/internal/stats"
)

// Slot is one planned run.
type Slot struct {
	// Pair is the block number, 1-based; 0 for warm-ups (except in a
	// queued campaign, where every block has its own: see BlockPlan).
	Pair int `json:"pair"`
	// Position is the 1-based place of the run within its block (or among
	// the warm-ups).
	Position int `json:"position"`
	// Arm is the policy run.
	Arm string `json:"arm"`
	// Warmup runs are excluded from every statistic.
	Warmup bool `json:"warmup,omitempty"`
}

// ID names the slot's files: "warmup-<pos>-<arm>" or "<pair>-<pos>-<arm>",
// the pair zero-padded so that a listing sorts in run order; a queued
// block's own warm-ups are "<pair>-warmup-<pos>-<arm>".
func (s Slot) ID() string {
	if s.Warmup && s.Pair > 0 {
		return fmt.Sprintf("%02d-warmup-%d-%s", s.Pair, s.Position, s.Arm)
	}
	if s.Warmup {
		return fmt.Sprintf("warmup-%d-%s", s.Position, s.Arm)
	}
	return fmt.Sprintf("%02d-%d-%s", s.Pair, s.Position, s.Arm)
}

// Orders is the arm sequence of each block: AB/BA alternation for two arms,
// the rows of a Williams design (taken in turn) for more. The first arm is
// the control.
func Orders(arms []string, pairs int) [][]string {
	idx := stats.Orders(len(arms), pairs)
	out := make([][]string, len(idx))
	for b, row := range idx {
		out[b] = make([]string, len(row))
		for p, a := range row {
			out[b][p] = arms[a]
		}
	}
	return out
}

// Plan is the full run sequence of a campaign: one warm-up per arm in arm
// order, then every block in its counterbalanced order.
func Plan(c *Config) []Slot {
	var out []Slot
	for i, a := range c.Arms {
		out = append(out, Slot{Position: i + 1, Arm: a, Warmup: true})
	}
	for b, row := range Orders(c.Arms, c.Pairs) {
		for p, a := range row {
			out = append(out, Slot{Pair: b + 1, Position: p + 1, Arm: a})
		}
	}
	return out
}

// BlockPlan is the run sequence of one block of a queued campaign, which
// runs whole on one machine: one warm-up per arm in arm order (excluded
// from every statistic, as a local campaign's), then the block's arms in
// its counterbalanced order.
func BlockPlan(c *Config, pair int) []Slot {
	var out []Slot
	for i, a := range c.Arms {
		out = append(out, Slot{Pair: pair, Position: i + 1, Arm: a, Warmup: true})
	}
	for p, a := range Orders(c.Arms, c.Pairs)[pair-1] {
		out = append(out, Slot{Pair: pair, Position: p + 1, Arm: a})
	}
	return out
}

// QueuePlan is every block's BlockPlan in block order: the runs of one
// requirement class of a queued campaign.
func QueuePlan(c *Config) []Slot {
	var out []Slot
	for p := 1; p <= c.Pairs; p++ {
		out = append(out, BlockPlan(c, p)...)
	}
	return out
}
