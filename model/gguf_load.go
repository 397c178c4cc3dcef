package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// This file turns a GGUF file into a Checkpoint: the Config from the
// metadata, and the tensors under the Hugging Face names the graph uses.

// ggufArchs maps a GGUF general.architecture to the config.json model_type
// and architectures entry.
var ggufArchs = map[string]string{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}

// ggufGlobalNames and ggufLayerNames map GGUF tensor names (llama.cpp's
// gguf-py/gguf/tensor_mapping.py) to Hugging Face names.
var (
	ggufGlobalNames = map[string]string{
		"token_embd.weight":  "model.embed_tokens.weight",
		"output_norm.weight": "model.norm.weight",
		"output.weight":      "lm_head.weight",
	}
	ggufLayerNames = map[string]string{
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
	}
	ggufLayerRE = regexp.MustCompile(`^blk\.(\d+)\.(.+)$`)
)

// Bounds on configuration values, checked before they size anything.
const (
	maxWidth = 1 << 20 // hidden, FFN and head counts
	maxVocab = 1 << 24
)

// loadGGUF opens a GGUF file as a checkpoint.
func loadGGUF(path string) (*Checkpoint, error) {
	f, err := OpenGGUF(path)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Dir: path, GGUF: f}
	if c.Config, err = ggufConfig(f); err != nil {
		c.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if c.Tensors, err = ggufTensors(f, c.Config); err != nil {
		c.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := CheckTensors(c.Config, c.Tensors); err != nil {
		c.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return c, nil
}

// ggufConfig builds the Config from the {arch}.* metadata keys. Errors name
// the key.
func ggufConfig(f *GGUFFile) (*Config, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	hfArch, ok := ggufArchs[arch]
	if !ok {
		return nil, fmt.Errorf("%w: general.architecture %q (supported: llama, qwen2)", ErrUnsupported, arch)
	}
	if n, err := f.Int("split.count"); err == nil && n > 1 {
		return nil, fmt.Errorf("%w: a split GGUF (split.count %d): merge the parts with llama-gguf-split --merge", ErrUnsupported, n)
	}
	cfg := &Config{ModelType: arch, Architectures: []string{hfArch}, HiddenAct: "silu"}
	key := func(s string) string { return arch + "." + s }
	for _, p := range []struct {
		key      string
		dst      *int
		limit    int64
		optional bool
	}{
		{key("embedding_length"), &cfg.HiddenSize, maxWidth, false},
		{key("block_count"), &cfg.NumHiddenLayers, int64(len(f.Tensors)), false},
		{key("feed_forward_length"), &cfg.IntermediateSize, maxWidth, false},
		{key("attention.head_count"), &cfg.NumAttentionHeads, maxWidth, false},
		{key("attention.head_count_kv"), &cfg.NumKeyValueHeads, maxWidth, true},
		{key("context_length"), &cfg.MaxPositionEmbeddings, 1 << 30, true},
		{key("vocab_size"), &cfg.VocabSize, maxVocab, true},
	} {
		v, err := ggufUniformInt(f, p.key)
		if errors.Is(err, ErrMissingKey) && p.optional {
			continue
		}
		if err != nil {
			return nil, err
		}
		if v < 1 || v > p.limit {
			return nil, fmt.Errorf("%w: %s %d is out of range [1, %d]", ErrCorrupt, p.key, v, p.limit)
		}
		*p.dst = int(v)
	}
	if cfg.VocabSize == 0 {
		if toks, err := f.Strings("tokenizer.ggml.tokens"); err == nil {
			cfg.VocabSize = len(toks)
		} else if t := ggufTensor(f, "token_embd.weight"); t != nil && len(t.Dims) == 2 {
			cfg.VocabSize = int(t.Dims[1])
		}
	}
	if cfg.VocabSize < 1 || cfg.VocabSize > maxVocab {
		return nil, fmt.Errorf("%w: vocabulary size %d (from %s, tokenizer.ggml.tokens or token_embd.weight) is out of range [1, %d]", ErrCorrupt, cfg.VocabSize, key("vocab_size"), maxVocab)
	}
	if cfg.RMSNormEps, err = f.Float(key("attention.layer_norm_rms_epsilon")); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if cfg.RopeTheta, err = f.Float(key("rope.freq_base")); err != nil && !errors.Is(err, ErrMissingKey) {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if kl, err := f.Int(key("attention.key_length")); err == nil {
		if kl < 1 || kl > maxWidth {
			return nil, fmt.Errorf("%w: %s %d is out of range", ErrCorrupt, key("attention.key_length"), kl)
		}
		if cfg.NumAttentionHeads == 0 || int(kl) != cfg.HiddenSize/cfg.NumAttentionHeads {
			cfg.HeadDimField = int(kl)
		}
	}
	if vl, err := f.Int(key("attention.value_length")); err == nil && int(vl) != cfg.HeadDim() {
		return nil, fmt.Errorf("%w: %s %d differs from the key length %d", ErrUnsupported, key("attention.value_length"), vl, cfg.HeadDim())
	}
	if rd, err := f.Int(key("rope.dimension_count")); err == nil && int(rd) != cfg.HeadDim() {
		return nil, fmt.Errorf("%w: %s %d: rotary embedding on part of the head (head dimension %d)", ErrUnsupported, key("rope.dimension_count"), rd, cfg.HeadDim())
	}
	if s, err := f.String(key("rope.scaling.type")); err == nil && s != "none" {
		return nil, fmt.Errorf("%w: %s %q (only plain RoPE is supported)", ErrUnsupported, key("rope.scaling.type"), s)
	}
	if ggufTensor(f, "rope_freqs.weight") != nil {
		return nil, fmt.Errorf("%w: tensor rope_freqs.weight (llama3 rope scaling; only plain RoPE is supported)", ErrUnsupported)
	}
	cfg.TieWordEmbeddings = ggufTensor(f, "output.weight") == nil
	if arch == "llama" {
		if ggufTensor(f, "blk.0.attn_q.bias") != nil {
			cfg.AttentionBias = new(true)
		}
		if ggufTensor(f, "blk.0.ffn_up.bias") != nil {
			cfg.MLPBias = new(true)
		}
	}
	if id, err := f.Int("tokenizer.ggml.bos_token_id"); err == nil {
		cfg.BOSTokenID = new(int(id))
	}
	if id, err := f.Int("tokenizer.ggml.eos_token_id"); err == nil {
		cfg.EOSTokenID = json.RawMessage(strconv.FormatInt(id, 10))
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ggufUniformInt reads an integer key that some files store per layer as an
// array; an array must hold one value throughout.
func ggufUniformInt(f *GGUFFile, key string) (int64, error) {
	v, err := f.Int(key)
	if err == nil || errors.Is(err, ErrMissingKey) {
		return v, err
	}
	vs, aerr := f.Ints(key)
	if aerr != nil || len(vs) == 0 {
		return 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	for _, x := range vs {
		if x != vs[0] {
			return 0, fmt.Errorf("%w: %s differs between layers (%v...)", ErrUnsupported, key, vs[:min(len(vs), 4)])
		}
	}
	return vs[0], nil
}

func ggufTensor(f *GGUFFile, name string) *GGUFTensorInfo {
	for i := range f.Tensors {
		if f.Tensors[i].Name == name {
			return &f.Tensors[i]
		}
	}
	return nil
}

// ggufTensors maps the file's tensors to Hugging Face names, shapes and
// dtypes. Tensors the decoder does not use keep their GGUF names; a used
// tensor of a type this package does not run is an ErrUnsupported error.
func ggufTensors(f *GGUFFile, cfg *Config) (map[string]*Tensor, error) {
	out := make(map[string]*Tensor, len(f.Tensors))
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		name, mapped := ggufHFName(ti.Name, cfg.NumHiddenLayers)
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%w: tensor %q maps to %q, which another tensor already uses", ErrCorrupt, ti.Name, name)
		}
		shape := make([]int64, len(ti.Dims))
		for j, d := range ti.Dims {
			shape[len(shape)-1-j] = d
		}
		t := &Tensor{Name: ti.Name, DType: ti.Type.DType(), Shape: shape, Data: f.TensorData(ti)}
		if mapped && t.DType == "" {
			return nil, fmt.Errorf("%w: tensor %s has type %s (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K)", ErrUnsupported, ti.Name, ti.Type)
		}
		if t.DType == "" {
			t.DType = DType(ti.Type.String())
		}
		if cfg.ModelType == "llama" {
			ggufUnpermute(t, name, cfg)
		}
		out[name] = t
	}
	return out, nil
}

// ggufHFName maps a GGUF tensor name; mapped is false for names the decoder
// does not use (kept as they are).
func ggufHFName(name string, layers int) (hf string, mapped bool) {
	if hf, ok := ggufGlobalNames[name]; ok {
		return hf, true
	}
	m := ggufLayerRE.FindStringSubmatch(name)
	if m == nil {
		return name, false
	}
	suffix, ok := ggufLayerNames[m[2]]
	n, err := strconv.Atoi(m[1])
	if !ok || err != nil || n >= layers || m[1] != strconv.Itoa(n) {
		return name, false
	}
	return fmt.Sprintf("model.layers.%d.%s", n, suffix), true
}

// ggufUnpermute undoes llama.cpp's permutation of the q and k projection
// rows (weights and biases) of llama models. convert_hf_to_gguf.py reorders
// each head's D rows from Hugging Face's rotate-half layout (first half,
// second half) to ggml's interleaved pairs:
//
//	gguf row h*D + 2*j + half  =  hf row h*D + half*D/2 + j    (j < D/2)
//
// so Hugging Face row h*D + half*D/2 + j is GGUF row h*D + 2*j + half.
// Whole rows move, so for block types whole rows of blocks move. Tensors of
// an unexpected shape are left alone for CheckTensors to report.
func ggufUnpermute(t *Tensor, name string, cfg *Config) {
	var heads int
	switch {
	case strings.HasSuffix(name, ".self_attn.q_proj.weight"), strings.HasSuffix(name, ".self_attn.q_proj.bias"):
		heads = cfg.NumAttentionHeads
	case strings.HasSuffix(name, ".self_attn.k_proj.weight"), strings.HasSuffix(name, ".self_attn.k_proj.bias"):
		heads = cfg.KVHeads()
	default:
		return
	}
	D := cfg.HeadDim()
	if len(t.Shape) == 0 || t.Shape[0] != int64(heads*D) || D%2 != 0 {
		return
	}
	if be, _ := t.DType.block(); be == 0 || t.NumElements()/t.Shape[0]%int64(be) != 0 {
		return
	}
	order := make([]int, heads*D)
	for h := range heads {
		for half := range 2 {
			for j := range D / 2 {
				order[h*D+half*D/2+j] = h*D + 2*j + half
			}
		}
	}
	t.RowOrder = order
}
