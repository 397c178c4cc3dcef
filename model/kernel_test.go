package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// unpackKernel decodes a tensor of rows x n in the kernel layout the way
// ov/ext/gguf_linear.cc reads it: 8 rows' scales, minima and nibbles per
// block, w = d*q + m.
func unpackKernel(layout []byte, rows, n int) []float32 {
	out := make([]float32, rows*n)
	nb := n / 32
	for row := range rows {
		run, r := row/kernelRows, row%kernelRows
		for b := range nb {
			g := layout[(run*nb+b)*kernelGroupBytes:]
			d, m := f16At(g[2*r:]), f16At(g[16+2*r:])
			for e := range 32 {
				j, i := (e%16)/4, e%4
				q := g[32+32*j+4*r+i]
				if e >= 16 {
					q >>= 4
				}
				out[row*n+b*32+e] = d*float32(q&0x0F) + m
			}
		}
	}
	return out
}

// TestKernelLayoutMatchesDequantize packs random Q4_1 tensors (extreme
// scales and minima among them) for the kernel row by row, in an order that
// is not the rows', and checks every element against the file's decoding.
func TestKernelLayoutMatchesDequantize(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, shape := range [][2]int{{8, 32}, {16, 96}, {24, 576}} {
		rows, n := shape[0], shape[1]
		src := randomBlocks(DTypeQ4_1, rows*n/32, rng)
		rowBytes := n / 32 * 20
		p := packing{group: 32, wt: u8, kernel: true}
		size, sc, zp := p.planeBytes(int64(rows), int64(n))
		if size != int64(len(src)) || sc != 0 || zp != 0 {
			t.Fatalf("%v: planes %d, %d, %d bytes; want %d (the file's), 0, 0", shape, size, sc, zp, len(src))
		}
		layout := make([]byte, size)
		for _, row := range rng.Perm(rows) {
			packRowKernel(src[row*rowBytes:(row+1)*rowBytes], int64(row), layout)
		}
		got := unpackKernel(layout, rows, n)
		want, err := Dequantize(DTypeQ4_1, src, rows*n)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got[i] != want[i] && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i]))) {
				t.Fatalf("%v: element %d (row %d, column %d) = %g, want %g", shape, i, i/n, i%n, got[i], want[i])
			}
		}
	}
}

// TestKernelFits lays out for the kernel only what it can multiply: Q4_1
// projections with rows in runs of 8, never a gathered embedding.
func TestKernelFits(t *testing.T) {
	for _, c := range []struct {
		name  string
		d     DType
		shape []int64
		want  bool
	}{
		{"model.layers.0.mlp.up_proj.weight", DTypeQ4_1, []int64{1536, 576}, true},
		{"lm_head.weight", DTypeQ4_1, []int64{49152, 576}, true},
		{"model.embed_tokens.weight", DTypeQ4_1, []int64{49152, 576}, false},
		{"model.layers.0.mlp.up_proj.weight", DTypeQ4_0, []int64{1536, 576}, false},
		{"model.layers.0.mlp.up_proj.weight", DTypeQ4_1, []int64{1540, 576}, false},
		{"model.layers.0.mlp.up_proj.weight", DTypeQ4_1, []int64{1536}, false},
	} {
		if got := kernelFits(c.name, c.d, c.shape); got != c.want {
			t.Errorf("kernelFits(%s, %s, %v) = %v, want %v", c.name, c.d, c.shape, got, c.want)
		}
	}
}
