package model

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// This file writes small GGUF files by hand (independently of the reader)
// to test loading and every validation error.

type gkv struct {
	key  string
	typ  GGUFType
	elem GGUFType // of an array
	val  any
}

type gtensor struct {
	name   string
	dims   []uint64
	typ    uint32 // ggml type id
	data   []byte // nil: zeros of the right size
	offset int64  // -1: next aligned offset
}

type ggufSpec struct {
	magic       string
	version     uint32
	align       int64
	kvs         []gkv
	tensors     []gtensor
	tensorCount int64 // -1: len(tensors)
	kvCount     int64 // -1: len(kvs)
}

func u32kv(key string, v uint32) gkv  { return gkv{key: key, typ: GGUFUint32, val: v} }
func f32kv(key string, v float32) gkv { return gkv{key: key, typ: GGUFFloat32, val: v} }
func strkv(key, v string) gkv         { return gkv{key: key, typ: GGUFString, val: v} }

// tinyLlama is a valid one-layer llama GGUF in F32 with a Q8_0 embedding:
// hidden 32, 2 heads of 16, 1 KV head, FFN 64, vocab 40, tied.
func tinyLlama() *ggufSpec {
	s := &ggufSpec{magic: "GGUF", version: 3, align: 32, tensorCount: -1, kvCount: -1}
	s.kvs = []gkv{
		strkv("general.architecture", "llama"),
		u32kv("llama.block_count", 1), u32kv("llama.embedding_length", 32),
		u32kv("llama.feed_forward_length", 64), u32kv("llama.attention.head_count", 2),
		u32kv("llama.attention.head_count_kv", 1), u32kv("llama.context_length", 256),
		f32kv("llama.rope.freq_base", 10000), f32kv("llama.attention.layer_norm_rms_epsilon", 1e-5),
		{key: "tokenizer.ggml.tokens", typ: GGUFArray, elem: GGUFString, val: tokens(40)},
		{key: "tokenizer.ggml.token_type", typ: GGUFArray, elem: GGUFInt32, val: make([]int32, 40)},
		strkv("tokenizer.chat_template", "  {{ messages }}\n"),
		u32kv("tokenizer.ggml.eos_token_id", 2),
	}
	add := func(name string, typ uint32, dims ...uint64) {
		s.tensors = append(s.tensors, gtensor{name: name, dims: dims, typ: typ, offset: -1})
	}
	add("token_embd.weight", 8, 32, 40)
	add("blk.0.attn_norm.weight", 0, 32)
	add("blk.0.attn_q.weight", 0, 32, 32)
	add("blk.0.attn_k.weight", 0, 32, 16)
	add("blk.0.attn_v.weight", 0, 32, 16)
	add("blk.0.attn_output.weight", 0, 32, 32)
	add("blk.0.ffn_norm.weight", 0, 32)
	add("blk.0.ffn_gate.weight", 0, 32, 64)
	add("blk.0.ffn_up.weight", 0, 32, 64)
	add("blk.0.ffn_down.weight", 0, 64, 32)
	add("output_norm.weight", 0, 32)
	return s
}

func tokens(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = string(rune('a'+i%26)) + strings.Repeat(" ", i/26)
	}
	return out
}

func (s *ggufSpec) tensor(name string) *gtensor {
	for i := range s.tensors {
		if s.tensors[i].name == name {
			return &s.tensors[i]
		}
	}
	panic("no tensor " + name)
}

func (s *ggufSpec) bytes() []byte {
	var b bytes.Buffer
	le := binary.LittleEndian
	w := func(v any) { binary.Write(&b, le, v) }
	str := func(v string) { w(uint64(len(v))); b.WriteString(v) }
	b.WriteString(s.magic)
	w(s.version)
	w(uint64(cmpOr(s.tensorCount, int64(len(s.tensors)))))
	w(uint64(cmpOr(s.kvCount, int64(len(s.kvs)))))
	value := func(t GGUFType, v any) {
		if t == GGUFString {
			str(v.(string))
			return
		}
		w(v)
	}
	for _, kv := range s.kvs {
		str(kv.key)
		w(uint32(kv.typ))
		if kv.typ != GGUFArray {
			value(kv.typ, kv.val)
			continue
		}
		w(uint32(kv.elem))
		switch a := kv.val.(type) {
		case []string:
			w(uint64(len(a)))
			for _, x := range a {
				str(x)
			}
		case []int32:
			w(uint64(len(a)))
			w(a)
		case []uint8:
			w(uint64(len(a)))
			w(a)
		case []int64:
			w(uint64(len(a)))
			w(a)
		case []uint64:
			w(uint64(len(a)))
			w(a)
		case []float32:
			w(uint64(len(a)))
			w(a)
		case uint64: // a bare length, for absurd counts
			w(a)
		}
	}
	var data bytes.Buffer
	for _, t := range s.tensors {
		str(t.name)
		w(uint32(len(t.dims)))
		w(t.dims)
		w(t.typ)
		d := t.data
		if d == nil {
			d = make([]byte, tensorBytes(t))
			for i := range d {
				d[i] = byte(i * 7 % 61) // finite values in every type
			}
		}
		off := t.offset
		if off < 0 {
			off = int64(data.Len())
		}
		w(uint64(off))
		data.Write(d)
		data.Write(make([]byte, (s.align-int64(data.Len())%s.align)%s.align))
	}
	b.Write(make([]byte, (s.align-int64(b.Len())%s.align)%s.align))
	b.Write(data.Bytes())
	return b.Bytes()
}

func cmpOr(v, def int64) int64 {
	if v < 0 {
		return def
	}
	return v
}

func tensorBytes(t gtensor) int64 {
	info, ok := ggmlTypes[GGMLType(t.typ)]
	if !ok {
		return 4
	}
	n := int64(1)
	for _, d := range t.dims {
		n *= int64(d)
	}
	return n / info.blockElems * info.bytes
}

func writeSpec(t *testing.T, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadGGUF(t *testing.T) {
	s := tinyLlama()
	c, err := Load(writeSpec(t, s.bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := c.Config
	if cfg.ModelType != "llama" || cfg.HiddenSize != 32 || cfg.NumHiddenLayers != 1 || cfg.NumAttentionHeads != 2 ||
		cfg.KVHeads() != 1 || cfg.IntermediateSize != 64 || cfg.VocabSize != 40 || !cfg.TieWordEmbeddings ||
		cfg.MaxPositionEmbeddings != 256 || cfg.Theta() != 10000 || float32(cfg.RMSNormEps) != 1e-5 || string(cfg.EOSTokenID) != "2" {
		t.Errorf("config %+v", cfg)
	}
	emb, err := c.Tensor("model.embed_tokens.weight")
	if err != nil {
		t.Fatal(err)
	}
	if emb.DType != DTypeQ8_0 || emb.Shape[0] != 40 || emb.Shape[1] != 32 {
		t.Errorf("embedding %s %v", emb.DType, emb.Shape)
	}
	q, _ := c.Tensor("model.layers.0.self_attn.q_proj.weight")
	if len(q.RowOrder) != 32 || q.RowOrder[1] != 2 || q.RowOrder[8] != 1 || q.RowOrder[16] != 16 {
		t.Errorf("q_proj row order %v", q.RowOrder)
	}
	if o, _ := c.Tensor("model.layers.0.self_attn.o_proj.weight"); o.RowOrder != nil {
		t.Errorf("o_proj has a row order")
	}
	tmpl, err := c.GGUF.String("tokenizer.chat_template")
	if err != nil || tmpl != "  {{ messages }}\n" {
		t.Errorf("chat template %q, %v (white space must survive)", tmpl, err)
	}
	toks, err := c.GGUF.Strings("tokenizer.ggml.tokens")
	if err != nil || len(toks) != 40 || toks[27] != "b " {
		t.Errorf("tokens %q, %v", toks, err)
	}
	if types, err := c.GGUF.Ints("tokenizer.ggml.token_type"); err != nil || len(types) != 40 {
		t.Errorf("token types %v, %v", types, err)
	}
	if _, err := c.GGUF.String("tokenizer.ggml.pre"); !errors.Is(err, ErrMissingKey) {
		t.Errorf("missing key error %v", err)
	}
	if _, err := c.GGUF.String("llama.block_count"); err == nil || !strings.Contains(err.Error(), "holds uint32, not a string") {
		t.Errorf("type mismatch error %v", err)
	}
	w := NewWeights(c)
	if err := w.Bind(make([]byte, w.Size())); err != nil {
		t.Fatal(err)
	}
	if !w.Compressed() {
		t.Error("a Q8_0 embedding is not compressed")
	}
	xml, err := BuildIR(w, GraphSpec{Capacity: 8, Chunk: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`element_type="i8" shape="40,1,32"`, `name="model.embed_tokens.weight/scale"`} {
		if !bytes.Contains(xml, []byte(want)) {
			t.Errorf("IR lacks %s", want)
		}
	}
}

func TestLoadGGUFErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*ggufSpec)
		bytes func([]byte) []byte // applied after edit
		is    error
		want  string
	}{
		{name: "bad magic", edit: func(s *ggufSpec) { s.magic = "GGUG" }, is: ErrCorrupt, want: `bad magic "GGUG"`},
		{name: "empty file", bytes: func([]byte) []byte { return nil }, is: ErrCorrupt, want: "file is 0 bytes, too short"},
		{name: "truncated in the header", bytes: func(b []byte) []byte { return b[:100] }, is: ErrCorrupt, want: "tensor_count 11 does not fit: the 76 bytes left hold at most 2"},
		{name: "truncated in the metadata", bytes: func(b []byte) []byte { return b[:bytes.Index(b, []byte("{{ messages"))+4] }, is: ErrCorrupt, want: `metadata key "tokenizer.chat_template": needs 17 bytes at offset 1065, but the file ends at 1071`},
		{name: "truncated in the tensor infos", bytes: func(b []byte) []byte { return b[:len(b)-40000] }, is: ErrCorrupt, want: "file ends at"},
		{name: "truncated in the data", bytes: func(b []byte) []byte { return b[:len(b)-100] }, is: ErrCorrupt, want: `tensor "output_norm.weight": data [`},
		{name: "version 1", edit: func(s *ggufSpec) { s.version = 1 }, is: ErrUnsupported, want: "GGUF version 1"},
		{name: "big-endian", edit: func(s *ggufSpec) { s.version = 3 << 24 }, is: ErrUnsupported, want: "big-endian"},
		{name: "version 9", edit: func(s *ggufSpec) { s.version = 9 }, is: ErrCorrupt, want: "version 9"},
		{name: "absurd tensor count", edit: func(s *ggufSpec) { s.tensorCount = 1 << 40 }, is: ErrCorrupt, want: "tensor_count 1099511627776 does not fit"},
		{name: "absurd key count", edit: func(s *ggufSpec) { s.kvCount = math.MaxInt64 }, is: ErrCorrupt, want: "metadata_kv_count 9223372036854775807 does not fit"},
		{name: "absurd array length", edit: func(s *ggufSpec) {
			s.kvs = append(s.kvs, gkv{key: "x", typ: GGUFArray, elem: GGUFUint32, val: uint64(1 << 62)})
		}, is: ErrCorrupt, want: `metadata key "x": array length 4611686018427387904 does not fit`},
		{name: "absurd string length", edit: func(s *ggufSpec) {
			s.kvs[0] = gkv{key: "general.architecture", typ: GGUFString, val: strings.Repeat("x", 8)}
		}, bytes: func(b []byte) []byte {
			i := bytes.Index(b, []byte("xxxxxxxx"))
			binary.LittleEndian.PutUint64(b[i-8:], 1<<50)
			return b
		}, is: ErrCorrupt, want: `metadata key "general.architecture" length 1125899906842624 exceeds the limit`},
		{name: "unknown value type", edit: func(s *ggufSpec) { s.kvs = append(s.kvs, gkv{key: "y", typ: 77, val: uint32(0)}) }, is: ErrCorrupt, want: `metadata key "y": unknown value type 77`},
		{name: "nested array", edit: func(s *ggufSpec) {
			s.kvs = append(s.kvs, gkv{key: "z", typ: GGUFArray, elem: GGUFArray, val: uint64(0)})
		}, is: ErrCorrupt, want: `metadata key "z": array of array is not supported`},
		{name: "duplicate key", edit: func(s *ggufSpec) { s.kvs = append(s.kvs, u32kv("llama.block_count", 1)) }, is: ErrCorrupt, want: `metadata key "llama.block_count" appears twice`},
		{name: "zero alignment", edit: func(s *ggufSpec) { s.kvs = append(s.kvs, u32kv("general.alignment", 0)) }, is: ErrCorrupt, want: "general.alignment 0 (uint32) is not a power-of-two"},
		{name: "string alignment", edit: func(s *ggufSpec) { s.kvs = append(s.kvs, strkv("general.alignment", "32")) }, is: ErrCorrupt, want: "general.alignment 32 (string)"},
		{name: "unknown tensor type", edit: func(s *ggufSpec) { s.tensor("blk.0.attn_v.weight").typ = 99 }, is: ErrCorrupt, want: `tensor "blk.0.attn_v.weight": unknown ggml type 99`},
		{name: "unsupported tensor type", edit: func(s *ggufSpec) {
			tn := s.tensor("blk.0.ffn_down.weight")
			tn.typ, tn.dims = 13, []uint64{256, 32} // Q5_K
		}, is: ErrUnsupported, want: "tensor blk.0.ffn_down.weight has type Q5_K"},
		{name: "partial block", edit: func(s *ggufSpec) { s.tensor("blk.0.attn_q.weight").typ = 12 }, is: ErrCorrupt, want: `tensor "blk.0.attn_q.weight": rows of 32 elements are not whole Q4_K blocks of 256`},
		{name: "too many dims", edit: func(s *ggufSpec) { s.tensor("output_norm.weight").dims = []uint64{32, 1, 1, 1, 1} }, is: ErrCorrupt, want: `tensor "output_norm.weight": n_dims 5`},
		{name: "absurd dims", edit: func(s *ggufSpec) { s.tensor("output_norm.weight").dims = []uint64{1 << 40, 1 << 40} }, is: ErrCorrupt, want: `dims [1099511627776 1099511627776] of F32 need more bytes`},
		{name: "tensor out of bounds", edit: func(s *ggufSpec) { s.tensor("output_norm.weight").offset = 1 << 20 }, is: ErrCorrupt, want: `tensor "output_norm.weight": offset 1048576 is past the end`},
		{name: "tensor runs past the data", edit: func(s *ggufSpec) { s.tensor("output_norm.weight").offset = 38528 }, is: ErrCorrupt, want: `tensor "output_norm.weight": data [38528, 38656) ends past the 38624-byte data section`},
		{name: "misaligned tensor", edit: func(s *ggufSpec) { s.tensor("blk.0.attn_norm.weight").offset = 1092 }, is: ErrCorrupt, want: "offset 1092 is not a multiple of the alignment 32"},
		{name: "overlapping tensors", edit: func(s *ggufSpec) { s.tensor("blk.0.ffn_norm.weight").offset = 0 }, is: ErrCorrupt, want: "overlaps tensor"},
		{name: "duplicate tensor", edit: func(s *ggufSpec) { s.tensor("blk.0.ffn_norm.weight").name = "blk.0.attn_norm.weight" }, is: ErrCorrupt, want: `tensor "blk.0.attn_norm.weight" appears twice`},
		{name: "long tensor name", edit: func(s *ggufSpec) { s.tensor("output_norm.weight").name = strings.Repeat("n", 64) }, is: ErrCorrupt, want: "name length 64 exceeds the limit 63"},
		{name: "unsupported architecture", edit: func(s *ggufSpec) { s.kvs[0] = strkv("general.architecture", "mamba") }, is: ErrUnsupported, want: `general.architecture "mamba" (supported: llama, qwen2, gemma)`},
		{name: "architecture not a string", edit: func(s *ggufSpec) { s.kvs[0] = u32kv("general.architecture", 1) }, is: ErrCorrupt, want: `"general.architecture" holds uint32, not a string`},
		{name: "no embedding length", edit: func(s *ggufSpec) { s.kvs = append(s.kvs[:2], s.kvs[3:]...) }, is: ErrMissingKey, want: `"llama.embedding_length"`},
		{name: "absurd block count", edit: func(s *ggufSpec) { s.kvs[1] = u32kv("llama.block_count", 4_000_000_000) }, is: ErrCorrupt, want: "llama.block_count 4000000000 is out of range [1, 11]"},
		{name: "absurd width", edit: func(s *ggufSpec) { s.kvs[2] = u32kv("llama.embedding_length", math.MaxUint32) }, is: ErrCorrupt, want: "llama.embedding_length 4294967295 is out of range"},
		{name: "rope scaling", edit: func(s *ggufSpec) { s.kvs = append(s.kvs, strkv("llama.rope.scaling.type", "yarn")) }, is: ErrUnsupported, want: `llama.rope.scaling.type "yarn"`},
		{name: "missing tensor", edit: func(s *ggufSpec) { s.tensors = s.tensors[:len(s.tensors)-1] }, is: ErrMissingTensor, want: `missing tensor "output_norm.weight" (model.norm.weight)`},
		{name: "wrong shape", edit: func(s *ggufSpec) { s.tensor("blk.0.attn_v.weight").dims = []uint64{16, 32} }, is: ErrShape, want: `tensor "blk.0.attn_v.weight" has dims [16 32], want [32 16]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tinyLlama()
			if tc.edit != nil {
				tc.edit(s)
			}
			b := s.bytes()
			if tc.bytes != nil {
				b = tc.bytes(b)
			}
			c, err := Load(writeSpec(t, b))
			if err == nil {
				c.Close()
				t.Fatal("Load succeeded")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q does not wrap %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q, want one line containing %q", err, tc.want)
			}
		})
	}
}

// microSpec is a valid one-layer model of hidden size 4 in F32: a small fuzz
// seed keeps the fuzzer's minimization cheap.
func microSpec(arch string) *ggufSpec {
	s := tinyLlama()
	s.kvs = []gkv{
		strkv("general.architecture", arch),
		u32kv(arch+".block_count", 1), u32kv(arch+".embedding_length", 4),
		u32kv(arch+".feed_forward_length", 8), u32kv(arch+".attention.head_count", 2),
		u32kv(arch+".attention.head_count_kv", 1), f32kv(arch+".attention.layer_norm_rms_epsilon", 1e-5),
		{key: "tokenizer.ggml.tokens", typ: GGUFArray, elem: GGUFString, val: tokens(6)},
		u32kv("general.alignment", 8),
	}
	s.align = 8
	for i := range s.tensors {
		tn := &s.tensors[i]
		tn.typ = 0
		for j, d := range tn.dims {
			tn.dims[j] = map[uint64]uint64{32: 4, 16: 2, 64: 8, 40: 6}[d]
		}
	}
	if arch == "qwen2" {
		for name, n := range map[string]uint64{"q": 4, "k": 2, "v": 2} {
			s.tensors = append(s.tensors, gtensor{name: "blk.0.attn_" + name + ".bias", dims: []uint64{n}, offset: -1})
		}
	}
	return s
}

func TestFuzzSeedsLoad(t *testing.T) {
	for _, arch := range []string{"llama", "qwen2"} {
		c, err := Load(writeSpec(t, microSpec(arch).bytes()))
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
}

// FuzzGGUFHeader feeds arbitrary bytes to the GGUF reader and, when they
// parse, to the configuration and tensor mapping: no input may panic, and
// what parses must only reference bytes inside the input.
func FuzzGGUFHeader(f *testing.F) {
	f.Add(microSpec("llama").bytes())
	f.Add(microSpec("qwen2").bytes())
	f.Add(microSpec("llama").bytes()[:100])
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := ParseGGUF(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v wraps neither ErrCorrupt nor ErrUnsupported", err)
			}
			return
		}
		for i := range g.Tensors {
			ti := &g.Tensors[i]
			if ti.Offset < 0 || ti.Size < 0 || g.DataOffset+ti.Offset+ti.Size > int64(len(b)) {
				t.Fatalf("tensor %q at [%d, %d) of the data section at %d lies outside %d bytes", ti.Name, ti.Offset, ti.Offset+ti.Size, g.DataOffset, len(b))
			}
			_ = g.TensorData(ti)
		}
		cfg, err := ggufConfig(g)
		if err != nil {
			return
		}
		tensors, err := ggufTensors(g, cfg)
		if err != nil {
			return
		}
		if CheckTensors(cfg, tensors) == nil {
			w := NewWeights(&Checkpoint{Config: cfg, Tensors: tensors})
			if w.Size() < 1<<22 {
				if err := w.Bind(make([]byte, w.Size())); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// TestGGUFVocabAllocs: a vocabulary's strings are read into one shared
// allocation, and no string is built per token to name it in errors
// (SmolLM2's 49,152 tokens and 48,900 merges took 200,000 allocations and
// 19 ms to parse, 3,700 and 7-9 ms since; a start parses its GGUF twice).
func TestGGUFVocabAllocs(t *testing.T) {
	b := vocabGGUF(20000)
	g, err := ParseGGUF(b)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := g.Strings("tokenizer.ggml.tokens"); err != nil || len(v) != 20000 || v[27] != "t27" || v[19999] != "t19999" {
		t.Fatalf("tokens read back wrong: %d of them (%v)", len(v), err)
	}
	if n := testing.AllocsPerRun(5, func() { ParseGGUF(b) }); n > 1000 {
		t.Errorf("parsing a 20000-token vocabulary took %.0f allocations, want at most 1000 (one or two a token before)", n)
	}
}

// BenchmarkParseGGUFVocab parses a header with a 50,000-token vocabulary.
func BenchmarkParseGGUFVocab(b *testing.B) {
	buf := vocabGGUF(50000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseGGUF(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// vocabGGUF is tinyLlama's file with a vocabulary of n distinct tokens of
// a few bytes, as a BPE vocabulary's ("t0", "t1", ...).
func vocabGGUF(n int) []byte {
	s := tinyLlama()
	for i := range s.kvs {
		if s.kvs[i].key == "tokenizer.ggml.tokens" {
			s.kvs[i].val = shortTokens(n)
		}
	}
	return s.bytes()
}

// shortTokens are n distinct tokens of a few bytes.
func shortTokens(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "t" + strconv.Itoa(i)
	}
	return out
}
