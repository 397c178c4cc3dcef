package runtime

import "github.com/ovtoolkit/ovrun/ladder"

// Policy is one of the seed's designs for compiling and sizing a ladder; a
// policy is one row of ladder.Rows, naming a KV store and a compile schedule.
type Policy = ladder.Policy

// The policies (see ladder.Rows).
const (
	Direct       = ladder.Direct
	Pyramid      = ladder.Pyramid
	GrowEager    = ladder.GrowEager
	GrowOneAhead = ladder.GrowOneAhead
	Lazy         = ladder.Lazy
	GrowRemap    = ladder.GrowRemap
)

// Policies lists every policy in the order the seed introduces them.
var Policies = ladder.Policies

// ParsePolicy accepts a policy name.
func ParsePolicy(s string) (Policy, error) { return ladder.Parse(s) }

// PolicyNames lists the policies' names in the order of Policies.
func PolicyNames() []string { return ladder.Names() }
