// Package model loads Hugging Face decoder checkpoints and GGUF files of the
// architectures it has a Family for (Llama, Qwen2, Gemma), generates
// deterministic synthetic ones, and emits the decoder as OpenVINO IR for a
// static context capacity.
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

// Config mirrors the fields of a Hugging Face config.json that the decoders
// of the families use; names follow the file. Derived values are methods.
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
	HiddenActivation      string          `json:"hidden_activation,omitempty"` // Gemma's, over hidden_act
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
// Qwen2, and for Llama and Gemma when attention_bias is set (Family.Biases).
func (c *Config) QKVBias() bool { return c.biases().QKV }

// OProjBias reports whether o_proj carries a bias: Llama's and Gemma's
// attention_bias covers all four attention projections, Qwen2's q/k/v bias
// does not.
func (c *Config) OProjBias() bool { return c.biases().O }

// MLPBiases reports whether gate, up and down projections carry biases
// (Llama's mlp_bias).
func (c *Config) MLPBiases() bool { return c.biases().MLP }

// Theta is rope_theta, or the Llama default of 10000 when it is absent (0).
func (c *Config) Theta() float64 {
	if c.RopeTheta != 0 {
		return c.RopeTheta
	}
	return 10000
}

// MaxConfigBytes is the largest config.json read; real ones are a few KiB.
const MaxConfigBytes = 1 << 20

// Limits on the counts of a config.json, checked before anything is sized
// by them. They are far above every released Llama, Qwen2 or Gemma model (126
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

	"max_position_embeddings": maxPositions,
}

// Bounds on the floating-point values of a configuration.
const (
	// minRMSNormEps and maxRMSNormEps bound rms_norm_eps. Released models
	// use 1e-6 or 1e-5; the graph adds the value in f32, where a smaller one
	// is (close to) zero and leaves an all-zero row NaN, and a larger one
	// flattens the activations it normalizes.
	minRMSNormEps = 1e-30
	maxRMSNormEps = 0.1
	// minRopeTheta and maxRopeTheta bound rope_theta (10000 to 1e7 in
	// released models): at or below 1 the rotary frequencies grow along the
	// head instead of falling, and an infinite base leaves every pair but
	// the first unrotated.
	minRopeTheta = 1
	maxRopeTheta = 1e12
	// maxPositions bounds max_position_embeddings (10M in the longest
	// released models): paged graphs are compiled for the model's context.
	maxPositions = 1 << 24
)

// configNames names the fields of a Config as its source spells them, for
// errors: file prefixes every message ("config.json"; "" for none) and key
// maps a config.json field name to the key that held the value.
type configNames struct {
	file string
	key  func(field string) string
}

// jsonNames names config.json's own fields.
var jsonNames = configNames{file: "config.json", key: func(f string) string { return f }}

func (n configNames) errorf(format string, a ...any) error {
	if n.file == "" {
		return fmt.Errorf(format, a...)
	}
	return fmt.Errorf("%s: "+format, append([]any{n.file}, a...)...)
}

// Validate rejects configurations the graph emitter cannot build, naming the
// offending field: unsupported features, counts that are not positive or
// beyond configLimits, floating-point values that are not finite or outside
// their sane range, and derived sizes that do not fit.
func (c *Config) Validate() error { return c.validate(jsonNames) }

// validate is Validate with errors naming fields as n does.
func (c *Config) validate(n configNames) error {
	fam := c.Family()
	switch {
	case c.ModelType == "":
		return fmt.Errorf("%w: config.json has no model_type", ErrUnsupported)
	case fam == nil:
		return unsupportedFamily("model_type", c.ModelType)
	}
	if len(c.RopeScaling) > 0 && string(c.RopeScaling) != "null" {
		return fmt.Errorf("%w: rope_scaling %s (only plain RoPE is supported)", ErrUnsupported, c.RopeScaling)
	}
	if _, err := fam.Activation(c); err != nil {
		return err
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
		{"max_position_embeddings", c.MaxPositionEmbeddings, true},
	} {
		limit := configLimits[f.name]
		switch {
		case f.optional && f.v == 0:
		case f.v <= 0 && f.optional:
			return n.errorf("%s must be positive when given, got %d", n.key(f.name), f.v)
		case f.v <= 0:
			return n.errorf("%s must be positive, got %d", n.key(f.name), f.v)
		case f.v > limit:
			return n.errorf("%s %d is beyond the limit of %d", n.key(f.name), f.v, limit)
		}
	}
	if c.RopeTheta < 0 {
		return n.errorf("%s must be positive when given, got %g", n.key("rope_theta"), c.RopeTheta)
	}
	if c.RopeTheta != 0 {
		if err := checkRopeTheta(n, c.RopeTheta); err != nil {
			return err
		}
	}
	if c.HeadDimField == 0 && c.HiddenSize%c.NumAttentionHeads != 0 {
		return n.errorf("%s %d is not a multiple of %s %d and %s is absent",
			n.key("hidden_size"), c.HiddenSize, n.key("num_attention_heads"), c.NumAttentionHeads, n.key("head_dim"))
	}
	if c.HeadDim()%2 != 0 {
		return n.errorf("head dimension %d (%s) must be even for rotary embeddings", c.HeadDim(), c.headDimFrom(n))
	}
	if c.NumAttentionHeads%c.KVHeads() != 0 {
		return n.errorf("%s %d is not a multiple of %s %d",
			n.key("num_attention_heads"), c.NumAttentionHeads, n.key("num_key_value_heads"), c.KVHeads())
	}
	if c.RMSNormEps <= 0 {
		return n.errorf("%s must be positive, got %g", n.key("rms_norm_eps"), c.RMSNormEps)
	}
	if !(c.RMSNormEps >= minRMSNormEps && c.RMSNormEps <= maxRMSNormEps) {
		return n.errorf("%s %g is not a finite number in [%g, %g]", n.key("rms_norm_eps"), c.RMSNormEps, minRMSNormEps, maxRMSNormEps)
	}
	if c.HeadDim() > configLimits["head_dim"] {
		return n.errorf("head dimension %d (%s) is beyond the limit of %d", c.HeadDim(), c.headDimFrom(n), configLimits["head_dim"])
	}
	if p := ParamCount(c); p > maxParams {
		return n.errorf("%d parameters is beyond the limit of %d", p, int64(maxParams))
	}
	return nil
}

// checkRopeTheta requires a rotary base that is finite, above minRopeTheta
// and at most maxRopeTheta.
func checkRopeTheta(n configNames, v float64) error {
	if !(v > minRopeTheta && v <= maxRopeTheta) {
		return n.errorf("%s %g is not a finite number above %g and at most %g", n.key("rope_theta"), v, float64(minRopeTheta), maxRopeTheta)
	}
	return nil
}

// headDimFrom says where HeadDim comes from, for errors.
func (c *Config) headDimFrom(n configNames) string {
	if c.HeadDimField > 0 {
		return n.key("head_dim")
	}
	return n.key("hidden_size") + " / " + n.key("num_attention_heads")
}

// maxParams bounds the parameters a config may describe (2^40, a 1T-
// parameter model): the product of limited counts still fits an int64.
const maxParams = 1 << 40

// LoadConfig reads and validates dir/config.json (or a GGUF file's
// metadata): config.json's keys over the defaults of its family's
// transformers config class (Family.HFDefaults).
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
	var kind struct {
		ModelType string `json:"model_type"`
	}
	if json.Unmarshal(b, &kind) == nil {
		if f := LookupFamily(kind.ModelType); f != nil {
			f.HFDefaults(&c)
		}
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	// A rope_theta of 0 reads as absent (the default 10000); an explicit 0
	// is refused rather than replaced.
	var given struct {
		RopeTheta *float64 `json:"rope_theta"`
	}
	if json.Unmarshal(b, &given) == nil && given.RopeTheta != nil && *given.RopeTheta == 0 {
		return nil, fmt.Errorf("%s: %w", path, jsonNames.errorf("rope_theta must be positive when given, got 0"))
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}
