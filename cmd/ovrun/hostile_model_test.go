package main

// Model files that lie (issue "A model file that lies"), through the
// binary: a GGUF whose metadata says one thing while its tensors or values
// mean another must fail `ovrun generate` with one line naming the GGUF key
// or tensor, never exit 0 with a wrong answer.

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
)

// gkv is a GGUF metadata entry: val is a string, a fixed-size number or bool
// (uint16, uint32, int32, float32, float64, ...), or a slice of one.
type gkv struct {
	key string
	val any
}

// gtensor is an F32 tensor with GGUF's dims (fastest-varying first).
type gtensor struct {
	name string
	dims []uint64
	data []byte
}

// ggufType is the GGUF value type of a Go value or of a slice's elements.
func ggufType(t *testing.T, v any) model.GGUFType {
	switch v.(type) {
	case uint8, []uint8:
		return model.GGUFUint8
	case uint16, []uint16:
		return model.GGUFUint16
	case uint32, []uint32:
		return model.GGUFUint32
	case int32, []int32:
		return model.GGUFInt32
	case float32, []float32:
		return model.GGUFFloat32
	case bool, []bool:
		return model.GGUFBool
	case string, []string:
		return model.GGUFString
	case uint64, []uint64:
		return model.GGUFUint64
	case int64, []int64:
		return model.GGUFInt64
	case float64, []float64:
		return model.GGUFFloat64
	}
	t.Fatalf("no GGUF type for %T", v)
	return 0
}

// encodeGGUF writes a version-3 GGUF file with 32-byte alignment, written
// here from the format's description independently of the reader.
func encodeGGUF(t *testing.T, kvs []gkv, tensors []gtensor) []byte {
	const align = 32
	var b bytes.Buffer
	w := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	str := func(s string) { w(uint64(len(s))); b.WriteString(s) }
	b.WriteString("GGUF")
	w(uint32(3))
	w(uint64(len(tensors)))
	w(uint64(len(kvs)))
	for _, kv := range kvs {
		str(kv.key)
		typ := ggufType(t, kv.val)
		switch v := reflect.ValueOf(kv.val); {
		case v.Kind() != reflect.Slice:
			w(uint32(typ))
			if typ == model.GGUFString {
				str(v.String())
			} else {
				w(kv.val)
			}
		case typ == model.GGUFString:
			w(uint32(model.GGUFArray))
			w(uint32(typ))
			w(uint64(v.Len()))
			for i := range v.Len() {
				str(v.Index(i).String())
			}
		default:
			w(uint32(model.GGUFArray))
			w(uint32(typ))
			w(uint64(v.Len()))
			w(kv.val)
		}
	}
	var off uint64
	for _, t := range tensors {
		str(t.name)
		w(uint32(len(t.dims)))
		w(t.dims)
		w(uint32(0)) // F32
		w(off)
		off += (uint64(len(t.data)) + align - 1) / align * align
	}
	b.Write(make([]byte, (align-b.Len()%align)%align))
	for _, t := range tensors {
		b.Write(t.data)
		b.Write(make([]byte, (align-len(t.data)%align)%align))
	}
	return b.Bytes()
}

// ggufNames maps the tiny preset's Hugging Face tensor names to GGUF's.
var ggufNames = strings.NewReplacer(
	"model.embed_tokens.weight", "token_embd.weight",
	"model.norm.weight", "output_norm.weight",
	"model.layers.", "blk.",
	".input_layernorm.", ".attn_norm.",
	".post_attention_layernorm.", ".ffn_norm.",
	".self_attn.q_proj.", ".attn_q.",
	".self_attn.k_proj.", ".attn_k.",
	".self_attn.v_proj.", ".attn_v.",
	".self_attn.o_proj.", ".attn_output.",
	".mlp.gate_proj.", ".ffn_gate.",
	".mlp.up_proj.", ".ffn_up.",
	".mlp.down_proj.", ".ffn_down.",
)

// tinyGGUF is the tiny preset (qwen2, two layers, F32, tied) as GGUF
// metadata and tensors, in GGUF's names and dims order. Qwen2 rows are not
// permuted, so the tensors' bytes are the checkpoint's.
func tinyGGUF(t *testing.T) ([]gkv, []gtensor) {
	t.Helper()
	dir := testenv.Synth(t, "tiny", "F32")
	f, err := model.OpenSafetensors(filepath.Join(dir, model.SafetensorsName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ts []gtensor
	for _, n := range f.Names() {
		st := f.Tensors[n]
		if st.DType != model.DTypeF32 {
			t.Fatalf("tensor %s is %s, want F32", n, st.DType)
		}
		dims := make([]uint64, len(st.Shape))
		for i, d := range st.Shape {
			dims[len(dims)-1-i] = uint64(d)
		}
		ts = append(ts, gtensor{name: ggufNames.Replace(n), dims: dims, data: bytes.Clone(st.Data)})
	}
	slices.SortFunc(ts, func(a, b gtensor) int { return strings.Compare(a.name, b.name) })
	kvs := []gkv{
		{"general.architecture", "qwen2"},
		{"qwen2.block_count", uint32(2)},
		{"qwen2.context_length", uint32(4096)},
		{"qwen2.embedding_length", uint32(64)},
		{"qwen2.feed_forward_length", uint32(128)},
		{"qwen2.attention.head_count", uint32(4)},
		{"qwen2.attention.head_count_kv", uint32(2)},
		{"qwen2.rope.freq_base", float32(1e6)},
		{"qwen2.attention.layer_norm_rms_epsilon", float32(1e-6)},
		{"qwen2.vocab_size", uint32(512)},
		{"tokenizer.chat_template", "{{ messages }}"},
	}
	return kvs, ts
}

func setKV(kvs []gkv, key string, val any) []gkv {
	kvs = slices.Clone(kvs)
	for i := range kvs {
		if kvs[i].key == key {
			kvs[i].val = val
			return kvs
		}
	}
	return append(kvs, gkv{key, val})
}

func writeGGUFFile(t *testing.T, kvs []gkv, ts []gtensor) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, encodeGGUF(t, kvs, ts), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// generatedTokens is the "tokens:" line of a generate run.
func generatedTokens(t *testing.T, stdout string) string {
	t.Helper()
	for _, line := range strings.Split(stdout, "\n") {
		if rest, ok := strings.CutPrefix(line, "tokens: "); ok {
			return rest
		}
	}
	t.Fatalf("no tokens line in %q", stdout)
	return ""
}

func TestLyingGGUFIsRefused(t *testing.T) {
	kvs, ts := tinyGGUF(t)
	gen := func(path string) []string {
		return []string{"generate", "--model", path, "--capacity", "32", "--prompt-tokens", "4", "--max-new-tokens", "4"}
	}

	// The honest file gives the safetensors checkpoint's tokens: the writer
	// is right, so what the lying files do is the lie's doing.
	stdout, stderr, code := ovrunIn(t, 60*time.Second, "", nil, gen(testenv.Synth(t, "tiny", "F32"))...)
	if code != 0 {
		t.Fatalf("safetensors: exit %d: %s", code, stderr)
	}
	want := generatedTokens(t, stdout)
	stdout, stderr, code = ovrunIn(t, 60*time.Second, "", nil, gen(writeGGUFFile(t, kvs, ts))...)
	if code != 0 {
		t.Fatalf("honest GGUF: exit %d: %s", code, stderr)
	}
	if got := generatedTokens(t, stdout); got != want {
		t.Fatalf("honest GGUF generates %s, the checkpoint %s", got, want)
	}

	typesWith := func(bad int64) []int64 {
		types := make([]int64, 512)
		for i := range types {
			types[i] = 1
		}
		types[5] = bad
		return types
	}
	extra := func(name string, n uint64) []gtensor {
		return append(slices.Clone(ts), gtensor{name: name, dims: []uint64{n}, data: make([]byte, 4*n)})
	}
	for _, tc := range []struct {
		name string
		kvs  []gkv
		ts   []gtensor
		want string
	}{
		{"two layers, block_count 1", setKV(kvs, "qwen2.block_count", uint32(1)), ts,
			`is of layer 1, but qwen2.block_count is 1: the file holds layers it does not declare`},
		{"rms_norm_eps +Inf", setKV(kvs, "qwen2.attention.layer_norm_rms_epsilon", float32(math.Inf(1))), ts,
			"qwen2.attention.layer_norm_rms_epsilon +Inf is not a finite number"},
		{"rope base NaN", setKV(kvs, "qwen2.rope.freq_base", float32(math.NaN())), ts,
			"qwen2.rope.freq_base NaN is not a finite number"},
		{"rope base +Inf", setKV(kvs, "qwen2.rope.freq_base", float32(math.Inf(1))), ts,
			"qwen2.rope.freq_base +Inf is not a finite number"},
		{"token type 2^32+3", setKV(kvs, "tokenizer.ggml.token_type", typesWith(1<<32+3)), ts,
			"tokenizer.ggml.token_type[5] is 4294967299, not a GGUF token type"},
		{"chat template a number", setKV(kvs, "tokenizer.chat_template", uint32(7)), ts,
			`metadata key "tokenizer.chat_template" holds uint32, not a string`},
		{"kv heads do not divide", setKV(kvs, "qwen2.attention.head_count_kv", uint32(3)), ts,
			"qwen2.attention.head_count 4 is not a multiple of qwen2.attention.head_count_kv 3"},
		{"a tensor no layer uses", kvs, extra("blk.0.attn_q_norm.weight", 16),
			`tensor "blk.0.attn_q_norm.weight" is no part of a qwen2 decoder`},
		{"an o_proj bias qwen2 has not", kvs, extra("blk.1.attn_output.bias", 64),
			`tensor "blk.1.attn_output.bias" (model.layers.1.self_attn.o_proj.bias) is not used by this qwen2 model`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeGGUFFile(t, tc.kvs, tc.ts)
			stdout, stderr, code := ovrunIn(t, 20*time.Second, "", nil, gen(path)...)
			assertOneLineError(t, stderr, code, tc.want)
			if strings.Contains(stdout, "tokens:") || strings.Contains(stderr, "config.json") {
				t.Errorf("stdout %q, stderr %q: an answer, or config.json named for a GGUF file", stdout, stderr)
			}
		})
	}
}
