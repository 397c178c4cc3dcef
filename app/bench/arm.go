package bench

import (
	"fmt"
	"strings"

	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// Arm is one arm of a campaign: a run policy and, optionally, a prefill
// mode, where graphs compile, the weight format and the attention form. It
// is written POLICY, then +prefill=MODE, +compile-in=WHERE,
// +weights=FORMAT and +attention=FORM in any order (as in
// --arms grow-one-ahead+prefill=graph,grow-one-ahead+prefill=auto,
// grow-one-ahead,grow-one-ahead+compile-in=worker or
// grow-one-ahead+attention=bounded,grow-one-ahead), so that a campaign can
// compare prefill schedules, compile workers, weight or attention forms
// under one policy.
type Arm struct {
	Policy    runtime.Policy
	Prefill   runtime.PrefillMode // "" leaves ovrun run's default
	CompileIn string              // "" leaves ovrun run's default (process)
	Weights   model.WeightFormat  // "" leaves ovrun run's default (native)
	Attention model.Attention     // "" leaves ovrun run's default (auto)
}

// armSyntax is how an arm is written, for errors.
const armSyntax = "POLICY[+prefill=MODE][+compile-in=WHERE][+weights=FORMAT][+attention=FORM]"

// ParseArm reads an arm's name.
func ParseArm(s string) (Arm, error) {
	name, opts, _ := strings.Cut(s, "+")
	p, err := runtime.ParsePolicy(name)
	if err != nil {
		return Arm{}, err
	}
	a := Arm{Policy: p}
	if opts == "" {
		return a, nil
	}
	for _, opt := range strings.Split(opts, "+") {
		key, v, _ := strings.Cut(opt, "=")
		switch {
		case key == "prefill" && a.Prefill == "":
			if a.Prefill, err = runtime.ParsePrefillMode(v); err != nil {
				return Arm{}, fmt.Errorf("arm %q: %w", s, err)
			}
		case key == "compile-in" && a.CompileIn == "":
			if a.CompileIn, err = runtime.ParseCompileIn(v); err != nil {
				return Arm{}, fmt.Errorf("arm %q: %w", s, err)
			}
		case key == "attention" && a.Attention == "" && v != "":
			if a.Attention, err = model.ParseAttention(v); err != nil {
				return Arm{}, fmt.Errorf("arm %q: %w", s, err)
			}
		case key == "weights" && a.Weights == "" && v != "":
			if a.Weights, err = model.ParseWeightFormat(v); err != nil {
				return Arm{}, fmt.Errorf("arm %q: %w", s, err)
			}
		default:
			return Arm{}, fmt.Errorf("arm %q: want %s", s, armSyntax)
		}
	}
	return a, nil
}

// args are the `ovrun run` flags the arm sets.
func (a Arm) args() []string {
	args := []string{"--policy", string(a.Policy)}
	if a.Prefill != "" {
		args = append(args, "--prefill", string(a.Prefill))
	}
	if a.CompileIn != "" {
		args = append(args, "--compile-in", a.CompileIn)
	}
	if a.Weights != "" {
		args = append(args, "--weights", string(a.Weights))
	}
	if a.Attention != "" {
		args = append(args, "--attention", string(a.Attention))
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
	case a.CompileIn != "" && s.CompileIn != a.CompileIn:
		return false, fmt.Sprintf("compile_in %s, want %s", s.CompileIn, a.CompileIn)
	case a.Weights != "" && s.Weights != string(a.Weights):
		return false, fmt.Sprintf("weights %s, want %s", s.Weights, a.Weights)
	case a.Attention != "" && a.Attention != model.AttentionAuto && s.Attention != string(a.Attention):
		return false, fmt.Sprintf("attention %s, want %s", s.Attention, a.Attention)
	}
	return true, ""
}
