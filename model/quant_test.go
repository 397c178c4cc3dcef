package model_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
)

// ggufHelper runs model/testdata/gguf_helper.py (the gguf package, no code
// shared with this package) with args.
func ggufHelper(t *testing.T, args ...string) {
	t.Helper()
	script := filepath.Join(testenv.RepoRoot(t), "model", "testdata", "gguf_helper.py")
	testenv.Run(t, testenv.Python(t), append([]string{script}, args...)...)
}

func readF32(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// sameBits compares float32 slices bit for bit; two NaNs count as equal
// (their payloads depend on the hardware conversion).
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range want {
		g, w := got[i], want[i]
		if math.Float32bits(g) == math.Float32bits(w) || (g != g && w != w) {
			continue
		}
		if bad++; bad <= 5 {
			t.Errorf("%s[%d] = %g (%#08x), want %g (%#08x)", what, i, g, math.Float32bits(g), w, math.Float32bits(w))
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d values differ", what, bad, len(want))
	}
}

// TestDequantizeMatchesGGUFPy checks every supported type bit for bit
// against gguf.quants.dequantize on random blocks with extreme scales.
func TestDequantizeMatchesGGUFPy(t *testing.T) {
	dir := t.TempDir()
	ggufHelper(t, "blocks", dir, "--seed", "7")
	for _, dt := range []model.DType{model.DTypeF32, model.DTypeF16, model.DTypeBF16,
		model.DTypeQ8_0, model.DTypeQ4_0, model.DTypeQ4_1, model.DTypeQ4_K, model.DTypeQ6_K} {
		t.Run(string(dt), func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(dir, string(dt)+".raw"))
			if err != nil {
				t.Fatal(err)
			}
			want := readF32(t, filepath.Join(dir, string(dt)+".f32"))
			got, err := model.Dequantize(dt, raw, len(want))
			if err != nil {
				t.Fatal(err)
			}
			sameBits(t, string(dt), got, want)
			finite := 0
			for _, v := range want {
				if !math.IsInf(float64(v), 0) && v == v && v != 0 {
					finite++
				}
			}
			if finite < len(want)/4 {
				t.Errorf("only %d of %d reference values are finite and non-zero: the test data is degenerate", finite, len(want))
			}
		})
	}
}

func TestDequantizeRejectsBadSizes(t *testing.T) {
	for _, tc := range []struct {
		name string
		dt   model.DType
		raw  int
		n    int
	}{
		{"partial block", model.DTypeQ4_0, 18, 16},
		{"short data", model.DTypeQ8_0, 33, 32},
		{"unknown type", model.DType("Q5_K"), 176, 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := model.Dequantize(tc.dt, make([]byte, tc.raw), tc.n); err == nil {
				t.Error("no error")
			}
		})
	}
}

// TestDequantizeRealBlocks reads tensors of the real SmolLM2 file (Q8_0
// embedding, Q4_1 projections, F32 norm) and compares the stored bytes and
// their dequantization with the gguf package, and the llama q/k projections
// of the checkpoint (rows put back in Hugging Face order) with
// reference.py's unpermutation.
func TestDequantizeRealBlocks(t *testing.T) {
	path := testenv.SmolLM2(t)
	dir := t.TempDir()
	names := []string{"token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_norm.weight", "blk.29.ffn_down.weight"}
	const rows = 16
	ggufHelper(t, append([]string{"real", path, dir, "--rows", "16"}, names...)...)
	g, err := model.OpenGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			var ti *model.GGUFTensorInfo
			for i := range g.Tensors {
				if g.Tensors[i].Name == name {
					ti = &g.Tensors[i]
				}
			}
			if ti == nil {
				t.Fatalf("no tensor %s", name)
			}
			raw, err := os.ReadFile(filepath.Join(dir, name+".raw"))
			if err != nil {
				t.Fatal(err)
			}
			if data := g.TensorData(ti); !bytes.Equal(data[:len(raw)], raw) {
				t.Fatalf("stored bytes differ from the gguf package's")
			}
			want := readF32(t, filepath.Join(dir, name+".f32"))
			got, err := model.Dequantize(ti.Type.DType(), raw, len(want))
			if err != nil {
				t.Fatal(err)
			}
			sameBits(t, name+" ("+ti.Type.String()+")", got, want)
			if len(ti.Dims) == 2 && len(want) != rows*int(ti.Dims[0]) {
				t.Errorf("%d values, want %d rows of %d", len(want), rows, ti.Dims[0])
			}
		})
	}
	ck, err := model.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for gname, hf := range map[string]string{
		"blk.0.attn_q.weight": "model.layers.0.self_attn.q_proj.weight",
		"blk.0.attn_k.weight": "model.layers.0.self_attn.k_proj.weight",
	} {
		tn, err := ck.Tensor(hf)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tn.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		sameBits(t, hf, got, readF32(t, filepath.Join(dir, gname+".hf.f32")))
	}
}
