// Package model loads Hugging Face decoder checkpoints (Llama and Qwen2
// families), generates deterministic synthetic ones, and emits the decoder as
// OpenVINO IR for a static context capacity.
package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

// ErrUnsupported reports a checkpoint this package cannot run.
var ErrUnsupported = errors.New("unsupported model")

// Config mirrors the fields of a Hugging Face config.json that the Llama and
// Qwen2 decoders use; names follow the file. Derived values are methods.
type Config struct {
	ModelType             string          `json:"model_type"`
	Architectures         []string        `json:"architectures,omitempty"`
	VocabSize             int             `json:"vocab_size"`
	HiddenSize            int             `json:"hidden_size"`
	IntermediateSize      int             `json:"intermediate_size"`
	NumHiddenLayers       int             `json:"num_hidden_layers"`
	NumAttentionHeads     int             `json:"num_attention_heads"`
	NumKeyValueHeads      int             `json:"num_key_value_heads,omitempty"`
	HeadDimField          int             `json:"head_dim,omitempty"`
	RMSNormEps            float64         `json:"rms_norm_eps"`
	RopeTheta             float64         `json:"rope_theta,omitempty"`
	RopeScaling           json.RawMessage `json:"rope_scaling,omitempty"`
	TieWordEmbeddings     bool            `json:"tie_word_embeddings"`
	AttentionBias         *bool           `json:"attention_bias,omitempty"`
	MLPBias               *bool           `json:"mlp_bias,omitempty"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings,omitempty"`
	HiddenAct             string          `json:"hidden_act,omitempty"`
	TorchDtype            string          `json:"torch_dtype,omitempty"`
	BOSTokenID            *int            `json:"bos_token_id,omitempty"`
	EOSTokenID            json.RawMessage `json:"eos_token_id,omitempty"`
}

// HeadDim is the per-head width: head_dim when given, else hidden/heads
// (0 for a config without heads, which Validate rejects).
func (c *Config) HeadDim() int {
	if c.HeadDimField > 0 {
		return c.HeadDimField
	}
	if c.NumAttentionHeads <= 0 {
		return 0
	}
	return c.HiddenSize / c.NumAttentionHeads
}

// KVHeads is the number of key/value heads (grouped- or multi-query attention).
func (c *Config) KVHeads() int {
	if c.NumKeyValueHeads > 0 {
		return c.NumKeyValueHeads
	}
	return c.NumAttentionHeads
}

// QKVBias reports whether q_proj, k_proj and v_proj carry a bias: always for
// Qwen2, and for Llama when attention_bias is set.
func (c *Config) QKVBias() bool {
	if c.ModelType == "qwen2" {
		return true
	}
	return c.AttentionBias != nil && *c.AttentionBias
}

// OProjBias reports whether o_proj carries a bias: Llama's attention_bias
// covers all four attention projections, Qwen2's q/k/v bias does not.
func (c *Config) OProjBias() bool {
	return c.ModelType == "llama" && c.AttentionBias != nil && *c.AttentionBias
}

// MLPBiases reports whether gate, up and down projections carry biases
// (Llama's mlp_bias).
func (c *Config) MLPBiases() bool {
	return c.ModelType == "llama" && c.MLPBias != nil && *c.MLPBias
}

// Theta is rope_theta with the Llama default of 10000.
func (c *Config) Theta() float64 {
	if c.RopeTheta > 0 {
		return c.RopeTheta
	}
	return 10000
}

// MaxConfigBytes is the largest config.json read; real ones are a few KiB.
const MaxConfigBytes = 1 << 20

// Limits on the counts of a config.json, checked before anything is sized
// by them. They are far above every released Llama or Qwen2 model (126
// layers, hidden 16384, intermediate 53248, 128 heads, vocabulary 152064)
// and far below what would exhaust memory while merely listing tensors.
var configLimits = map[string]int{
	"vocab_size":          1 << 22,
	"hidden_size":         1 << 17,
	"intermediate_size":   1 << 19,
	"num_hidden_layers":   1 << 10,
	"num_attention_heads": 1 << 11,
	"num_key_value_heads": 1 << 11,
	"head_dim":            1 << 13,
}

// Validate rejects configurations the graph emitter cannot build, naming the
// offending field: unsupported features, counts that are not positive or
// beyond configLimits, and derived sizes that do not fit.
func (c *Config) Validate() error {
	switch c.ModelType {
	case "llama", "qwen2":
	case "":
		return fmt.Errorf("%w: config.json has no model_type", ErrUnsupported)
	default:
		return fmt.Errorf("%w: model_type %q (supported: llama, qwen2)", ErrUnsupported, c.ModelType)
	}
	if len(c.RopeScaling) > 0 && string(c.RopeScaling) != "null" {
		return fmt.Errorf("%w: rope_scaling %s (only plain RoPE is supported)", ErrUnsupported, c.RopeScaling)
	}
	if c.HiddenAct != "" && c.HiddenAct != "silu" {
		return fmt.Errorf("%w: hidden_act %q (only silu is supported)", ErrUnsupported, c.HiddenAct)
	}
	for _, f := range []struct {
		name     string
		v        int
		optional bool // 0 means absent
	}{
		{"vocab_size", c.VocabSize, false}, {"hidden_size", c.HiddenSize, false},
		{"intermediate_size", c.IntermediateSize, false}, {"num_hidden_layers", c.NumHiddenLayers, false},
		{"num_attention_heads", c.NumAttentionHeads, false},
		{"num_key_value_heads", c.NumKeyValueHeads, true}, {"head_dim", c.HeadDimField, true},
	} {
		switch {
		case f.optional && f.v == 0:
		case f.v <= 0 && f.optional:
			return fmt.Errorf("config.json: %s must be positive when given, got %d", f.name, f.v)
		case f.v <= 0:
			return fmt.Errorf("config.json: %s must be positive, got %d", f.name, f.v)
		case f.v > configLimits[f.name]:
			return fmt.Errorf("config.json: %s %d is beyond the limit of %d", f.name, f.v, configLimits[f.name])
		}
	}
	if c.RopeTheta < 0 {
		return fmt.Errorf("config.json: rope_theta must be positive when given, got %g", c.RopeTheta)
	}
	if c.MaxPositionEmbeddings < 0 {
		return fmt.Errorf("config.json: max_position_embeddings must be positive when given, got %d", c.MaxPositionEmbeddings)
	}
	if c.HeadDimField == 0 && c.HiddenSize%c.NumAttentionHeads != 0 {
		return fmt.Errorf("config.json: hidden_size %d is not a multiple of num_attention_heads %d and head_dim is absent", c.HiddenSize, c.NumAttentionHeads)
	}
	if c.HeadDim()%2 != 0 {
		return fmt.Errorf("config.json: head dimension %d must be even for rotary embeddings", c.HeadDim())
	}
	if c.NumAttentionHeads%c.KVHeads() != 0 {
		return fmt.Errorf("config.json: num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumAttentionHeads, c.KVHeads())
	}
	if c.RMSNormEps <= 0 {
		return fmt.Errorf("config.json: rms_norm_eps must be positive, got %g", c.RMSNormEps)
	}
	if c.HeadDim() > configLimits["head_dim"] {
		return fmt.Errorf("config.json: head dimension %d is beyond the limit of %d", c.HeadDim(), configLimits["head_dim"])
	}
	if n := ParamCount(c); n > maxParams {
		return fmt.Errorf("config.json: %d parameters is beyond the limit of %d", n, int64(maxParams))
	}
	return nil
}

// maxParams bounds the parameters a config may describe (2^40, a 1T-
// parameter model): the product of limited counts still fits an int64.
const maxParams = 1 << 40

// LoadConfig reads and validates dir/config.json.
func LoadConfig(dir string) (*Config, error) {
	if st, err := os.Stat(dir); err == nil && st.Mode().IsRegular() {
		g, err := OpenGGUF(dir)
		if err != nil {
			return nil, err
		}
		defer g.Close()
		return ggufConfig(g)
	}
	path := filepath.Join(dir, "config.json")
	b, err := safefile.ReadFile(path, MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("read model config: %w", err)
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}
