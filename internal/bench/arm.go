package bench

import (
	"fmt"
	"strings"

	"github.com/ovtoolkit/ovrun/runtime"
)

// Arm is one arm of a campaign: a run policy and, optionally, a prefill
// mode. It is written POLICY or POLICY+prefill=MODE (as in
// --arms grow-one-ahead+prefill=graph,grow-one-ahead+prefill=auto), so that
// a campaign can compare prefill schedules under one policy.
type Arm struct {
	Policy  runtime.Policy
	Prefill runtime.PrefillMode // "" leaves ovrun run's default
}

// ParseArm reads an arm's name.
func ParseArm(s string) (Arm, error) {
	name, opt, hasOpt := strings.Cut(s, "+")
	p, err := runtime.ParsePolicy(name)
	if err != nil {
		return Arm{}, err
	}
	a := Arm{Policy: p}
	if !hasOpt {
		return a, nil
	}
	mode, ok := strings.CutPrefix(opt, "prefill=")
	if !ok {
		return Arm{}, fmt.Errorf("arm %q: want POLICY or POLICY+prefill=MODE", s)
	}
	if a.Prefill, err = runtime.ParsePrefillMode(mode); err != nil {
		return Arm{}, fmt.Errorf("arm %q: %w", s, err)
	}
	return a, nil
}

// args are the `ovrun run` flags the arm sets.
func (a Arm) args() []string {
	args := []string{"--policy", string(a.Policy)}
	if a.Prefill != "" {
		args = append(args, "--prefill", string(a.Prefill))
	}
	return args
}

// made reports whether a run summary was made by this arm, and if not why.
func (a Arm) made(s *runtime.Summary) (bool, string) {
	switch {
	case s.Policy != string(a.Policy):
		return false, fmt.Sprintf("policy %s, want %s", s.Policy, a.Policy)
	case a.Prefill != "" && s.PrefillMode != string(a.Prefill):
		return false, fmt.Sprintf("prefill %s, want %s", s.PrefillMode, a.Prefill)
	}
	return true, ""
}
