package model

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testpy"
)

// Tests of GGUF files whose metadata says one thing and whose tensors or
// values mean another: each must fail Load with one line naming the GGUF key
// or tensor, never load and answer wrongly.

// set replaces the metadata entry of kv.key, or appends kv.
func (s *ggufSpec) set(kv gkv) {
	for i := range s.kvs {
		if s.kvs[i].key == kv.key {
			s.kvs[i] = kv
			return
		}
	}
	s.kvs = append(s.kvs, kv)
}

// addTensor appends an F32 tensor of dims at the next offset.
func (s *ggufSpec) addTensor(name string, dims ...uint64) {
	s.tensors = append(s.tensors, gtensor{name: name, dims: dims, offset: -1})
}

// withLayer1 copies layer 0's tensors as layer 1.
func withLayer1(s *ggufSpec) {
	for _, tn := range s.tensors {
		if rest, ok := strings.CutPrefix(tn.name, "blk.0."); ok {
			tn.name = "blk.1." + rest
			tn.offset = -1
			s.tensors = append(s.tensors, tn)
		}
	}
}

func f64kv(key string, v float64) gkv { return gkv{key: key, typ: GGUFFloat64, val: v} }

func tokenTypes(typ GGUFType, v any) gkv {
	return gkv{key: "tokenizer.ggml.token_type", typ: GGUFArray, elem: typ, val: v}
}

// typesWith is 40 normal token types with token 5 set to bad.
func typesWith[T int32 | int64 | uint64](bad T) []T {
	ts := make([]T, 40)
	for i := range ts {
		ts[i] = 1
	}
	ts[5] = bad
	return ts
}

func TestLoadGGUFRefusesLies(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	for _, tc := range []struct {
		name string
		spec func() *ggufSpec // tinyLlama when nil
		edit func(*ggufSpec)
		is   error
		want string
	}{
		// Tensors no part of the model uses.
		{name: "two layers, block_count 1", edit: withLayer1, is: ErrCorrupt,
			want: `tensor "blk.1.attn_norm.weight" is of layer 1, but llama.block_count is 1`},
		{name: "a stray layer tensor past block_count", edit: func(s *ggufSpec) { s.addTensor("blk.7.ffn_norm.weight", 32) }, is: ErrCorrupt,
			want: `tensor "blk.7.ffn_norm.weight" is of layer 7, but llama.block_count is 1`},
		{name: "unknown layer tensor", edit: func(s *ggufSpec) { s.addTensor("blk.0.attn_q_norm.weight", 16) }, is: ErrUnsupported,
			want: `tensor "blk.0.attn_q_norm.weight" is no part of a llama decoder`},
		{name: "unknown global tensor", edit: func(s *ggufSpec) { s.addTensor("position_embd.weight", 32, 256) }, is: ErrUnsupported,
			want: `tensor "position_embd.weight" is no part of a llama decoder`},
		{name: "layer number with a leading zero", edit: func(s *ggufSpec) { s.addTensor("blk.00.attn_norm.weight", 32) }, is: ErrUnsupported,
			want: `tensor "blk.00.attn_norm.weight" is no part of a llama decoder`},
		{name: "qwen2 o_proj bias", spec: func() *ggufSpec { return microSpec("qwen2") }, edit: func(s *ggufSpec) { s.addTensor("blk.0.attn_output.bias", 4) },
			is: ErrUnsupported, want: `tensor "blk.0.attn_output.bias" (model.layers.0.self_attn.o_proj.bias) is not used by this qwen2 model`},
		{name: "qwen2 MLP bias", spec: func() *ggufSpec { return microSpec("qwen2") }, edit: func(s *ggufSpec) { s.addTensor("blk.0.ffn_up.bias", 8) },
			is: ErrUnsupported, want: `tensor "blk.0.ffn_up.bias" (model.layers.0.mlp.up_proj.bias) is not used by this qwen2 model`},
		{name: "llama with one attention bias", edit: func(s *ggufSpec) { s.addTensor("blk.0.attn_q.bias", 32) }, is: ErrMissingTensor,
			want: `missing tensor "blk.0.attn_k.bias" (model.layers.0.self_attn.k_proj.bias)`},
		{name: "llama with q/k/v biases but no o_proj bias", edit: func(s *ggufSpec) {
			s.addTensor("blk.0.attn_q.bias", 32)
			s.addTensor("blk.0.attn_k.bias", 16)
			s.addTensor("blk.0.attn_v.bias", 16)
		}, is: ErrMissingTensor, want: `missing tensor "blk.0.attn_output.bias" (model.layers.0.self_attn.o_proj.bias)`},
		{name: "llama with one MLP bias", edit: func(s *ggufSpec) { s.addTensor("blk.0.ffn_down.bias", 32) }, is: ErrMissingTensor,
			want: `missing tensor "blk.0.ffn_gate.bias" (model.layers.0.mlp.gate_proj.bias)`},
		{name: "block_count 2, one layer", edit: func(s *ggufSpec) { s.set(u32kv("llama.block_count", 2)) }, is: ErrMissingTensor,
			want: `missing tensor "blk.1.attn_norm.weight" (model.layers.1.input_layernorm.weight)`},
		{name: "vocab_size differs from the embedding", edit: func(s *ggufSpec) { s.set(u32kv("llama.vocab_size", 41)) }, is: ErrShape,
			want: `tensor "token_embd.weight" has dims [32 40], want [32 41]`},

		// Floating-point values.
		{name: "rms eps +Inf", edit: func(s *ggufSpec) { s.set(f32kv("llama.attention.layer_norm_rms_epsilon", float32(inf))) }, is: ErrCorrupt,
			want: "llama.attention.layer_norm_rms_epsilon +Inf is not a finite number in [1e-30, 0.1]"},
		{name: "rms eps NaN", edit: func(s *ggufSpec) { s.set(f32kv("llama.attention.layer_norm_rms_epsilon", float32(nan))) }, is: ErrCorrupt,
			want: "llama.attention.layer_norm_rms_epsilon NaN is not a finite number"},
		{name: "rms eps 0", edit: func(s *ggufSpec) { s.set(f32kv("llama.attention.layer_norm_rms_epsilon", 0)) }, is: ErrCorrupt,
			want: "llama.attention.layer_norm_rms_epsilon must be positive, got 0"},
		{name: "rms eps 1", edit: func(s *ggufSpec) { s.set(f64kv("llama.attention.layer_norm_rms_epsilon", 1)) }, is: ErrCorrupt,
			want: "llama.attention.layer_norm_rms_epsilon 1 is not a finite number in [1e-30, 0.1]"},
		{name: "rms eps a string", edit: func(s *ggufSpec) { s.set(strkv("llama.attention.layer_norm_rms_epsilon", "1e-5")) }, is: ErrCorrupt,
			want: `"llama.attention.layer_norm_rms_epsilon" holds string, not a number`},
		{name: "no rms eps", edit: func(s *ggufSpec) { s.kvs = remove(s.kvs, "llama.attention.layer_norm_rms_epsilon") },
			is: ErrMissingKey, want: `"llama.attention.layer_norm_rms_epsilon"`},
		{name: "rope base NaN", edit: func(s *ggufSpec) { s.set(f32kv("llama.rope.freq_base", float32(nan))) }, is: ErrCorrupt,
			want: "llama.rope.freq_base NaN is not a finite number above 1 and at most 1e+12"},
		{name: "rope base +Inf", edit: func(s *ggufSpec) { s.set(f32kv("llama.rope.freq_base", float32(inf))) }, is: ErrCorrupt,
			want: "llama.rope.freq_base +Inf is not a finite number above 1"},
		{name: "rope base 0", edit: func(s *ggufSpec) { s.set(f32kv("llama.rope.freq_base", 0)) }, is: ErrCorrupt,
			want: "llama.rope.freq_base 0 is not a finite number above 1"},
		{name: "rope base negative", edit: func(s *ggufSpec) { s.set(f32kv("llama.rope.freq_base", -10000)) }, is: ErrCorrupt,
			want: "llama.rope.freq_base -10000 is not a finite number above 1"},
		{name: "rope base 1", edit: func(s *ggufSpec) { s.set(f32kv("llama.rope.freq_base", 1)) }, is: ErrCorrupt,
			want: "llama.rope.freq_base 1 is not a finite number above 1"},
		{name: "rope base a bool", edit: func(s *ggufSpec) { s.set(gkv{key: "llama.rope.freq_base", typ: GGUFBool, val: true}) }, is: ErrCorrupt,
			want: `"llama.rope.freq_base" holds bool, not a number`},
		{name: "rope scaling factor 4", edit: func(s *ggufSpec) { s.set(f32kv("llama.rope.scaling.factor", 4)) }, is: ErrUnsupported,
			want: "llama.rope.scaling.factor 4 (only plain RoPE is supported)"},
		{name: "rope scaling factor NaN", edit: func(s *ggufSpec) { s.set(f32kv("llama.rope.scaling.factor", float32(nan))) }, is: ErrCorrupt,
			want: "llama.rope.scaling.factor NaN is not a finite number"},
		{name: "old linear rope scale", edit: func(s *ggufSpec) { s.set(f32kv("llama.rope.scale_linear", 2)) }, is: ErrUnsupported,
			want: "llama.rope.scale_linear 2"},
		{name: "rope scaling type not a string", edit: func(s *ggufSpec) { s.set(u32kv("llama.rope.scaling.type", 1)) }, is: ErrCorrupt,
			want: `"llama.rope.scaling.type" holds uint32, not a string`},

		// Integer values.
		{name: "heads do not divide the width", edit: func(s *ggufSpec) {
			s.set(u32kv("llama.attention.head_count", 3))
			s.set(u32kv("llama.attention.head_count_kv", 3))
		}, is: ErrCorrupt, want: "llama.embedding_length 32 is not a multiple of llama.attention.head_count 3 and llama.attention.key_length is absent"},
		{name: "kv heads do not divide the heads", edit: func(s *ggufSpec) { s.set(u32kv("llama.attention.head_count_kv", 3)) }, is: ErrCorrupt,
			want: "llama.attention.head_count 2 is not a multiple of llama.attention.head_count_kv 3"},
		{name: "odd key length", edit: func(s *ggufSpec) { s.set(u32kv("llama.attention.key_length", 15)) }, is: ErrCorrupt,
			want: "head dimension 15 (llama.attention.key_length) must be even"},
		{name: "key length a string", edit: func(s *ggufSpec) { s.set(strkv("llama.attention.key_length", "16")) }, is: ErrCorrupt,
			want: `"llama.attention.key_length" holds string, not an integer`},
		{name: "key length 0", edit: func(s *ggufSpec) { s.set(u32kv("llama.attention.key_length", 0)) }, is: ErrCorrupt,
			want: "llama.attention.key_length 0 is out of range [1, 1048576]"},
		{name: "value length a float", edit: func(s *ggufSpec) { s.set(f32kv("llama.attention.value_length", 16)) }, is: ErrCorrupt,
			want: `"llama.attention.value_length" holds float32, not an integer`},
		{name: "value length differs", edit: func(s *ggufSpec) { s.set(u32kv("llama.attention.value_length", 8)) }, is: ErrUnsupported,
			want: "llama.attention.value_length 8 differs from the key length (head dimension 16)"},
		{name: "rope dimension count a string", edit: func(s *ggufSpec) { s.set(strkv("llama.rope.dimension_count", "16")) }, is: ErrCorrupt,
			want: `"llama.rope.dimension_count" holds string`},
		{name: "width beyond the config limit", edit: func(s *ggufSpec) { s.set(u32kv("llama.embedding_length", 1<<18)) }, is: ErrCorrupt,
			want: "llama.embedding_length 262144 is beyond the limit of 131072"},
		{name: "context length 0", edit: func(s *ggufSpec) { s.set(u32kv("llama.context_length", 0)) }, is: ErrCorrupt,
			want: "llama.context_length 0 is out of range [1, 16777216]"},
		{name: "context length 2^31", edit: func(s *ggufSpec) { s.set(u32kv("llama.context_length", 1<<31)) }, is: ErrCorrupt,
			want: "llama.context_length 2147483648 is out of range"},
		{name: "experts", edit: func(s *ggufSpec) { s.set(u32kv("llama.expert_count", 8)) }, is: ErrUnsupported,
			want: "llama.expert_count 8 (mixture-of-experts models are not supported)"},
		{name: "experts used", edit: func(s *ggufSpec) { s.set(u32kv("llama.expert_used_count", 2)) }, is: ErrUnsupported,
			want: "llama.expert_used_count 2"},
		{name: "expert count a string", edit: func(s *ggufSpec) { s.set(strkv("llama.expert_count", "0")) }, is: ErrCorrupt,
			want: `"llama.expert_count" holds string, not an integer`},
		{name: "split count 0", edit: func(s *ggufSpec) { s.set(gkv{key: "split.count", typ: GGUFUint16, val: uint16(0)}) }, is: ErrCorrupt,
			want: "split.count 0: a file is at least one part"},
		{name: "split count a string", edit: func(s *ggufSpec) { s.set(strkv("split.count", "2")) }, is: ErrCorrupt,
			want: `"split.count" holds string`},
		{name: "eos id past the vocabulary", edit: func(s *ggufSpec) { s.set(u32kv("tokenizer.ggml.eos_token_id", 40)) }, is: ErrCorrupt,
			want: "tokenizer.ggml.eos_token_id 40 is out of range [0, 39]"},
		{name: "negative bos id", edit: func(s *ggufSpec) { s.set(gkv{key: "tokenizer.ggml.bos_token_id", typ: GGUFInt32, val: int32(-1)}) }, is: ErrCorrupt,
			want: "tokenizer.ggml.bos_token_id -1 is out of range [0, 39]"},
		{name: "bos id a string", edit: func(s *ggufSpec) { s.set(strkv("tokenizer.ggml.bos_token_id", "1")) }, is: ErrCorrupt,
			want: `"tokenizer.ggml.bos_token_id" holds string, not an integer`},

		// Tokenizer metadata.
		{name: "token type 2^32+3", edit: func(s *ggufSpec) { s.set(tokenTypes(GGUFInt64, typesWith[int64](1<<32+3))) }, is: ErrCorrupt,
			want: "tokenizer.ggml.token_type[5] is 4294967299, not a GGUF token type (0..6)"},
		{name: "token type 7", edit: func(s *ggufSpec) { s.set(tokenTypes(GGUFInt32, typesWith[int32](7))) }, is: ErrCorrupt,
			want: "tokenizer.ggml.token_type[5] is 7, not a GGUF token type (0..6)"},
		{name: "token type -1", edit: func(s *ggufSpec) { s.set(tokenTypes(GGUFInt32, typesWith[int32](-1))) }, is: ErrCorrupt,
			want: "tokenizer.ggml.token_type[5] is -1"},
		{name: "token type 2^64-1", edit: func(s *ggufSpec) { s.set(tokenTypes(GGUFUint64, typesWith[uint64](math.MaxUint64))) }, is: ErrCorrupt,
			want: `"tokenizer.ggml.token_type" holds array of uint64, not an array of integers below 2^63`},
		{name: "token types of strings", edit: func(s *ggufSpec) { s.set(tokenTypes(GGUFString, tokens(40))) }, is: ErrCorrupt,
			want: `"tokenizer.ggml.token_type" holds array of string`},
		{name: "NaN score", edit: func(s *ggufSpec) {
			sc := make([]float32, 40)
			sc[3] = float32(nan)
			s.set(gkv{key: "tokenizer.ggml.scores", typ: GGUFArray, elem: GGUFFloat32, val: sc})
		}, is: ErrCorrupt, want: "tokenizer.ggml.scores[3] is NaN, not a finite float32"},
		{name: "tokenizer model not a string", edit: func(s *ggufSpec) { s.set(u32kv("tokenizer.ggml.model", 2)) }, is: ErrCorrupt,
			want: `"tokenizer.ggml.model" holds uint32, not a string`},
		{name: "pre-tokenizer not a string", edit: func(s *ggufSpec) { s.set(u32kv("tokenizer.ggml.pre", 2)) }, is: ErrCorrupt,
			want: `"tokenizer.ggml.pre" holds uint32, not a string`},
		{name: "add_bos_token not a bool", edit: func(s *ggufSpec) { s.set(u32kv("tokenizer.ggml.add_bos_token", 1)) }, is: ErrCorrupt,
			want: `"tokenizer.ggml.add_bos_token" holds uint32, not a bool`},
		{name: "more tokens than embedding rows, no vocab_size", edit: func(s *ggufSpec) {
			s.set(gkv{key: "tokenizer.ggml.tokens", typ: GGUFArray, elem: GGUFString, val: tokens(41)})
			s.set(tokenTypes(GGUFInt32, make([]int32, 41)))
		}, is: ErrShape, want: `tensor "token_embd.weight" has dims [32 40], want [32 41]`},
		{name: "more tokens than embedding rows", edit: func(s *ggufSpec) {
			s.set(u32kv("llama.vocab_size", 40))
			s.set(gkv{key: "tokenizer.ggml.tokens", typ: GGUFArray, elem: GGUFString, val: tokens(41)})
			s.set(tokenTypes(GGUFInt32, make([]int32, 41)))
		}, is: ErrCorrupt, want: "tokenizer.ggml.tokens holds 41 tokens, more than the 40 rows of token_embd.weight"},
		{name: "padding id past the tokens", edit: func(s *ggufSpec) { s.set(u32kv("tokenizer.ggml.padding_token_id", 40)) }, is: ErrCorrupt,
			want: "tokenizer.ggml.padding_token_id 40 is outside the vocabulary of 40 tokens"},
		{name: "chat template a number", edit: func(s *ggufSpec) { s.set(u32kv("tokenizer.chat_template", 7)) }, is: ErrCorrupt,
			want: `"tokenizer.chat_template" holds uint32, not a string`},
		{name: "chat template an array", edit: func(s *ggufSpec) {
			s.set(gkv{key: "tokenizer.chat_template", typ: GGUFArray, elem: GGUFString, val: []string{"{{ messages }}"}})
		}, is: ErrCorrupt, want: `"tokenizer.chat_template" holds array of string, not a string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tinyLlama()
			if tc.spec != nil {
				s = tc.spec()
			}
			tc.edit(s)
			c, err := Load(writeSpec(t, s.bytes()))
			if err == nil {
				c.Close()
				t.Fatal("Load succeeded")
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error %q does not wrap %v", err, tc.is)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q, want one line containing %q", err, tc.want)
			}
			if strings.Contains(msg, "config.json") {
				t.Errorf("error %q names config.json for a GGUF file", err)
			}
		})
	}
}

func remove(kvs []gkv, key string) []gkv {
	var out []gkv
	for _, kv := range kvs {
		if kv.key != key {
			out = append(out, kv)
		}
	}
	return out
}

// TestLoadGGUFTakesHonestValues: the edges of each range, and the biased
// forms the decoder runs, still load.
func TestLoadGGUFTakesHonestValues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  func() *ggufSpec
		edit  func(*ggufSpec)
		check func(*testing.T, *Checkpoint)
	}{
		{name: "no rope base is 10000", edit: func(s *ggufSpec) { s.kvs = remove(s.kvs, "llama.rope.freq_base") },
			check: func(t *testing.T, c *Checkpoint) {
				if c.Config.Theta() != 10000 {
					t.Errorf("theta %g", c.Config.Theta())
				}
			}},
		{name: "rope base 1e12", edit: func(s *ggufSpec) { s.set(f64kv("llama.rope.freq_base", 1e12)) }},
		{name: "rms eps 0.1", edit: func(s *ggufSpec) { s.set(f64kv("llama.attention.layer_norm_rms_epsilon", 0.1)) }},
		{name: "rms eps 1e-30", edit: func(s *ggufSpec) { s.set(f64kv("llama.attention.layer_norm_rms_epsilon", 1e-30)) }},
		{name: "rms eps a float64", edit: func(s *ggufSpec) { s.set(f64kv("llama.attention.layer_norm_rms_epsilon", 1e-6)) }},
		{name: "rope scaling none, factor 1, no experts", edit: func(s *ggufSpec) {
			s.set(strkv("llama.rope.scaling.type", "none"))
			s.set(f32kv("llama.rope.scaling.factor", 1))
			s.set(u32kv("llama.expert_count", 0))
			s.set(gkv{key: "split.count", typ: GGUFUint16, val: uint16(1)})
		}},
		{name: "token types 0..6 in uint8", edit: func(s *ggufSpec) {
			ts := make([]uint8, 40)
			for i := range ts {
				ts[i] = uint8(i % 7)
			}
			s.set(tokenTypes(GGUFUint8, ts))
		}},
		{name: "llama with all attention and MLP biases", edit: func(s *ggufSpec) {
			for name, n := range map[string]uint64{"attn_q": 32, "attn_k": 16, "attn_v": 16, "attn_output": 32, "ffn_gate": 64, "ffn_up": 64, "ffn_down": 32} {
				s.addTensor("blk.0."+name+".bias", n)
			}
		}, check: func(t *testing.T, c *Checkpoint) {
			if !c.Config.QKVBias() || !c.Config.OProjBias() || !c.Config.MLPBiases() {
				t.Errorf("biases not detected: %+v", c.Config)
			}
		}},
		{name: "two declared layers", edit: func(s *ggufSpec) { withLayer1(s); s.set(u32kv("llama.block_count", 2)) }},
		{name: "qwen2", spec: func() *ggufSpec { return microSpec("qwen2") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tinyLlama()
			if tc.spec != nil {
				s = tc.spec()
			}
			if tc.edit != nil {
				tc.edit(s)
			}
			c, err := Load(writeSpec(t, s.bytes()))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

// TestSmolLM2PassesEveryCheck: the real GGUF loads, with its tokenizer
// and chat template.
func TestSmolLM2PassesEveryCheck(t *testing.T) {
	c, err := Load(testpy.SmolLM2(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Config.NumHiddenLayers != 30 || c.Config.Theta() != 100000 {
		t.Errorf("config %+v", c.Config)
	}
	if _, err := c.Tokenizer(); err != nil {
		t.Fatal(err)
	}
	src, bos, eos, err := c.ReadChatTemplate()
	if err != nil || !strings.Contains(src, "messages") || bos == "" || eos == "" {
		t.Errorf("chat template %.40q, bos %q, eos %q, %v", src, bos, eos, err)
	}
}

func TestHFChatTemplate(t *testing.T) {
	for _, tc := range []struct {
		name, file string // file "" means no tokenizer_config.json
		want, err  string
	}{
		{name: "no file"},
		{name: "no key", file: `{"model_max_length": 8}`},
		{name: "null", file: `{"chat_template": null}`},
		{name: "string", file: `{"chat_template": "{{ x }}"}`, want: "{{ x }}"},
		{name: "named with a default", file: `{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}`, want: "D"},
		{name: "named without a default", file: `{"chat_template": [{"name": "tool_use", "template": "T"}]}`,
			err: `chat_template lists templates ["tool_use"] but none named "default"`},
		{name: "a number", file: `{"chat_template": 7}`, err: `chat_template is a number, neither a string nor a list`},
		{name: "an object", file: `{"chat_template": {"default": "D"}}`, err: `chat_template is an object`},
		{name: "a bool", file: `{"chat_template": true}`, err: `chat_template is a bool`},
		{name: "a list of strings", file: `{"chat_template": ["D"]}`, err: `chat_template is a list, neither`},
		{name: "a named template that is not a string", file: `{"chat_template": [{"name": "default", "template": 3}]}`, err: "chat_template is a list"},
		{name: "a named template without a template", file: `{"chat_template": [{"name": "default"}]}`, err: "chat_template[0] lacks a string name or template"},
		{name: "not JSON", file: `{"chat_template": "x"`, err: "corrupt checkpoint: unexpected end of JSON input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), TokenizerConfigName)
			if tc.file != "" {
				os.WriteFile(path, []byte(tc.file), 0o644)
			}
			src, err := hfChatTemplate(path)
			switch {
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), path)):
				t.Fatalf("error %v, want one naming %s and containing %q", err, path, tc.err)
			case src != tc.want:
				t.Errorf("template %q, want %q", src, tc.want)
			}
		})
	}
}

func TestReadChatTemplateReportsABadTokenizerConfig(t *testing.T) {
	dir := synthTo(t, "tiny", 4, DTypeF32)
	os.WriteFile(filepath.Join(dir, TokenizerConfigName), []byte(`{"chat_template": 7}`), 0o644)
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, _, err := c.ReadChatTemplate(); err == nil || !strings.Contains(err.Error(), "chat_template is a number") {
		t.Errorf("ReadChatTemplate = %v, want an error", err)
	}
}
