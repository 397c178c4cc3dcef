package ladder

import (
	"fmt"
	"strings"
)

// Policy is one of the seed's designs for compiling and sizing a ladder.
type Policy string

const (
	// Direct (B0): one graph at the largest capacity, max KV from the start.
	Direct Policy = "direct"
	// Pyramid (B1): every rung compiled up front, one shared max-size KV.
	Pyramid Policy = "pyramid"
	// GrowEager (I1): every rung compiled up front, KV sized to the current
	// rung and copied forward at each boundary.
	GrowEager Policy = "grow-eager"
	// GrowOneAhead (I2): first rung in the foreground, rung k+1 compiled in
	// the background while rung k decodes; copy-and-grow KV.
	GrowOneAhead Policy = "grow-one-ahead"
	// Lazy compiles each rung when its boundary is reached.
	Lazy Policy = "lazy"
	// GrowRemap schedules like GrowOneAhead but keeps the KV in one
	// reservation whose pages are committed as tokens arrive; a boundary
	// binds a longer view instead of copying.
	GrowRemap Policy = "grow-remap"
)

// Store names a KV store: how a sequence's cache is sized and grown.
type Store string

const (
	// StoreMax is one committed buffer of the largest capacity; every rung
	// views its prefix, a boundary copies nothing.
	StoreMax Store = "max"
	// StoreCopy is a committed buffer of the current rung's capacity; a
	// boundary allocates the next one and copies the live tokens into it.
	StoreCopy Store = "copy"
	// StoreRemap reserves the largest capacity's address space and commits
	// pages as tokens are written; a boundary views a longer prefix.
	StoreRemap Store = "remap"
)

// Schedule names a compile schedule: when each rung's graph is compiled.
type Schedule string

const (
	// UpFront compiles every rung a sequence can reach before it decodes.
	UpFront Schedule = "up-front"
	// OneAhead compiles the first rung before decoding and rung k+1 in the
	// background once rung k is bound (two ahead when a compile-cost
	// profile says one ahead cannot make it; see Lookahead).
	OneAhead Schedule = "one-ahead"
	// LazySchedule compiles each rung at its boundary, on the critical path.
	LazySchedule Schedule = "lazy"
)

// Row is a policy as the runtime builds it: which rungs exist, which KV
// store a sequence gets and which compile schedule the ladder follows.
type Row struct {
	Policy Policy
	// Seed is the design's name in the seed write-up ("" when it has none).
	Seed string
	// LargestOnly: the policy compiles and decodes on the largest rung only.
	LargestOnly bool
	Store       Store
	Schedule    Schedule
}

// Rows is the policy table, in the order the seed introduces the policies.
var Rows = []Row{
	{Policy: Direct, Seed: "B0", LargestOnly: true, Store: StoreMax, Schedule: UpFront},
	{Policy: Pyramid, Seed: "B1", Store: StoreMax, Schedule: UpFront},
	{Policy: GrowEager, Seed: "I1", Store: StoreCopy, Schedule: UpFront},
	{Policy: GrowOneAhead, Seed: "I2", Store: StoreCopy, Schedule: OneAhead},
	{Policy: Lazy, Store: StoreCopy, Schedule: LazySchedule},
	{Policy: GrowRemap, Store: StoreRemap, Schedule: OneAhead},
}

// Policies lists every policy in the order of Rows.
var Policies = func() []Policy {
	out := make([]Policy, len(Rows))
	for i, r := range Rows {
		out[i] = r.Policy
	}
	return out
}()

// Parse accepts a policy name.
func Parse(s string) (Policy, error) {
	for _, p := range Policies {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("unknown policy %q (want one of %s)", s, strings.Join(Names(), ", "))
}

// Names lists the policies' names in the order of Policies.
func Names() []string {
	names := make([]string, len(Policies))
	for i, p := range Policies {
		names[i] = string(p)
	}
	return names
}

// Row is the policy's row of the table; an unknown policy has the zero Row.
func (p Policy) Row() Row {
	for _, r := range Rows {
		if r.Policy == p {
			return r
		}
	}
	return Row{}
}

// Background reports whether successors compile behind decode.
func (p Policy) Background() bool { return p.Row().Schedule == OneAhead }

// Copies reports whether a boundary copies the live KV into a new buffer.
func (p Policy) Copies() bool { return p.Row().Store == StoreCopy }

// Rungs are the capacities a policy compiles and decodes on: the largest
// alone for direct, else the whole ladder.
func (r Row) Rungs(l Ladder) Ladder {
	if r.LargestOnly {
		return l[len(l)-1:]
	}
	return l
}
