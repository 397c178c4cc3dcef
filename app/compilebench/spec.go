package compilebench

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/ov"
)

// Variant is one arm of an experiment: what its compile processes change.
type Variant struct {
	// Name labels the arm in reports.
	Name string `json:"name"`
	// Spec is the SPEC it was parsed from.
	Spec string `json:"spec"`
	// Props are OpenVINO compile properties (prop:KEY=VALUE).
	Props map[string]string `json:"props,omitempty"`
	// Env are environment variables of its processes (env:KEY=VALUE).
	Env map[string]string `json:"env,omitempty"`
	// Lib is an OpenVINO library folder (lib:DIR), passed to its processes
	// as OVRUN_OPENVINO_LIB.
	Lib string `json:"lib,omitempty"`
	// Preload is a shared library (preload:PATH, made absolute) loaded into
	// its compile processes before everything else through LD_PRELOAD: a
	// patch that interposes functions OpenVINO calls through its PLT.
	Preload string `json:"preload,omitempty"`
	// OpenVINOVersion and Library are what its warm-up process loaded;
	// PrecisionEffective is the precision its compiled graph runs in.
	OpenVINOVersion    string `json:"openvino_version,omitempty"`
	Library            string `json:"library,omitempty"`
	PrecisionEffective string `json:"precision_effective,omitempty"`
}

// EnvPreload is the dynamic loader's variable a preload:PATH variant sets.
const EnvPreload = "LD_PRELOAD"

var variantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`)

// ParseVariant parses NAME=SPEC, where SPEC is a comma-separated list of
// prop:KEY=VALUE (an OpenVINO compile property), env:KEY=VALUE (an
// environment variable), lib:DIR (an OpenVINO build's library folder) and
// preload:PATH (a shared library for LD_PRELOAD, made absolute here).
// An empty SPEC is the unchanged default. Values cannot contain commas.
// Errors name the variant and the part at fault.
func ParseVariant(s string) (Variant, error) {
	name, spec, ok := strings.Cut(s, "=")
	if !ok {
		return Variant{}, fmt.Errorf("variant %q: want NAME=SPEC (e.g. base=prop:INFERENCE_PRECISION_HINT=f32)", s)
	}
	if !variantName.MatchString(name) {
		return Variant{}, fmt.Errorf("variant %q: name %q must be letters, digits, '_', '.', '+' or '-'", s, name)
	}
	v := Variant{Name: name, Spec: spec}
	if strings.TrimSpace(spec) == "" {
		return v, nil
	}
	for i, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		bad := func(format string, args ...any) error {
			return fmt.Errorf("variant %s: part %d %q: %s", name, i+1, part, fmt.Sprintf(format, args...))
		}
		if strings.ContainsRune(part, 0) {
			return Variant{}, bad("contains a NUL byte")
		}
		kind, rest, ok := strings.Cut(part, ":")
		if !ok {
			return Variant{}, bad("want prop:KEY=VALUE, env:KEY=VALUE, lib:DIR or preload:PATH")
		}
		switch kind {
		case "prop", "env":
			k, val, ok := strings.Cut(rest, "=")
			if !ok || k == "" {
				return Variant{}, bad("want %s:KEY=VALUE", kind)
			}
			m := &v.Props
			if kind == "env" {
				m = &v.Env
				switch k {
				case ov.EnvLibrary:
					return Variant{}, bad("use lib:DIR to choose the OpenVINO library")
				case EnvPreload:
					return Variant{}, bad("use preload:PATH to preload a library")
				case EnvMemoStats:
					return Variant{}, bad("%s is set by ovtrace for every compile", EnvMemoStats)
				}
			}
			if *m == nil {
				*m = map[string]string{}
			}
			if _, dup := (*m)[k]; dup {
				return Variant{}, bad("%s %s is set twice", kind, k)
			}
			(*m)[k] = val
		case "lib":
			if rest == "" {
				return Variant{}, bad("want lib:DIR")
			}
			if v.Lib != "" {
				return Variant{}, bad("lib is set twice")
			}
			v.Lib = rest
		case "preload":
			if rest == "" || strings.Contains(rest, ":") {
				return Variant{}, bad("want preload:PATH, one library (no ':')")
			}
			if v.Preload != "" {
				return Variant{}, bad("preload is set twice")
			}
			abs, err := filepath.Abs(rest)
			if err != nil {
				return Variant{}, bad("%v", err)
			}
			v.Preload = abs
		default:
			return Variant{}, bad("unknown kind %q: want prop, env, lib or preload", kind)
		}
	}
	return v, nil
}

// ParseVariants parses each NAME=SPEC and checks that the names are unique
// and that there are at least two.
func ParseVariants(specs []string) ([]Variant, error) {
	if len(specs) < 2 {
		return nil, fmt.Errorf("give at least two --variant NAME=SPEC (the first is the control), got %d", len(specs))
	}
	var out []Variant
	for _, s := range specs {
		v, err := ParseVariant(s)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(out, func(o Variant) bool { return o.Name == v.Name }) {
			return nil, fmt.Errorf("variant %s: the name is used twice", v.Name)
		}
		out = append(out, v)
	}
	return out, nil
}

// Check verifies what can be verified before running: that a lib:DIR
// exists and that a preload:PATH is a regular file.
func (v Variant) Check() error {
	if v.Lib != "" {
		if _, err := os.Stat(v.Lib); err != nil {
			return fmt.Errorf("variant %s: lib:%s: %w", v.Name, v.Lib, err)
		}
	}
	if v.Preload != "" {
		fi, err := os.Stat(v.Preload)
		if err != nil {
			return fmt.Errorf("variant %s: preload:%s: %w", v.Name, v.Preload, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("variant %s: preload:%s is %s, not a shared library", v.Name, v.Preload, safefile.Kind(fi.Mode()))
		}
	}
	return nil
}

// Environ returns base with the variant's environment applied: its env
// entries; for lib:DIR, OVRUN_OPENVINO_LIB=DIR; for preload:PATH,
// LD_PRELOAD=PATH ahead of any LD_PRELOAD base already has.
func (v Variant) Environ(base []string) []string {
	set := maps.Clone(v.Env)
	if set == nil {
		set = map[string]string{}
	}
	if v.Lib != "" {
		set[ov.EnvLibrary] = v.Lib
	}
	if v.Preload != "" {
		set[EnvPreload] = v.Preload
		for _, kv := range base {
			if k, old, _ := strings.Cut(kv, "="); k == EnvPreload && old != "" {
				set[EnvPreload] = v.Preload + ":" + old
			}
		}
	}
	out := make([]string, 0, len(base)+len(set))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, override := set[k]; !override {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		out = append(out, k+"="+set[k])
	}
	return out
}
