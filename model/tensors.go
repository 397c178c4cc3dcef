package model

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Sentinels of the architecture check, matched with errors.Is.
var (
	ErrMissingTensor = errors.New("missing tensor")
	ErrShape         = errors.New("wrong tensor shape")
)

// ShapeError reports a tensor whose shape differs from the architecture's.
// It matches ErrShape.
type ShapeError struct {
	Name      string
	Got, Want []int64
}

func (e *ShapeError) Error() string {
	return fmt.Sprintf("tensor %q has shape %v, want %v", e.Name, e.Got, e.Want)
}

func (e *ShapeError) Unwrap() error { return ErrShape }

// TensorSpec is a tensor the decoder needs, under its Hugging Face name.
type TensorSpec struct {
	Name  string
	Shape []int64
}

// RequiredTensors lists the tensors the decoder of cfg's family needs,
// in a fixed order: the embedding, each layer's tensors in forward order, the
// final norm, then lm_head.weight unless the embeddings are tied. Shapes are
// the PyTorch [out, in] layout of the checkpoint. q/k/v biases appear when
// cfg.QKVBias().
func RequiredTensors(cfg *Config) []TensorSpec {
	h := int64(cfg.HiddenSize)
	v := int64(cfg.VocabSize)
	in := int64(cfg.IntermediateSize)
	q := int64(cfg.NumAttentionHeads * cfg.HeadDim())
	kv := int64(cfg.KVHeads() * cfg.HeadDim())
	bias := cfg.QKVBias()

	specs := []TensorSpec{{"model.embed_tokens.weight", []int64{v, h}}}
	for i := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		add := func(name string, shape ...int64) {
			specs = append(specs, TensorSpec{p + name, shape})
		}
		add("input_layernorm.weight", h)
		add("self_attn.q_proj.weight", q, h)
		if bias {
			add("self_attn.q_proj.bias", q)
		}
		add("self_attn.k_proj.weight", kv, h)
		if bias {
			add("self_attn.k_proj.bias", kv)
		}
		add("self_attn.v_proj.weight", kv, h)
		if bias {
			add("self_attn.v_proj.bias", kv)
		}
		add("self_attn.o_proj.weight", h, q)
		add("post_attention_layernorm.weight", h)
		add("mlp.gate_proj.weight", in, h)
		add("mlp.up_proj.weight", in, h)
		add("mlp.down_proj.weight", h, in)
	}
	specs = append(specs, TensorSpec{"model.norm.weight", []int64{h}})
	if !cfg.TieWordEmbeddings {
		specs = append(specs, TensorSpec{"lm_head.weight", []int64{v, h}})
	}
	return specs
}

// UsedTensors lists every tensor the decoder of cfg reads:
// RequiredTensors, and the o_proj and MLP biases of the families that have
// them (Family.Biases: Llama's and Gemma's attention_bias, Llama's
// mlp_bias).
func UsedTensors(cfg *Config) []TensorSpec {
	specs := RequiredTensors(cfg)
	h, in := int64(cfg.HiddenSize), int64(cfg.IntermediateSize)
	for i := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		if cfg.OProjBias() {
			specs = append(specs, TensorSpec{p + "self_attn.o_proj.bias", []int64{h}})
		}
		if cfg.MLPBiases() {
			specs = append(specs, TensorSpec{p + "mlp.gate_proj.bias", []int64{in}},
				TensorSpec{p + "mlp.up_proj.bias", []int64{in}}, TensorSpec{p + "mlp.down_proj.bias", []int64{h}})
		}
	}
	return specs
}

// ParamCount is the number of parameters in the tensors RequiredTensors
// lists (a tied lm_head counts once).
func ParamCount(cfg *Config) int64 {
	var n int64
	for _, s := range RequiredTensors(cfg) {
		n += numElements(s.Shape)
	}
	return n
}

// CheckTensors verifies that tensors holds every tensor cfg's decoder reads
// (UsedTensors: RequiredTensors and the o_proj and MLP biases) with the
// right shape and a weight dtype, and reports the first failure in
// RequiredTensors order: a missing tensor wraps ErrMissingTensor, a wrong
// shape is a *ShapeError (ErrShape), a dtype that is not a weight type
// (IsWeight) wraps ErrUnsupported.
// A tied checkpoint may still carry lm_head.weight; it is then checked too.
func CheckTensors(cfg *Config, tensors map[string]*Tensor) error {
	specs := UsedTensors(cfg)
	if cfg.TieWordEmbeddings {
		if _, ok := tensors["lm_head.weight"]; ok {
			specs = append(specs, TensorSpec{"lm_head.weight", []int64{int64(cfg.VocabSize), int64(cfg.HiddenSize)}})
		}
	}
	for _, s := range specs {
		t, ok := tensors[s.Name]
		if !ok {
			return fmt.Errorf("%w %q", ErrMissingTensor, s.Name)
		}
		if !slices.Equal(t.Shape, s.Shape) {
			return &ShapeError{Name: s.Name, Got: t.Shape, Want: s.Shape}
		}
		if !t.DType.IsWeight() {
			return fmt.Errorf("%w: tensor %q has dtype %s; weights must be F32, F16 or BF16 (or, in GGUF, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K)", ErrUnsupported, s.Name, t.DType)
		}
	}
	return nil
}

// checkUnused refuses a tensor the decoder of cfg does not read (a tied
// checkpoint's lm_head.weight and the rotary inv_freq buffers some exports
// carry aside): a checkpoint that holds more than its config describes
// would otherwise run part of a model and answer wrongly without a sign.
func checkUnused(cfg *Config, tensors map[string]*Tensor) error {
	used := map[string]bool{"lm_head.weight": true}
	for _, s := range UsedTensors(cfg) {
		used[s.Name] = true
	}
	var extra []string
	for name := range tensors {
		if !used[name] && !strings.HasSuffix(name, ".rotary_emb.inv_freq") {
			extra = append(extra, name)
		}
	}
	if len(extra) == 0 {
		return nil
	}
	slices.Sort(extra)
	return fmt.Errorf("%w: tensor %q (and %d more) is not one the %s decoder of config.json reads", ErrUnsupported, extra[0], len(extra)-1, cfg.ModelType)
}
