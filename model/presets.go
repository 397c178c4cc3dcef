package model

import (
	"fmt"
	"strings"
)

// preset is a named architecture for synthetic checkpoints.
type preset struct {
	name  string
	dtype DType // default synthesis dtype
	cfg   func() *Config
}

// presets, in the order Presets lists them.
//
//   - tiny: Qwen2-style (q/k/v biases), GQA 4:2, tied; runs in seconds.
//   - tiny-llama: Llama, untied, no biases, multi-query (1 KV head) and an
//     explicit head_dim of 24 that differs from hidden/heads (64/4).
//   - small: Qwen2-style, about 39M parameters.
//   - qwen2.5-0.5b: the shapes of Qwen/Qwen2.5-0.5B (494M parameters).
//   - llama-3.2-1b: the shapes of meta-llama/Llama-3.2-1B (1.24B
//     parameters) but without its "llama3" rope_scaling, which this package
//     does not implement; positions beyond the original 8192 therefore differ
//     from the real model.
//
// The synthetic-only presets carry no bos/eos token ids; the real-shape ones
// carry the real ids.
var presets = []preset{
	{"tiny", DTypeF32, func() *Config {
		return &Config{
			ModelType: "qwen2", Architectures: []string{"Qwen2ForCausalLM"},
			VocabSize: 512, HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2,
			NumAttentionHeads: 4, NumKeyValueHeads: 2, RMSNormEps: 1e-6, RopeTheta: 1e6,
			TieWordEmbeddings: true, MaxPositionEmbeddings: 4096, HiddenAct: "silu",
		}
	}},
	{"tiny-llama", DTypeF32, func() *Config {
		return &Config{
			ModelType: "llama", Architectures: []string{"LlamaForCausalLM"},
			VocabSize: 384, HiddenSize: 64, IntermediateSize: 160, NumHiddenLayers: 2,
			NumAttentionHeads: 4, NumKeyValueHeads: 1, HeadDimField: 24, RMSNormEps: 1e-5,
			RopeTheta: 10000, AttentionBias: new(false), MaxPositionEmbeddings: 4096, HiddenAct: "silu",
		}
	}},
	{"small", DTypeF32, func() *Config {
		return &Config{
			ModelType: "qwen2", Architectures: []string{"Qwen2ForCausalLM"},
			VocabSize: 32000, HiddenSize: 512, IntermediateSize: 1408, NumHiddenLayers: 8,
			NumAttentionHeads: 8, NumKeyValueHeads: 2, RMSNormEps: 1e-6, RopeTheta: 1e6,
			TieWordEmbeddings: true, MaxPositionEmbeddings: 32768, HiddenAct: "silu",
		}
	}},
	{"qwen2.5-0.5b", DTypeBF16, func() *Config {
		return &Config{
			ModelType: "qwen2", Architectures: []string{"Qwen2ForCausalLM"},
			VocabSize: 151936, HiddenSize: 896, IntermediateSize: 4864, NumHiddenLayers: 24,
			NumAttentionHeads: 14, NumKeyValueHeads: 2, RMSNormEps: 1e-6, RopeTheta: 1e6,
			TieWordEmbeddings: true, MaxPositionEmbeddings: 32768, HiddenAct: "silu",
			BOSTokenID: new(151643), EOSTokenID: []byte("151643"),
		}
	}},
	{"llama-3.2-1b", DTypeBF16, func() *Config {
		return &Config{
			ModelType: "llama", Architectures: []string{"LlamaForCausalLM"},
			VocabSize: 128256, HiddenSize: 2048, IntermediateSize: 8192, NumHiddenLayers: 16,
			NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDimField: 64, RMSNormEps: 1e-5,
			RopeTheta: 500000, TieWordEmbeddings: true, AttentionBias: new(false),
			MaxPositionEmbeddings: 131072, HiddenAct: "silu",
			BOSTokenID: new(128000), EOSTokenID: []byte("128001"),
		}
	}},
}

// Presets lists the preset names in a fixed order, smallest first.
func Presets() []string {
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.name
	}
	return names
}

func lookupPreset(name string) (preset, error) {
	for _, p := range presets {
		if p.name == name {
			return p, nil
		}
	}
	return preset{}, fmt.Errorf("unknown preset %q (have %s)", name, strings.Join(Presets(), ", "))
}

// PresetConfig returns a fresh copy of a preset's configuration.
func PresetConfig(name string) (*Config, error) {
	p, err := lookupPreset(name)
	if err != nil {
		return nil, err
	}
	return p.cfg(), nil
}

// DefaultDType is the synthesis dtype of a preset: BF16 for the real-shape
// presets (as they ship), F32 for the others. It is "" for an unknown preset.
func DefaultDType(name string) DType {
	p, err := lookupPreset(name)
	if err != nil {
		return ""
	}
	return p.dtype
}
