package model

import (
	"slices"
	"testing"
)

func TestPresets(t *testing.T) {
	want := []string{"tiny", "tiny-llama", "gemma-tiny", "small", "qwen2.5-0.5b", "llama-3.2-1b"}
	if got := Presets(); !slices.Equal(got, want) {
		t.Fatalf("Presets() = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		name                                          string
		modelType                                     string
		hidden, layers, heads, kv, headDim, inter, vb int
		tied, bias                                    bool
		theta, eps                                    float64
		dtype                                         DType
	}{
		{"tiny", "qwen2", 64, 2, 4, 2, 16, 128, 512, true, true, 1e6, 1e-6, DTypeF32},
		{"tiny-llama", "llama", 64, 2, 4, 1, 24, 160, 384, false, false, 10000, 1e-5, DTypeF32},
		{"gemma-tiny", "gemma", 64, 2, 4, 1, 32, 192, 512, true, false, 10000, 1e-6, DTypeF32},
		{"small", "qwen2", 512, 8, 8, 2, 64, 1408, 32000, true, true, 1e6, 1e-6, DTypeF32},
		{"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 64, 4864, 151936, true, true, 1e6, 1e-6, DTypeBF16},
		{"llama-3.2-1b", "llama", 2048, 16, 32, 8, 64, 8192, 128256, true, false, 500000, 1e-5, DTypeBF16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := PresetConfig(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			got := []any{c.ModelType, c.HiddenSize, c.NumHiddenLayers, c.NumAttentionHeads, c.KVHeads(), c.HeadDim(),
				c.IntermediateSize, c.VocabSize, c.TieWordEmbeddings, c.QKVBias(), c.Theta(), c.RMSNormEps, DefaultDType(tc.name)}
			want := []any{tc.modelType, tc.hidden, tc.layers, tc.heads, tc.kv, tc.headDim,
				tc.inter, tc.vb, tc.tied, tc.bias, tc.theta, tc.eps, tc.dtype}
			if !slices.Equal(got, want) {
				t.Errorf("got  %v\nwant %v", got, want)
			}
			if len(c.RopeScaling) != 0 {
				t.Errorf("rope_scaling set: %s", c.RopeScaling)
			}
			c.HiddenSize = -1 // must not leak into the next caller
			if again, _ := PresetConfig(tc.name); again.HiddenSize != tc.hidden {
				t.Error("PresetConfig returns shared state")
			}
		})
	}
	if c, _ := PresetConfig("qwen2.5-0.5b"); c.MaxPositionEmbeddings != 32768 {
		t.Errorf("qwen2.5-0.5b max_position_embeddings = %d", c.MaxPositionEmbeddings)
	}
}

func TestPresetUnknown(t *testing.T) {
	if _, err := PresetConfig("huge"); err == nil {
		t.Error("PresetConfig(huge) succeeded")
	}
	if d := DefaultDType("huge"); d != "" {
		t.Errorf("DefaultDType(huge) = %q", d)
	}
}
