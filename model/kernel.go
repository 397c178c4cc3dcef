package model

// This file lays out weights for ovrun's own matrix-vector kernel, the
// GGUFLinear operation of ov/ext/gguf_linear.cc (WeightsKernel,
// WeightsKernelQ8): Q4_1 blocks as the file stores them (an f16 scale d, an
// f16 minimum m, 32 nibbles; w = d*q + m, exact), repacked once so that one
// 32-byte load holds 4 elements of 8 rows.
//
// For each run of 8 rows and each block b of their rows, 160 bytes: the 8
// rows' scales d (f16), their 8 minima m (f16), then 128 bytes of nibbles
// where byte 32j + 4r + i (j, i = 0..3) holds row r's element 4j+i in its
// low nibble and its element 16+4j+i in its high one. A tensor of N rows
// (N a multiple of 8) and K inputs takes N*K/32*20 bytes, as the file.

// kernelRows are the rows the layout interleaves.
const kernelRows = 8

// kernelGroupBytes are the bytes of one block of kernelRows rows.
const kernelGroupBytes = kernelRows * 20

// kernelFits reports whether tensor n of type d and shape can be laid out
// for the kernel: a Q4_1 matrix only ever multiplied (linearOnly) with
// rows in runs of 8 and whole blocks.
func kernelFits(n string, d DType, shape []int64) bool {
	return d == DTypeQ4_1 && linearOnly(n) && len(shape) == 2 && shape[0]%kernelRows == 0 && shape[1]%32 == 0
}

// packRowKernel writes row (of the tensor, src its Q4_1 blocks) into dst,
// the tensor's kernel layout.
func packRowKernel(src []byte, row int64, dst []byte) {
	nb := int64(len(src)) / 20
	run, r := row/kernelRows, row%kernelRows
	base := dst[run*nb*kernelGroupBytes:]
	for b := range nb {
		blk := src[b*20 : (b+1)*20]
		g := base[b*kernelGroupBytes : (b+1)*kernelGroupBytes]
		copy(g[2*r:], blk[0:2])
		copy(g[16+2*r:], blk[2:4])
		// blk[4+e] holds element e (low nibble) and e+16 (high): the byte
		// of element e = 4j+i sits at 32 + 32j + 4r + i, whole.
		for e := range int64(16) {
			g[32+32*(e/4)+4*r+e%4] = blk[4+e]
		}
	}
}
