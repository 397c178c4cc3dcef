package model

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// presets are every family's presets, smallest first (ParamCount, then
// name): tiny (Qwen2), tiny-llama, gemma-tiny, small (Qwen2),
// qwen2.5-0.5b, llama-3.2-1b. Each family's file describes its own.
var presets = sortedPresets()

func sortedPresets() []Preset {
	var all []Preset
	for _, f := range families {
		all = append(all, f.Presets...)
	}
	slices.SortStableFunc(all, func(a, b Preset) int {
		return cmp.Or(cmp.Compare(ParamCount(a.Config()), ParamCount(b.Config())), strings.Compare(a.Name, b.Name))
	})
	return all
}

// Presets lists the preset names in a fixed order, smallest first.
func Presets() []string {
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.Name
	}
	return names
}

func lookupPreset(name string) (Preset, error) {
	for _, p := range presets {
		if p.Name == name {
			return p, nil
		}
	}
	return Preset{}, fmt.Errorf("unknown preset %q (have %s)", name, strings.Join(Presets(), ", "))
}

// PresetConfig returns a fresh copy of a preset's configuration.
func PresetConfig(name string) (*Config, error) {
	p, err := lookupPreset(name)
	if err != nil {
		return nil, err
	}
	return p.Config(), nil
}

// DefaultDType is the synthesis dtype of a preset: BF16 for the real-shape
// presets (as they ship), F32 for the others. It is "" for an unknown preset.
func DefaultDType(name string) DType {
	p, err := lookupPreset(name)
	if err != nil {
		return ""
	}
	return p.DType
}
