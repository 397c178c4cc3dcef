package model

import (
	"fmt"
	"math"
	"strings"
)

// gemmaFamily is Gemma v1 (GemmaForCausalLM, transformers' modeling_gemma.py;
// google/gemma-2b, gemma-7b, gemma-1.1-*-it): Llama's decoder with four
// differences the graph asks the family about.
//
//   - RMSNorm multiplies by (1 + w) (GemmaRMSNorm); llama.cpp's converter
//     adds the 1 to the stored weights, so GGUF files multiply by them as
//     they are (GGUF.Norm).
//   - The token embeddings are multiplied by sqrt(hidden_size) before the
//     first layer; the tied lm_head reads them unscaled.
//   - The MLP is GeGLU: gelu_pytorch_tanh(gate) * up. The activation is
//     hidden_activation when config.json gives one, else gelu_pytorch_tanh
//     whatever hidden_act says (the released configs say "gelu"; GemmaMLP of
//     transformers 4.38 to 4.46 ignores it, as llama.cpp does).
//   - head_dim is its own (256 where hidden/heads is 192 in gemma-7b), and
//     GemmaConfig's defaults tie the lm_head and set head_dim 256.
//
// Attention is Llama's (scale 1/sqrt(head_dim), plain RoPE, biases with
// attention_bias); the MLP has no biases. llama.cpp stores q and k in
// Hugging Face's order (NeoX rotary), and the files' tokenizer is
// SentencePiece ("llama").
var gemmaFamily = &Family{
	ModelType:    "gemma",
	Architecture: "GemmaForCausalLM",
	HFDefaults: func(c *Config) {
		c.TieWordEmbeddings = true
		c.HeadDimField = 256
	},
	GGUFConfig: func(_ *GGUFFile, c *Config) error {
		c.HiddenAct, c.HiddenActivation = gemmaActivationName, gemmaActivationName
		return nil
	},
	Activation: func(c *Config) (Activation, error) {
		switch c.HiddenActivation {
		case "", gemmaActivationName:
			return ActGELUTanh, nil
		}
		return 0, fmt.Errorf("%w: hidden_activation %q (Gemma runs %s only)", ErrUnsupported, c.HiddenActivation, gemmaActivationName)
	},
	Biases: func(c *Config) Biases {
		attn := c.AttentionBias != nil && *c.AttentionBias
		return Biases{QKV: attn, O: attn}
	},
	Norm:         NormOnePlusWeight,
	Embedding:    EmbedSqrtHidden,
	GGUF:         GGUFLayout{Names: llamaCppNames, QK: QKAsHF, Norm: NormWeight},
	Tokenizers:   []string{"llama"},
	ChatTemplate: GemmaChatTemplate,
	Presets: []Preset{
		// Multi-query like gemma-2b, a head_dim of 32 where hidden/heads is
		// 16, tied, Gemma's token ids (pad 0, eos 1, bos 2); runs in seconds.
		{"gemma-tiny", DTypeF32, func() *Config {
			return &Config{
				ModelType: "gemma", Architectures: []string{"GemmaForCausalLM"},
				VocabSize: 512, HiddenSize: 64, IntermediateSize: 192, NumHiddenLayers: 2,
				NumAttentionHeads: 4, NumKeyValueHeads: 1, HeadDimField: 32, RMSNormEps: 1e-6,
				RopeTheta: 10000, TieWordEmbeddings: true, AttentionBias: new(false),
				MaxPositionEmbeddings: 8192, HiddenAct: gemmaActivationName, HiddenActivation: gemmaActivationName,
				BOSTokenID: new(2), EOSTokenID: []byte("1"),
			}
		}},
	},
	SynthInit: gemmaSynthInit,
}

// gemmaActivationName is transformers' name of GELU's tanh approximation.
const gemmaActivationName = "gelu_pytorch_tanh"

// gemmaSynthInit keeps a synthetic Gemma as robust as the others (see
// Synthesize): its norm weights are drawn around 0, so that 1 + w is
// around 1 like the other families' w, and its residual branches (o_proj,
// down_proj) sqrt(hidden) times larger, so that each layer outweighs the
// scaled embedding as much as in the others while the tied lm_head keeps
// N(0, 1) embeddings and their spread of logits (TestSynthLogitGap).
func gemmaSynthInit(s TensorSpec) (mean, std float64, ok bool) {
	switch {
	case strings.HasSuffix(s.Name, "norm.weight"):
		return 0, 0.1, true
	case strings.HasSuffix(s.Name, "o_proj.weight") || strings.HasSuffix(s.Name, "down_proj.weight"):
		return 0, synthResidualGain * math.Sqrt(float64(s.Shape[0])/float64(s.Shape[1])), true
	}
	return 0, 0, false
}

// GemmaChatTemplate is Gemma's turn format, the template of a Gemma
// checkpoint that carries none: <start_of_turn>user / model turns closed by
// <end_of_turn>, after bos_token. Gemma has no system turn: a system
// message first is put in front of the first user message, as llama.cpp's
// built-in Gemma template does (Google's own template refuses one), and
// one elsewhere is a user turn of its own.
const GemmaChatTemplate = `{{ bos_token }}{% for message in messages %}` +
	`{% if message['role'] == 'system' %}{{ '<start_of_turn>user\n' + message['content'] | trim }}` +
	`{% if loop.index0 == 0 and not loop.last and messages[1]['role'] == 'user' %}{{ '\n\n' }}{% else %}{{ '<end_of_turn>\n' }}{% endif %}` +
	`{% elif message['role'] == 'user' and loop.index0 == 1 and messages[0]['role'] == 'system' %}{{ message['content'] | trim + '<end_of_turn>\n' }}` +
	`{% else %}{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}` +
	`{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endif %}{% endfor %}` +
	`{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}`
