package model

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// stWriteFile writes a safetensors file from a literal header and data.
func stWriteFile(t *testing.T, header string, data []byte) string {
	t.Helper()
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(append(b, header...), data...)
	return stWriteRaw(t, b)
}

func stWriteRaw(t *testing.T, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDTypeSize(t *testing.T) {
	for _, tc := range []struct {
		name DType
		want int
	}{
		{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
		{"I8", 1}, {"U8", 1}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
		{"f32", 0}, {"U64X", 0}, {"", 0},
	} {
		t.Run(string(tc.name), func(t *testing.T) {
			if got := tc.name.Size(); got != tc.want {
				t.Errorf("Size() = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestOpenSafetensorsValues reads a hand-written file (independent of the
// writer in this package) and checks every decoded value.
func TestOpenSafetensorsValues(t *testing.T) {
	header := `{"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]},` +
		`"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"h":{"dtype":"F16","shape":[1,2],"data_offsets":[14,18]},` +
		`"e":{"dtype":"I8","shape":[0,5],"data_offsets":[18,18]},"s":{"dtype":"U8","shape":[],"data_offsets":[18,19]}}  `
	data := []byte{
		0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0, // F32 1, -2
		0x80, 0x3f, 0x49, 0x40, 0x80, 0xff, // BF16 1, 3.140625, -Inf
		0x00, 0x3c, 0x01, 0x00, // F16 1, 2^-24
		0x07, // U8 scalar
	}
	sf, err := OpenSafetensors(stWriteFile(t, header, data))
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	if got := sf.Metadata["format"]; got != "pt" {
		t.Errorf("metadata format = %q", got)
	}
	if got, want := sf.Names(), []string{"a", "b", "e", "h", "s"}; !slices.Equal(got, want) {
		t.Errorf("names %v, want %v", got, want)
	}
	for _, tc := range []struct {
		name  string
		shape []int64
		want  []float32
	}{
		{"a", []int64{2}, []float32{1, -2}},
		{"b", []int64{3}, []float32{1, 3.140625, float32(math.Inf(-1))}},
		{"h", []int64{1, 2}, []float32{1, 1.0 / (1 << 24)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := sf.Tensors[tc.name]
			if !slices.Equal(tn.Shape, tc.shape) {
				t.Errorf("shape %v, want %v", tn.Shape, tc.shape)
			}
			got, err := tn.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("values %v, want %v", got, tc.want)
			}
		})
	}
	if s := sf.Tensors["s"]; len(s.Shape) != 0 || !bytes.Equal(s.Data, []byte{7}) {
		t.Errorf("scalar: shape %v data %v", s.Shape, s.Data)
	}
	if e := sf.Tensors["e"]; len(e.Data) != 0 {
		t.Errorf("empty tensor has %d bytes", len(e.Data))
	}
	if _, err := sf.Tensors["s"].Float32s(); err == nil {
		t.Error("Float32s of a U8 tensor succeeded")
	}
	if err := sf.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestOpenSafetensorsEmptyData(t *testing.T) {
	for _, tc := range []struct {
		name, header string
		tensors      int
	}{
		{"no tensors", `{}`, 0},
		{"metadata only", `{"__metadata__":{"k":"v"}}`, 0},
		{"zero-size tensor", `{"z":{"dtype":"F32","shape":[4,0],"data_offsets":[0,0]}}`, 1},
		{"whitespace and padding", "{ \"z\" :\n\t{ \"dtype\" : \"F32\", \"shape\" : [ 0 ] , \"data_offsets\" : [ 0 , 0 ] } }   ", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sf, err := OpenSafetensors(stWriteFile(t, tc.header, nil))
			if err != nil {
				t.Fatal(err)
			}
			if len(sf.Tensors) != tc.tensors {
				t.Errorf("%d tensors, want %d", len(sf.Tensors), tc.tensors)
			}
			if err := sf.Close(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestOpenSafetensorsErrors(t *testing.T) {
	f32x2 := `{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	for _, tc := range []struct {
		name string
		raw  []byte // whole file, when set
		hdr  string
		data []byte
		want string
	}{
		{name: "empty file", raw: []byte{}, want: "file is 0 bytes, too short"},
		{name: "truncated length", raw: []byte{1, 2, 3}, want: "file is 3 bytes, too short"},
		{name: "truncated file", raw: append(binary.LittleEndian.AppendUint64(nil, 64), `{"w":`...), want: "header length 64 exceeds file size 13"},
		{name: "absurd header length", raw: binary.LittleEndian.AppendUint64(nil, 1<<62), want: "header length 4611686018427387904 exceeds limit 100000000"},
		{name: "header not JSON", hdr: `{"w":{"dtype":"F32",`, want: "header is not JSON"},
		{name: "header not an object", hdr: `[1,2]`, want: "header does not start with '{'"},
		{name: "header not UTF-8", hdr: "{\"\xff\":1}", want: "not valid UTF-8"},
		{name: "data after JSON", hdr: `{} {}`, want: "data after the JSON object"},
		{name: "duplicate tensor", hdr: `{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`,
			data: []byte{1}, want: `tensor "w" appears twice`},
		{name: "metadata not strings", hdr: `{"__metadata__":{"k":1}}`, want: "__metadata__ is not a map of strings to strings"},
		{name: "overlapping offsets", hdr: `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`,
			data: make([]byte, 8), want: `tensor "b": data_offsets [4 8] overlap the previous tensor, which ends at 8`},
		{name: "gap between tensors", hdr: `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`,
			data: make([]byte, 12), want: `tensor "b": gap of 4 bytes before data_offsets [8 12]`},
		{name: "gap at start", hdr: `{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`,
			data: make([]byte, 8), want: `tensor "a": gap of 4 bytes`},
		{name: "offsets not shape times dtype", hdr: `{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,8]}}`,
			data: make([]byte, 8), want: `tensor "w": data_offsets [0 8] span 8 bytes, want 16 for shape [2 2] of F32`},
		{name: "trailing bytes", hdr: f32x2, data: make([]byte, 9), want: `1 trailing bytes after the last tensor "w", which ends at 8 of the 9-byte data section`},
		{name: "data section too short", hdr: f32x2, data: make([]byte, 6), want: `tensor "w" ends at 8, past the 6-byte data section`},
		{name: "unknown dtype", hdr: `{"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}`,
			data: make([]byte, 16), want: `tensor "w": unknown dtype "F128"`},
		{name: "missing dtype", hdr: `{"w":{"shape":[1],"data_offsets":[0,4]}}`, data: make([]byte, 4), want: `tensor "w": no dtype`},
		{name: "missing shape", hdr: `{"w":{"dtype":"F32","data_offsets":[0,4]}}`, data: make([]byte, 4), want: `tensor "w": no shape`},
		{name: "bad offsets arity", hdr: `{"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}}`, data: make([]byte, 4), want: `tensor "w": data_offsets must be [begin, end]`},
		{name: "end before begin", hdr: `{"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}`, data: make([]byte, 4), want: `data_offsets [4 0] are not 0 <= begin <= end`},
		{name: "negative dimension", hdr: `{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, data: make([]byte, 4), want: `tensor "w": negative dimension`},
		{name: "shape overflow", hdr: `{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, data: make([]byte, 4), want: `tensor "w": shape [4294967296 4294967296] of F32 overflows`},
		{name: "entry not an object", hdr: `{"w":3}`, want: `tensor "w": header entry is not a JSON object`},
		{name: "bad shape element", hdr: "{\"w\":{\"dtype\":\"F32\",\"shape\":[\n\"2\"],\"data_offsets\":[0,8]}}", data: make([]byte, 8), want: `tensor "w": bad shape ["2"]`},
		{name: "key case differs", hdr: `{"w":{"dtype":"F32","Shape":[2],"data_offsets":[0,8]}}`, data: make([]byte, 8), want: `tensor "w": no shape`},
		{name: "whitespace entry not an object", hdr: "{\"w\":  \n 3}", want: `tensor "w": header entry is not a JSON object`},
		{name: "data without tensors", hdr: `{}`, data: make([]byte, 3), want: "no tensors, but the data section is 3 bytes"},
		{name: "duplicate key inside an entry", hdr: `{"w":{"dtype":"F32","shape":[2],"dtype":"F16","data_offsets":[0,8]}}`,
			data: make([]byte, 8), want: `tensor "w": bad header entry: key "dtype" appears twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var path string
			if tc.raw != nil {
				path = stWriteRaw(t, tc.raw)
			} else {
				path = stWriteFile(t, tc.hdr, tc.data)
			}
			sf, err := OpenSafetensors(path)
			if err == nil {
				sf.Close()
				t.Fatal("OpenSafetensors succeeded")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("error %q does not wrap ErrCorrupt", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) || !strings.Contains(msg, path) || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line naming %s and containing %q", msg, path, tc.want)
			}
		})
	}
}

func TestOpenSafetensorsMissingFile(t *testing.T) {
	_, err := OpenSafetensors(filepath.Join(t.TempDir(), "nope.safetensors"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %v, want os.ErrNotExist", err)
	}
}

func TestHalfRoundTripExhaustive(t *testing.T) {
	for h := range 1 << 16 {
		h := uint16(h)
		if f := F16ToFloat32(h); f == f { // skip NaNs: payloads may be canonicalised
			if got := Float32ToF16(f); got != h {
				t.Fatalf("f16 %#04x -> %g -> %#04x", h, f, got)
			}
		}
		if f := BF16ToFloat32(h); f == f {
			if got := Float32ToBF16(f); got != h {
				t.Fatalf("bf16 %#04x -> %g -> %#04x", h, f, got)
			}
		}
	}
}

// TestHalfRounding checks round-to-nearest-even against an independent
// float64 search over the neighbouring representable values.
func TestHalfRounding(t *testing.T) {
	nearest := func(f float32, decode func(uint16) float32, got uint16) bool {
		x := float64(f)
		g := float64(decode(got))
		if math.IsInf(g, 0) {
			return true // checked separately below
		}
		for _, n := range []uint16{got - 1, got + 1} {
			v := float64(decode(n))
			if v != v || math.Signbit(v) != math.Signbit(g) && v != 0 {
				continue
			}
			dg, dn := math.Abs(x-g), math.Abs(x-v)
			if dn < dg || dn == dg && got&1 == 1 {
				return false
			}
		}
		return true
	}
	r := rand.New(rand.NewPCG(1, 2))
	cases := []float32{0, 1, -1, 65504, 65519.99, 1.0 / (1 << 25), 3.0 / (1 << 26), 1.0 / (1 << 14), 1 + 1.0/(1<<11), 1 + 3.0/(1<<11), 1 + 1.0/(1<<8), 1 + 3.0/(1<<8)}
	// Every midpoint between neighbouring finite values, both signs: the ties.
	for _, dec := range []func(uint16) float32{F16ToFloat32, BF16ToFloat32} {
		for h := range uint16(0x7f80) {
			lo, hi := float64(dec(h)), float64(dec(h+1))
			if !math.IsInf(hi, 0) && hi == hi {
				cases = append(cases, float32((lo+hi)/2), -float32((lo+hi)/2))
			}
		}
	}
	for range 200000 {
		cases = append(cases, math.Float32frombits(r.Uint32()&^0x40000000)) // |x| < 2
		cases = append(cases, float32(r.NormFloat64()*math.Exp2(float64(r.IntN(60)-40))))
	}
	for _, f := range cases {
		if f != f {
			continue
		}
		if h := Float32ToF16(f); !nearest(f, F16ToFloat32, h) {
			t.Fatalf("Float32ToF16(%g) = %#04x (%g) is not the nearest-even", f, h, F16ToFloat32(h))
		}
		if h := Float32ToBF16(f); !nearest(f, BF16ToFloat32, h) {
			t.Fatalf("Float32ToBF16(%g) = %#04x (%g) is not the nearest-even", f, h, BF16ToFloat32(h))
		}
	}
	for _, tc := range []struct {
		name string
		got  uint16
		want uint16
	}{
		{"f16 max", Float32ToF16(65504), 0x7bff},
		{"f16 overflow tie to inf", Float32ToF16(65520), 0x7c00},
		{"f16 below tie stays finite", Float32ToF16(65519), 0x7bff},
		{"f16 half min subnormal ties to zero", Float32ToF16(1.0 / (1 << 25)), 0x0000},
		{"f16 above half min subnormal", Float32ToF16(1.5 / (1 << 25)), 0x0001},
		{"f16 subnormal tie to even up", Float32ToF16(3.0 / (1 << 25)), 0x0002},
		{"f16 subnormal tie to even down", Float32ToF16(5.0 / (1 << 25)), 0x0002},
		{"f16 negative zero", Float32ToF16(float32(math.Copysign(0, -1))), 0x8000},
		{"f16 inf", Float32ToF16(float32(math.Inf(-1))), 0xfc00},
		{"f16 nan", Float32ToF16(float32(math.NaN())) & 0x7e00, 0x7e00},
		{"bf16 tie to even down", Float32ToBF16(math.Float32frombits(0x3f808000)), 0x3f80},
		{"bf16 tie to even up", Float32ToBF16(math.Float32frombits(0x3f818000)), 0x3f82},
		{"bf16 overflow", Float32ToBF16(math.MaxFloat32), 0x7f80},
		{"bf16 nan stays nan", Float32ToBF16(math.Float32frombits(0x7f800001)) & 0x7fc0, 0x7fc0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %#04x, want %#04x", tc.got, tc.want)
			}
		})
	}
}

func FuzzParseSafetensorsHeader(f *testing.F) {
	f.Add([]byte(`{}`), int64(0))
	f.Add([]byte(`{"__metadata__":{"format":"pt"}}`), int64(0))
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[1,3],"data_offsets":[8,14]}}`), int64(14))
	f.Add([]byte(`{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"F16","shape":[2],"data_offsets":[2,6]}}`), int64(6))
	f.Add([]byte(`{"z":{"dtype":"BOOL","shape":[0],"data_offsets":[0,0]},"s":{"dtype":"I64","shape":[],"data_offsets":[0,8]}}    `), int64(8))
	f.Add([]byte(`{"w":{"dtype":"F8_E4M3","shape":[9223372036854775807,2],"data_offsets":[0,1]}}`), int64(1))
	f.Add([]byte(`{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`), int64(4))
	f.Add([]byte("{\"\xff\":1}"), int64(0))
	f.Fuzz(func(t *testing.T, header []byte, dataLen int64) {
		infos, meta, err := ParseSafetensorsHeader(header, dataLen)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q: want one line wrapping ErrCorrupt", err)
			}
			return
		}
		if meta == nil {
			t.Fatal("nil metadata on success")
		}
		type span struct {
			name       string
			begin, end int64
		}
		var spans []span
		for name, in := range infos {
			if in.DType.Size() == 0 {
				t.Fatalf("%q: unknown dtype %q accepted", name, in.DType)
			}
			n := stProduct{v: 1}
			for _, d := range in.Shape {
				if d < 0 {
					t.Fatalf("%q: negative dim accepted", name)
				}
				n = n.mul(d)
			}
			n = n.mul(int64(in.DType.Size()))
			if n.overflow || n.v != in.End-in.Begin || in.Begin < 0 || in.End > dataLen {
				t.Fatalf("%q: %+v does not fit its shape or the %d-byte section", name, in, dataLen)
			}
			spans = append(spans, span{name, in.Begin, in.End})
		}
		slices.SortFunc(spans, func(a, b span) int {
			return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(a.end, b.end))
		})
		var pos int64
		for _, s := range spans {
			if s.begin != pos {
				t.Fatalf("%q starts at %d, want %d", s.name, s.begin, pos)
			}
			pos = s.end
		}
		if pos != dataLen {
			t.Fatalf("tensors cover %d of %d bytes", pos, dataLen)
		}
	})
}

// stProduct is an int64 product that remembers overflow, for the fuzz check.
type stProduct struct {
	v        int64
	overflow bool
}

func (p stProduct) mul(d int64) stProduct {
	if p.overflow || d != 0 && p.v > math.MaxInt64/d {
		return stProduct{overflow: true}
	}
	return stProduct{v: p.v * d}
}

// FuzzOpenSafetensors feeds whole files to OpenSafetensors: every file is
// refused with one line wrapping ErrCorrupt, or opened with every tensor's
// data inside the file.
func FuzzOpenSafetensors(f *testing.F) {
	file := func(header string, data int) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
		return append(append(b, header...), make([]byte, data)...)
	}
	f.Add(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 8))
	f.Add(file(`{"a":{"dtype":"BF16","shape":[1,3],"data_offsets":[0,6]},"__metadata__":{"format":"pt"}}`, 6))
	f.Add(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"dtype":"F16"}}`, 8))
	f.Add(binary.LittleEndian.AppendUint64(nil, 1<<40))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), SafetensorsName)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		sf, err := OpenSafetensors(path)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q: want one line wrapping ErrCorrupt", err)
			}
			return
		}
		var total int
		for _, name := range sf.Names() {
			tn := sf.Tensors[name]
			if int64(len(tn.Data)) != tn.NumElements()*int64(tn.DType.Size()) {
				t.Fatalf("%q: %d bytes for %v of %s", name, len(tn.Data), tn.Shape, tn.DType)
			}
			total += len(tn.Data)
		}
		if total > len(b) {
			t.Fatalf("tensors hold %d bytes of a %d-byte file", total, len(b))
		}
		if err := sf.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
