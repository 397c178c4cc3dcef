package model

import (
	"fmt"
	"slices"
	"strings"
)

// A Family is one decoder architecture: everything that differs between
// Llama, Qwen2 and Gemma, in one value per architecture (family_*.go).
// The rest of the package asks a Config's family (Config.Family) instead of
// comparing model types: the loaders for the config mapping and the GGUF
// tensor layout, the graph builder for its forms, Synthesize for its
// presets. docs/extending.md ("A new architecture") lists what a new one
// needs; TestFamilies fails when one leaves a hook out.
type Family struct {
	// ModelType is config.json's model_type and GGUF's general.architecture.
	ModelType string
	// Architecture is config.json's architectures entry: the transformers
	// class a checkpoint built from a GGUF file claims.
	Architecture string

	// HFDefaults sets the values transformers' config class gives keys that
	// config.json leaves out, where they differ from what this package reads
	// for an absent key (Go's zero value, rope_theta 10000, head_dim
	// hidden/heads). LoadConfig reads config.json over them.
	HFDefaults func(*Config)
	// GGUFConfig sets what a GGUF file says of the Config through its family
	// alone (the activation; biases, from the tensors present). ggufConfig
	// has read llama.cpp's common {arch}.* keys and the tied lm_head before.
	GGUFConfig func(f *GGUFFile, c *Config) error
	// Activation is the MLP's gate activation the config names, or an error
	// wrapping ErrUnsupported that names the key.
	Activation func(*Config) (Activation, error)
	// Biases says which linear layers carry a bias.
	Biases func(*Config) Biases

	// Norm is the RMSNorm form of a Hugging Face checkpoint's norm weights;
	// Embedding the scale of the token embeddings (not of a tied lm_head).
	Norm      NormForm
	Embedding EmbeddingScale

	// GGUF is how llama.cpp's files store the family.
	GGUF GGUFLayout

	// Tokenizers are the tokenizer.ggml.model values of the family's GGUF
	// files, "gpt2" (byte-level BPE) or "llama" (SentencePiece), the first
	// the one scripts/synth_to_gguf.py writes for it. A file's tokenizer is
	// always its own; these are the ones package tokenizer must build.
	Tokenizers []string
	// ChatTemplate is the template of a checkpoint that carries none
	// (ReadChatTemplate); "" leaves chat's default, ChatML.
	ChatTemplate string
	// Presets are the family's synthetic checkpoints (ovrun synth --preset),
	// the first one small enough for the reference tests.
	Presets []Preset
	// SynthInit, when set, overrides synthDistribution for some tensors
	// (ok true): a family whose forms change the scale of the activations
	// keeps the synthetic model's logits as robust as the others'.
	SynthInit func(TensorSpec) (mean, std float64, ok bool)
}

// GGUFLayout is how a family's GGUF files differ from its Hugging Face
// checkpoints: names, row order, and values changed by the converter.
type GGUFLayout struct {
	// Names maps the file's tensor names to Hugging Face names.
	Names *GGUFNames
	// QK is the order of the q and k projections' rows in the file.
	QK QKRows
	// Norm is the RMSNorm form of the file's norm weights (llama.cpp's Gemma
	// converter stores 1 + w, so the graph multiplies by them as they are).
	Norm NormForm
}

// GGUFNames maps GGUF tensor names (llama.cpp's gguf-py tensor_mapping.py)
// to Hugging Face ones: whole names, and layer names after "blk.N.".
type GGUFNames struct {
	Global, Layer map[string]string
}

// Biases says which linear layers of a decoder layer carry a bias.
type Biases struct {
	QKV bool // q_proj, k_proj and v_proj
	O   bool // o_proj
	MLP bool // gate_proj, up_proj and down_proj
}

// NormForm is how an RMSNorm applies its weight w to the normalized x̂.
// The zero value is no form: every family names its own.
type NormForm int

const (
	// NormWeight is x̂ * w (Llama, Qwen2; Gemma's GGUF files).
	NormWeight NormForm = iota + 1
	// NormOnePlusWeight is x̂ * (1 + w) in f32 (Gemma's GemmaRMSNorm).
	NormOnePlusWeight
)

// EmbeddingScale is what the token embeddings are multiplied by before the
// first layer. The zero value is no scale: every family names its own.
type EmbeddingScale int

const (
	// EmbedAsIs leaves the embeddings as they are (Llama, Qwen2).
	EmbedAsIs EmbeddingScale = iota + 1
	// EmbedSqrtHidden multiplies them by sqrt(hidden_size), rounded to f32
	// (Gemma's normalizer).
	EmbedSqrtHidden
)

// Activation is the MLP's gate activation: down(act(gate(x)) * up(x)).
// The zero value is no activation.
type Activation int

const (
	// ActSiLU is x * sigmoid(x) (SwiGLU: Llama, Qwen2).
	ActSiLU Activation = iota + 1
	// ActGELUTanh is GELU's tanh approximation, torch's gelu(approximate=
	// "tanh") (GeGLU: Gemma's gelu_pytorch_tanh).
	ActGELUTanh
)

// QKRows is the order of q and k projection rows in a GGUF file. The zero
// value is no order: every family names its own.
type QKRows int

const (
	// QKAsHF is Hugging Face's order (rotate-half halves per head).
	QKAsHF QKRows = iota + 1
	// QKInterleaved is llama.cpp's convert_hf_to_gguf permutation of Llama's
	// q and k (interleaved pairs per head), undone while loading
	// (ggufUnpermute).
	QKInterleaved
)

// Preset is a named synthetic checkpoint of a family.
type Preset struct {
	Name   string
	DType  DType          // default synthesis dtype
	Config func() *Config // a fresh copy each call
}

// families are the supported architectures, in the order errors list them.
var families = []*Family{llamaFamily, qwen2Family, gemmaFamily}

// Families lists the supported architectures.
func Families() []*Family { return slices.Clone(families) }

// LookupFamily returns the family of a model_type (or GGUF
// general.architecture), nil when unsupported.
func LookupFamily(modelType string) *Family {
	for _, f := range families {
		if f.ModelType == modelType {
			return f
		}
	}
	return nil
}

// unsupportedFamily is the one error for an architecture without a family:
// key names where it came from (model_type, general.architecture).
func unsupportedFamily(key, name string) error {
	names := make([]string, len(families))
	for i, f := range families {
		names[i] = f.ModelType
	}
	return fmt.Errorf("%w: %s %q (supported: %s)", ErrUnsupported, key, name, strings.Join(names, ", "))
}

// Family is the architecture of c's model_type, nil when unsupported
// (Validate refuses such a config).
func (c *Config) Family() *Family { return LookupFamily(c.ModelType) }

// biases are c's family's biases; none for an unsupported model_type.
func (c *Config) biases() Biases {
	if f := c.Family(); f != nil {
		return f.Biases(c)
	}
	return Biases{}
}

// NormForm is the RMSNorm form of the checkpoint's norm weights: the
// family's, or its GGUF files' where the converter changed them.
func (c *Checkpoint) NormForm() NormForm {
	f := c.Config.Family()
	if f == nil {
		return 0
	}
	if c.GGUF != nil {
		return f.GGUF.Norm
	}
	return f.Norm
}

// forms are the graph's choices that depend on the model's family.
type forms struct {
	norm       NormForm
	embedding  EmbeddingScale
	activation Activation
}

// familyForms resolves the forms of w's checkpoint through its family: the
// norm form of its weights (a GGUF file's may differ from the family's),
// the embedding scale and the activation the config names.
func familyForms(w *Weights) (forms, error) {
	cfg := w.Config()
	fam := cfg.Family()
	if fam == nil {
		return forms{}, unsupportedFamily("model_type", cfg.ModelType)
	}
	act, err := fam.Activation(cfg)
	if err != nil {
		return forms{}, err
	}
	return forms{norm: w.ck.NormForm(), embedding: fam.Embedding, activation: act}, nil
}

// siluOnly is the activation of the SwiGLU families: hidden_act silu, or
// absent (LlamaConfig's and Qwen2Config's default).
func siluOnly(c *Config) (Activation, error) {
	if c.HiddenAct != "" && c.HiddenAct != "silu" {
		return 0, fmt.Errorf("%w: hidden_act %q (only silu is supported)", ErrUnsupported, c.HiddenAct)
	}
	return ActSiLU, nil
}

// llamaCppNames are llama.cpp's names of the Llama-style decoder tensors,
// which Llama, Qwen2 and Gemma files share.
var llamaCppNames = &GGUFNames{
	Global: map[string]string{
		"token_embd.weight":  "model.embed_tokens.weight",
		"output_norm.weight": "model.norm.weight",
		"output.weight":      "lm_head.weight",
	},
	Layer: map[string]string{
		"attn_norm.weight":   "input_layernorm.weight",
		"ffn_norm.weight":    "post_attention_layernorm.weight",
		"attn_q.weight":      "self_attn.q_proj.weight",
		"attn_q.bias":        "self_attn.q_proj.bias",
		"attn_k.weight":      "self_attn.k_proj.weight",
		"attn_k.bias":        "self_attn.k_proj.bias",
		"attn_v.weight":      "self_attn.v_proj.weight",
		"attn_v.bias":        "self_attn.v_proj.bias",
		"attn_output.weight": "self_attn.o_proj.weight",
		"attn_output.bias":   "self_attn.o_proj.bias",
		"ffn_gate.weight":    "mlp.gate_proj.weight",
		"ffn_gate.bias":      "mlp.gate_proj.bias",
		"ffn_up.weight":      "mlp.up_proj.weight",
		"ffn_up.bias":        "mlp.up_proj.bias",
		"ffn_down.weight":    "mlp.down_proj.weight",
		"ffn_down.bias":      "mlp.down_proj.bias",
	},
}
