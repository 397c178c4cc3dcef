package model

import "strings"

// llamaFamily is Llama (LlamaForCausalLM, transformers' modeling_llama.py):
// RMSNorm, SwiGLU, rotary embeddings; attention_bias gives all four
// attention projections a bias and mlp_bias all three MLP ones. llama.cpp
// stores q and k with their rows permuted.
var llamaFamily = &Family{
	ModelType:    "llama",
	Architecture: "LlamaForCausalLM",
	// LlamaConfig's defaults of the keys read are this package's readings
	// of an absent key.
	HFDefaults: func(*Config) {},
	GGUFConfig: llamaGGUFConfig,
	Activation: siluOnly,
	Biases: func(c *Config) Biases {
		attn := c.AttentionBias != nil && *c.AttentionBias
		return Biases{QKV: attn, O: attn, MLP: c.MLPBias != nil && *c.MLPBias}
	},
	Norm:       NormWeight,
	Embedding:  EmbedAsIs,
	GGUF:       GGUFLayout{Names: llamaCppNames, QK: QKInterleaved, Norm: NormWeight},
	Tokenizers: []string{"gpt2", "llama"}, // SmolLM2 and Llama 3 files; Llama 2 and TinyLlama files
	Presets: []Preset{
		// Untied, no biases, multi-query (1 KV head) and an explicit head_dim
		// of 24 that differs from hidden/heads (64/4).
		{"tiny-llama", DTypeF32, func() *Config {
			return &Config{
				ModelType: "llama", Architectures: []string{"LlamaForCausalLM"},
				VocabSize: 384, HiddenSize: 64, IntermediateSize: 160, NumHiddenLayers: 2,
				NumAttentionHeads: 4, NumKeyValueHeads: 1, HeadDimField: 24, RMSNormEps: 1e-5,
				RopeTheta: 10000, AttentionBias: new(false), MaxPositionEmbeddings: 4096, HiddenAct: "silu",
			}
		}},
		// The shapes of meta-llama/Llama-3.2-1B (1.24B parameters) but
		// without its "llama3" rope_scaling, which this package does not
		// implement; positions beyond the original 8192 therefore differ
		// from the real model.
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
	},
}

// llamaGGUFConfig reads Llama's biases from the tensors a file holds: any
// attention bias in any layer sets attention_bias, any MLP bias mlp_bias,
// and ggufCheckTensors then wants them all.
func llamaGGUFConfig(f *GGUFFile, cfg *Config) error {
	cfg.HiddenAct = "silu"
	for i := range f.Tensors {
		var hf string
		if m := ggufLayerRE.FindStringSubmatch(f.Tensors[i].Name); m != nil {
			hf = llamaCppNames.Layer[m[2]]
		}
		switch {
		case !strings.HasSuffix(hf, ".bias"):
		case strings.HasPrefix(hf, "self_attn."):
			cfg.AttentionBias = new(true)
		case strings.HasPrefix(hf, "mlp."):
			cfg.MLPBias = new(true)
		}
	}
	return nil
}
