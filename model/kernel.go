package model

import "unsafe"

// This file lays out weights for ovrun's own kernel, the GGUFLinear and
// GGUFGather operations of ov/ext/gguf_linear.cc (WeightsKernel,
// WeightsKernelQ8): Q4_1, Q4_0 and Q8_0 blocks as the file stores them (an
// f16 scale d, for Q4_1 an f16 minimum m, 32 quants; w = d*q + m, Q4_0
// d*(q - 8), Q8_0 d*q; exact), repacked once so that one 32-byte load holds
// 4 elements of 8 rows.
//
// For each run of 8 rows and each block b of their rows, 8 blocks' bytes:
// the 8 rows' scales d (f16), for Q4_1 their 8 minima m (f16), then the
// rows' quants, where byte 32j + 4r + i holds row r's element 4j+i (Q8_0,
// j = 0..7) or, for Q4_1 and Q4_0 (j = 0..3), element 4j+i in its low
// nibble and element 16+4j+i in its high one. A tensor of N rows (N a
// multiple of 8) and K inputs takes as many bytes as in the file.

// kernelRows are the rows the layout interleaves.
const kernelRows = 8

// kernelType is the kernel's name of the layout of block type d ("" when
// the kernel has none).
func kernelType(d DType) string {
	switch d {
	case DTypeQ4_1:
		return "q4_1x8"
	case DTypeQ4_0:
		return "q4_0x8"
	case DTypeQ8_0:
		return "q8_0x8"
	}
	return ""
}

// kernelFits reports whether tensor n of type d and shape can be laid out
// for the kernel: a Q4_1, Q4_0 or Q8_0 matrix with rows in runs of 8 and
// whole blocks, multiplied (linearOnly) or the embedding (gathered by the
// kernel too, and multiplied where the lm_head is tied to it).
func kernelFits(n string, d DType, shape []int64) bool {
	return kernelType(d) != "" && (linearOnly(n) || n == "model.embed_tokens.weight") &&
		len(shape) == 2 && shape[0]%kernelRows == 0 && shape[1]%32 == 0
}

// packRowKernel writes row (of a tensor of type d, src its blocks) into
// dst, the tensor's kernel layout. It runs once per row of every matrix at
// a start (a 0.5B model's 500 MB): the bounds are checked once, and the
// 2- and 4-byte moves are single loads and stores (x86 allows them
// unaligned), four words a step, rather than encoding/binary's
// bounds-checked slices (BenchmarkPackRowKernel on a 2-core Xeon: Q8_0
// 1.4 -> 3.3 GB/s, Q4_1 1.2 -> 2.8 GB/s).
func packRowKernel(d DType, src []byte, row int64, dst []byte) {
	_, bb := d.block()
	nb := int64(len(src) / bb)
	group := int64(kernelRows * bb)
	run, r := row/kernelRows, row%kernelRows
	base := dst[run*nb*group : (run+1)*nb*group] // the run's bytes, checked once
	if nb == 0 {
		return
	}
	// The quants' offset in a block of the file and in a group, and their
	// 4-byte words a block (Q4: 16 bytes of nibbles, Q8_0: 32 quants).
	from, to, words := int64(2), int64(16), int64(8)
	switch d {
	case DTypeQ4_1:
		from, to, words = 4, 32, 4
	case DTypeQ4_0:
		words = 4
	}
	hasMin := d == DTypeQ4_1
	sp, gp := unsafe.Pointer(unsafe.SliceData(src)), unsafe.Pointer(unsafe.SliceData(base))
	for b := range nb {
		blk, g := unsafe.Add(sp, b*int64(bb)), unsafe.Add(gp, b*group)
		*(*uint16)(unsafe.Add(g, 2*r)) = *(*uint16)(blk)
		if hasMin {
			*(*uint16)(unsafe.Add(g, 16+2*r)) = *(*uint16)(unsafe.Add(blk, 2))
		}
		// Bytes 4j..4j+3 of the quants (elements 4j..4j+3; for nibbles
		// also 16+4j..) go to to + 32j + 4r whole.
		q, out := unsafe.Add(blk, from), unsafe.Add(g, to+4*r)
		for j := int64(0); j < words; j += 4 {
			*(*uint32)(unsafe.Add(out, 32*j)) = *(*uint32)(unsafe.Add(q, 4*j))
			*(*uint32)(unsafe.Add(out, 32*j+32)) = *(*uint32)(unsafe.Add(q, 4*j+4))
			*(*uint32)(unsafe.Add(out, 32*j+64)) = *(*uint32)(unsafe.Add(q, 4*j+8))
			*(*uint32)(unsafe.Add(out, 32*j+96)) = *(*uint32)(unsafe.Add(q, 4*j+12))
		}
	}
}

// KernelOnly reports whether ovrun's kernel reads every matrix of the blob
// (WeightsKernel, and every matrix of a type the kernel lays out): the
// plugin then lays out no weights of its own, and the blob's pages are the
// only copy of the model.
func (w *Weights) KernelOnly() bool {
	for _, s := range w.slots {
		if len(s.shape) == 2 && s.pack.kernel == "" {
			return false
		}
	}
	return w.format.Kernel()
}
