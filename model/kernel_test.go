package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// unpackKernel decodes a tensor of type d, rows x n, in the kernel layout
// the way ov/ext/gguf_linear.cc reads it: 8 rows' scales, (minima,) quants
// per block, w = d*q (+ m).
func unpackKernel(d DType, layout []byte, rows, n int) []float32 {
	_, bb := d.block()
	out := make([]float32, rows*n)
	nb := n / 32
	for row := range rows {
		run, r := row/kernelRows, row%kernelRows
		for b := range nb {
			g := layout[(run*nb+b)*kernelRows*bb:]
			scale := f16At(g[2*r:])
			for e := range 32 {
				if d == DTypeQ8_0 {
					out[row*n+b*32+e] = scale * float32(int8(g[16+32*(e/4)+4*r+e%4]))
					continue
				}
				quants := 32 // Q4_1: after the scales and minima
				if d == DTypeQ4_0 {
					quants = 16
				}
				q := g[quants+32*((e%16)/4)+4*r+e%4]
				if e >= 16 {
					q >>= 4
				}
				if d == DTypeQ4_0 {
					out[row*n+b*32+e] = scale * float32(int(q&0x0F)-8)
					continue
				}
				out[row*n+b*32+e] = scale*float32(q&0x0F) + f16At(g[16+2*r:])
			}
		}
	}
	return out
}

// TestKernelLayoutMatchesDequantize packs random Q4_1, Q4_0 and Q8_0 tensors
// (extreme scales and minima among them) for the kernel row by row, in an
// order that is not the rows', and checks every element against the
// file's decoding.
func TestKernelLayoutMatchesDequantize(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, d := range []DType{DTypeQ4_1, DTypeQ4_0, DTypeQ8_0} {
		for _, shape := range [][2]int{{8, 32}, {16, 96}, {24, 576}} {
			rows, n := shape[0], shape[1]
			src := randomBlocks(d, rows*n/32, rng)
			rowBytes := len(src) / rows
			p := packing{group: 32, wt: u8, kernel: d}
			size, sc, zp := p.planeBytes(int64(rows), int64(n))
			if size != int64(len(src)) || sc != 0 || zp != 0 {
				t.Fatalf("%s %v: planes %d, %d, %d bytes; want %d (the file's), 0, 0", d, shape, size, sc, zp, len(src))
			}
			layout := make([]byte, size)
			for _, row := range rng.Perm(rows) {
				packRowKernel(d, src[row*rowBytes:(row+1)*rowBytes], int64(row), layout)
			}
			got := unpackKernel(d, layout, rows, n)
			want, err := Dequantize(d, src, rows*n)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if got[i] != want[i] && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i]))) {
					t.Fatalf("%s %v: element %d (row %d, column %d) = %g, want %g", d, shape, i, i/n, i%n, got[i], want[i])
				}
			}
		}
	}
}

// TestKernelFits lays out for the kernel only what it can read: Q4_1, Q4_0
// and Q8_0 projections and embeddings with rows in runs of 8.
func TestKernelFits(t *testing.T) {
	for _, c := range []struct {
		name  string
		d     DType
		shape []int64
		want  bool
	}{
		{"model.layers.0.mlp.up_proj.weight", DTypeQ4_1, []int64{1536, 576}, true},
		{"lm_head.weight", DTypeQ4_1, []int64{49152, 576}, true},
		{"model.embed_tokens.weight", DTypeQ8_0, []int64{49152, 576}, true},
		{"model.layers.0.input_layernorm.weight", DTypeQ8_0, []int64{576, 32}, false},
		{"model.layers.0.mlp.up_proj.weight", DTypeQ4_0, []int64{1536, 576}, true},
		{"model.layers.0.mlp.up_proj.weight", DTypeQ4_K, []int64{1536, 576}, false},
		{"model.layers.0.mlp.up_proj.weight", DTypeQ4_1, []int64{1540, 576}, false},
		{"model.layers.0.mlp.up_proj.weight", DTypeQ4_1, []int64{1536}, false},
	} {
		if got := kernelFits(c.name, c.d, c.shape); got != c.want {
			t.Errorf("kernelFits(%s, %s, %v) = %v, want %v", c.name, c.d, c.shape, got, c.want)
		}
	}
}

// TestKernelOnly says the blob is the only copy of the model only where
// the kernel reads every matrix.
func TestKernelOnly(t *testing.T) {
	w := &Weights{format: WeightsKernel, slots: map[string]*slot{
		"model.embed_tokens.weight":         {shape: []int64{64, 32}, pack: packing{kernel: DTypeQ8_0}},
		"model.layers.0.mlp.up_proj.weight": {shape: []int64{64, 32}, pack: packing{kernel: DTypeQ4_1}},
		"model.norm.weight":                 {shape: []int64{32}},
	}}
	if !w.KernelOnly() {
		t.Error("KernelOnly() = false with every matrix laid out for the kernel")
	}
	w.slots["model.layers.0.mlp.down_proj.weight"] = &slot{shape: []int64{32, 64}, pack: packingOf(DTypeQ4_K)}
	if w.KernelOnly() {
		t.Error("KernelOnly() = true with a Q4_K matrix the plugin lays out")
	}
	delete(w.slots, "model.layers.0.mlp.down_proj.weight")
	w.format = WeightsNative
	if w.KernelOnly() {
		t.Error("KernelOnly() = true for native weights")
	}
}

// BenchmarkPackRowKernel lays out a Q8_0 and a Q4_1 matrix of a 0.5B
// model's MLP (4864 x 896) for the kernel, row by row as a start does.
func BenchmarkPackRowKernel(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, d := range []DType{DTypeQ8_0, DTypeQ4_1} {
		const rows, n = 4864, 896
		src := randomBlocks(d, rows*n/32, rng)
		rowBytes := len(src) / rows
		layout := make([]byte, len(src))
		b.Run(string(d), func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				for row := range rows {
					packRowKernel(d, src[row*rowBytes:(row+1)*rowBytes], int64(row), layout)
				}
			}
		})
	}
}

// TestKernelStepTokens: the kernel decode graph's token axis is 8 for
// SmolLM2 135M's weights (about 140 MB a step, where 16 costs its decode
// 10%) and 16 for the 0.5B class (526 MB at Q8_0, where it costs nothing
// and a 16-token prompt is one call).
func TestKernelStepTokens(t *testing.T) {
	for _, tc := range []struct {
		stepBytes int64
		want      int
	}{{0, 8}, {140e6, 8}, {kernelWideBytes - 1, 8}, {kernelWideBytes, 16}, {526e6, 16}, {8e9, 16}} {
		if got := KernelStepTokens(tc.stepBytes); got != tc.want {
			t.Errorf("KernelStepTokens(%d) = %d, want %d", tc.stepBytes, got, tc.want)
		}
	}
}
