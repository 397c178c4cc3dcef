package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// This file turns a GGUF file into a Checkpoint: the Config from the
// metadata, and the tensors under the Hugging Face names the graph uses.

// ggufLayerRE splits a layer tensor's GGUF name: blk.N.rest.
var ggufLayerRE = regexp.MustCompile(`^blk\.(\d+)\.(.+)$`)

// Bounds on configuration values, checked before they size anything.
const (
	maxWidth = 1 << 20 // hidden, FFN and head counts
	maxVocab = 1 << 24
)

// loadGGUF opens a GGUF file as a checkpoint. Every metadata value the
// model or its tokenizer uses is checked against its meaning, and every
// tensor must be one the decoder reads: a file that says one thing and holds
// another is refused, naming the key or the tensor.
func loadGGUF(path string) (*Checkpoint, error) {
	f, err := OpenGGUF(path)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Dir: path, GGUF: f}
	fail := func(err error) (*Checkpoint, error) {
		c.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if c.Config, err = ggufConfig(f); err != nil {
		return fail(err)
	}
	if c.Tensors, err = ggufTensors(f, c.Config); err != nil {
		return fail(err)
	}
	if err := ggufCheckTensors(c.Config, c.Tensors); err != nil {
		return fail(err)
	}
	if err := CheckTensors(c.Config, c.Tensors); err != nil {
		return fail(err)
	}
	v, err := ggufVocab(f)
	if err != nil {
		return fail(err)
	}
	if n := len(v.Tokens); n > c.Config.VocabSize {
		return fail(fmt.Errorf("%w: tokenizer.ggml.tokens holds %d tokens, more than the %d rows of token_embd.weight", ErrCorrupt, n, c.Config.VocabSize))
	}
	if _, err := ggufChatTemplate(f); err != nil {
		return fail(err)
	}
	return c, nil
}

// ggufConfigNames names the Config fields by the GGUF keys ggufConfig reads
// them from; vocabFrom is where the vocabulary size came from.
func ggufConfigNames(arch, vocabFrom string) configNames {
	keys := map[string]string{
		"vocab_size":              vocabFrom,
		"hidden_size":             arch + ".embedding_length",
		"intermediate_size":       arch + ".feed_forward_length",
		"num_hidden_layers":       arch + ".block_count",
		"num_attention_heads":     arch + ".attention.head_count",
		"num_key_value_heads":     arch + ".attention.head_count_kv",
		"head_dim":                arch + ".attention.key_length",
		"max_position_embeddings": arch + ".context_length",
		"rms_norm_eps":            arch + ".attention.layer_norm_rms_epsilon",
		"rope_theta":              arch + ".rope.freq_base",
	}
	return configNames{key: func(f string) string {
		if k, ok := keys[f]; ok {
			return k
		}
		return f
	}}
}

// ggufConfig builds the Config from the {arch}.* metadata keys and checks
// every value against its meaning. Errors name the key.
func ggufConfig(f *GGUFFile) (*Config, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	fam := LookupFamily(arch)
	if fam == nil {
		return nil, unsupportedFamily("general.architecture", arch)
	}
	if f.Has("split.count") {
		n, err := f.Int("split.count")
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
		case n < 1:
			return nil, fmt.Errorf("%w: split.count %d: a file is at least one part", ErrCorrupt, n)
		case n > 1:
			return nil, fmt.Errorf("%w: a split GGUF (split.count %d): merge the parts with llama-gguf-split --merge", ErrUnsupported, n)
		}
	}
	cfg := &Config{ModelType: arch, Architectures: []string{fam.Architecture}}
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
		{key("context_length"), &cfg.MaxPositionEmbeddings, maxPositions, true},
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
	vocabFrom := key("vocab_size")
	if cfg.VocabSize == 0 {
		if toks, err := f.Strings("tokenizer.ggml.tokens"); err == nil {
			cfg.VocabSize, vocabFrom = len(toks), "the length of tokenizer.ggml.tokens"
		} else if t := ggufTensor(f, "token_embd.weight"); t != nil && len(t.Dims) == 2 {
			cfg.VocabSize, vocabFrom = int(t.Dims[1]), "the rows of token_embd.weight"
		}
	}
	if cfg.VocabSize < 1 || cfg.VocabSize > maxVocab {
		return nil, fmt.Errorf("%w: vocabulary size %d (from %s, tokenizer.ggml.tokens or token_embd.weight) is out of range [1, %d]", ErrCorrupt, cfg.VocabSize, key("vocab_size"), maxVocab)
	}
	names := ggufConfigNames(arch, vocabFrom)
	if cfg.RMSNormEps, err = f.Float(key("attention.layer_norm_rms_epsilon")); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if f.Has(key("rope.freq_base")) {
		if cfg.RopeTheta, err = f.Float(key("rope.freq_base")); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		// Present means given: 0 is refused here, not read as absent.
		if err := checkRopeTheta(names, cfg.RopeTheta); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
	}
	if kl, ok, err := ggufOptionalInt(f, key("attention.key_length"), 1, maxWidth); err != nil {
		return nil, err
	} else if ok && int(kl) != cfg.HiddenSize/cfg.NumAttentionHeads {
		cfg.HeadDimField = int(kl)
	}
	for _, k := range []string{key("attention.value_length"), key("rope.dimension_count")} {
		v, ok, err := ggufOptionalInt(f, k, 1, maxWidth)
		if err != nil {
			return nil, err
		}
		if ok && int(v) != cfg.HeadDim() {
			what := "differs from the key length"
			if k == key("rope.dimension_count") {
				what = "rotates part of the head only"
			}
			return nil, fmt.Errorf("%w: %s %d %s (head dimension %d)", ErrUnsupported, k, v, what, cfg.HeadDim())
		}
	}
	if err := ggufPlainRoPE(f, arch); err != nil {
		return nil, err
	}
	for _, k := range []string{key("expert_count"), key("expert_used_count")} {
		if !f.Has(k) {
			continue
		}
		n, err := f.Int(k)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		if n != 0 {
			return nil, fmt.Errorf("%w: %s %d (mixture-of-experts models are not supported)", ErrUnsupported, k, n)
		}
	}
	cfg.TieWordEmbeddings = ggufTensor(f, "output.weight") == nil
	if err := fam.GGUFConfig(f, cfg); err != nil {
		return nil, err
	}
	for _, k := range []string{"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"} {
		// The id must name a token: [0, vocabulary size).
		id, ok, err := ggufOptionalInt(f, k, 0, int64(cfg.VocabSize)-1)
		if err != nil {
			return nil, err
		}
		switch {
		case !ok:
		case k == "tokenizer.ggml.bos_token_id":
			cfg.BOSTokenID = new(int(id))
		default:
			cfg.EOSTokenID = json.RawMessage(strconv.FormatInt(id, 10))
		}
	}
	if err := cfg.validate(names); err != nil {
		if !errors.Is(err, ErrUnsupported) {
			err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return nil, err
	}
	return cfg, nil
}

// ggufPlainRoPE refuses the rotary scalings llama.cpp applies and the
// decoder does not: a rope.scaling.type other than "none", a scaling factor
// other than 1 (llama.cpp scales linearly when the type is absent), or
// llama3's rope_freqs.weight.
func ggufPlainRoPE(f *GGUFFile, arch string) error {
	if k := arch + ".rope.scaling.type"; f.Has(k) {
		s, err := f.String(k)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		if s != "none" {
			return fmt.Errorf("%w: %s %q (only plain RoPE is supported)", ErrUnsupported, k, s)
		}
	}
	for _, k := range []string{arch + ".rope.scaling.factor", arch + ".rope.scale_linear"} {
		if !f.Has(k) {
			continue
		}
		v, err := f.Float(k)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		if v != 0 && v != 1 { // 0 is llama.cpp's "not scaled"
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("%w: %s %g is not a finite number", ErrCorrupt, k, v)
			}
			return fmt.Errorf("%w: %s %g (only plain RoPE is supported)", ErrUnsupported, k, v)
		}
	}
	if ggufTensor(f, "rope_freqs.weight") != nil {
		return fmt.Errorf("%w: tensor rope_freqs.weight (llama3 rope scaling; only plain RoPE is supported)", ErrUnsupported)
	}
	return nil
}

// ggufOptionalInt reads an integer key that may be absent (ok false) and
// must otherwise lie in [lo, hi]. A value of another type or out of range
// is an error wrapping ErrCorrupt that names the key.
func ggufOptionalInt(f *GGUFFile, key string, lo, hi int64) (v int64, ok bool, err error) {
	if !f.Has(key) {
		return 0, false, nil
	}
	if v, err = f.Int(key); err != nil {
		return 0, false, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if v < lo || v > hi {
		return 0, false, fmt.Errorf("%w: %s %d is out of range [%d, %d]", ErrCorrupt, key, v, lo, hi)
	}
	return v, true, nil
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
		return 0, fmt.Errorf("%w: %w", ErrCorrupt, err)
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
// dtypes. Every tensor must be one the decoder of cfg reads: a layer past
// block_count, a name the decoder has no place for, or a tensor of a part
// cfg does not have (a Qwen2 o_proj bias) is an error naming the tensor, as
// is a used tensor of a type this package does not run (ErrUnsupported).
func ggufTensors(f *GGUFFile, cfg *Config) (map[string]*Tensor, error) {
	fam := cfg.Family()
	names := fam.GGUF.Names
	used := map[string]bool{}
	for _, s := range UsedTensors(cfg) {
		used[s.Name] = true
	}
	out := make(map[string]*Tensor, len(f.Tensors))
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		name, err := ggufHFName(ti.Name, cfg, names)
		if err != nil {
			return nil, err
		}
		if !used[name] {
			return nil, fmt.Errorf("%w: tensor %q (%s) is not used by this %s model: refusing to ignore a weight the file holds", ErrUnsupported, ti.Name, name, cfg.ModelType)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%w: tensor %q maps to %q, which another tensor already uses", ErrCorrupt, ti.Name, name)
		}
		shape := make([]int64, len(ti.Dims))
		for j, d := range ti.Dims {
			shape[len(shape)-1-j] = d
		}
		t := &Tensor{Name: ti.Name, DType: ti.Type.DType(), Shape: shape, Data: f.TensorData(ti)}
		if t.DType == "" {
			return nil, fmt.Errorf("%w: tensor %s has type %s (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K)", ErrUnsupported, ti.Name, ti.Type)
		}
		if fam.GGUF.QK == QKInterleaved {
			ggufUnpermute(t, name, cfg)
		}
		out[name] = t
	}
	return out, nil
}

// ggufHFName maps a GGUF tensor name to its Hugging Face name. A layer at
// or past block_count wraps ErrCorrupt (the file holds more layers than it
// says, and running the ones it says gives wrong answers); a name the
// decoder has no place for wraps ErrUnsupported.
func ggufHFName(name string, cfg *Config, names *GGUFNames) (string, error) {
	if hf, ok := names.Global[name]; ok {
		return hf, nil
	}
	if m := ggufLayerRE.FindStringSubmatch(name); m != nil {
		n, err := strconv.Atoi(m[1])
		canonical := err == nil && m[1] == strconv.Itoa(n)
		if canonical && n >= cfg.NumHiddenLayers {
			return "", fmt.Errorf("%w: tensor %q is of layer %d, but %s.block_count is %d: the file holds layers it does not declare",
				ErrCorrupt, name, n, cfg.ModelType, cfg.NumHiddenLayers)
		}
		if suffix, ok := names.Layer[m[2]]; ok && canonical {
			return fmt.Sprintf("model.layers.%d.%s", n, suffix), nil
		}
	}
	return "", fmt.Errorf("%w: tensor %q is no part of a %s decoder: refusing to ignore a weight the file holds", ErrUnsupported, name, cfg.ModelType)
}

// ggufTensorName is the GGUF name of a Hugging Face tensor name, for errors.
func ggufTensorName(hf string, names *GGUFNames) string {
	for g, h := range names.Global {
		if h == hf {
			return g
		}
	}
	if rest, ok := strings.CutPrefix(hf, "model.layers."); ok {
		if n, suffix, ok := strings.Cut(rest, "."); ok {
			for g, h := range names.Layer {
				if h == suffix {
					return "blk." + n + "." + g
				}
			}
		}
	}
	return hf
}

// ggufCheckTensors requires every tensor of ggufUsedTensors with its shape,
// naming tensors and dimensions as the file does (fastest-varying first).
func ggufCheckTensors(cfg *Config, tensors map[string]*Tensor) error {
	for _, s := range UsedTensors(cfg) {
		t, ok := tensors[s.Name]
		if !ok {
			return fmt.Errorf("%w %q (%s)", ErrMissingTensor, ggufTensorName(s.Name, cfg.Family().GGUF.Names), s.Name)
		}
		if !slices.Equal(t.Shape, s.Shape) {
			return fmt.Errorf("%w: tensor %q has dims %v, want %v", ErrShape, t.Name, reversed(t.Shape), reversed(s.Shape))
		}
	}
	return nil
}

func reversed(s []int64) []int64 {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}

// ggufUnpermute undoes llama.cpp's permutation of the q and k projection
// rows (weights and biases) of the families that have it (QKInterleaved:
// Llama). convert_hf_to_gguf.py reorders
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
