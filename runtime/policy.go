package runtime

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

// Policies lists every policy in the order the seed introduces them.
var Policies = []Policy{Direct, Pyramid, GrowEager, GrowOneAhead, Lazy, GrowRemap}

// ParsePolicy accepts a policy name.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("unknown policy %q (want one of %s)", s, strings.Join(PolicyNames(), ", "))
}

// PolicyNames lists the policies' names in the order of Policies.
func PolicyNames() []string {
	names := make([]string, len(Policies))
	for i, p := range Policies {
		names[i] = string(p)
	}
	return names
}

// upFront reports whether every rung is compiled before decoding starts.
func (p Policy) upFront() bool { return p == Pyramid || p == GrowEager || p == Direct }

// background reports whether successors are compiled behind decode.
func (p Policy) background() bool { return p == GrowOneAhead || p == GrowRemap }

// sharedKV reports whether every rung views one buffer of the largest
// capacity (no copy at boundaries).
func (p Policy) sharedKV() bool { return p == Pyramid || p == GrowRemap || p == Direct }
