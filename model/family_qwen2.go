package model

// qwen2Family is Qwen2 (Qwen2ForCausalLM, transformers' modeling_qwen2.py):
// Llama's decoder with a bias on q, k and v always and on no other layer.
var qwen2Family = &Family{
	ModelType:    "qwen2",
	Architecture: "Qwen2ForCausalLM",
	// Qwen2Config's defaults of the keys read are this package's readings
	// of an absent key.
	HFDefaults: func(*Config) {},
	GGUFConfig: func(_ *GGUFFile, c *Config) error {
		c.HiddenAct = "silu"
		return nil
	},
	Activation: siluOnly,
	Biases:     func(*Config) Biases { return Biases{QKV: true} },
	Norm:       NormWeight,
	Embedding:  EmbedAsIs,
	GGUF:       GGUFLayout{Names: llamaCppNames, QK: QKAsHF, Norm: NormWeight},
	Tokenizers: []string{"gpt2"},
	// The synthetic-only presets carry no bos/eos token ids; the real-shape
	// one carries the real ids.
	Presets: []Preset{
		// Q/k/v biases, GQA 4:2, tied; runs in seconds.
		{"tiny", DTypeF32, func() *Config {
			return &Config{
				ModelType: "qwen2", Architectures: []string{"Qwen2ForCausalLM"},
				VocabSize: 512, HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2,
				NumAttentionHeads: 4, NumKeyValueHeads: 2, RMSNormEps: 1e-6, RopeTheta: 1e6,
				TieWordEmbeddings: true, MaxPositionEmbeddings: 4096, HiddenAct: "silu",
			}
		}},
		// About 39M parameters.
		{"small", DTypeF32, func() *Config {
			return &Config{
				ModelType: "qwen2", Architectures: []string{"Qwen2ForCausalLM"},
				VocabSize: 32000, HiddenSize: 512, IntermediateSize: 1408, NumHiddenLayers: 8,
				NumAttentionHeads: 8, NumKeyValueHeads: 2, RMSNormEps: 1e-6, RopeTheta: 1e6,
				TieWordEmbeddings: true, MaxPositionEmbeddings: 32768, HiddenAct: "silu",
			}
		}},
		// The shapes of Qwen/Qwen2.5-0.5B (494M parameters).
		{"qwen2.5-0.5b", DTypeBF16, func() *Config {
			return &Config{
				ModelType: "qwen2", Architectures: []string{"Qwen2ForCausalLM"},
				VocabSize: 151936, HiddenSize: 896, IntermediateSize: 4864, NumHiddenLayers: 24,
				NumAttentionHeads: 14, NumKeyValueHeads: 2, RMSNormEps: 1e-6, RopeTheta: 1e6,
				TieWordEmbeddings: true, MaxPositionEmbeddings: 32768, HiddenAct: "silu",
				BOSTokenID: new(151643), EOSTokenID: []byte("151643"),
			}
		}},
	},
}
