package model

import (
	"encoding/binary"
	"math"
)

// This file repacks GGUF blocks into OpenVINO's weight-compression layout,
// the form NNCF writes and the CPU plugin decompresses inside FullyConnected
// and Gather: a weight plane of small integers grouped [out, in/G, G], a
// scale per group and optionally a zero point, combined in the graph as
//
//	Const(u4|i8) -> Convert(f32) -> [Subtract zero point] -> Multiply scale -> Reshape [out, in]
//
// u4 planes hold two elements per byte, the lower-indexed one in the low
// nibble.
//
// A weight used only as the right-hand side of a matrix product (the
// projections and an untied lm_head) keeps the float minimum of Q4_1 and
// Q4_K blocks as a plane of its own instead (zpMin): w = q*scale + min, and
// the graph computes x @ W^T as x @ (q*scale)^T + groupsums(x) @ min^T
// (see irGraph.weightMin). Both products are exact decodings of the file,
// and the first runs in the CPU plugin's kernel without a zero point, which
// is much faster than the one with a float zero point.

// zeroPoint says how a packing subtracts its zero point.
type zeroPoint int

const (
	zpNone   zeroPoint = iota // w = q * scale
	zpScalar                  // w = (q - value) * scale, one u8 constant for the tensor
	zpPlane                   // w = (q - zp) * scale, one f32 zero point per group
	// zpMin keeps each group's additive minimum, in the scale's element
	// type: w = q * scale + min. The graph adds it as a second, small
	// product over group sums of the input (linear weights only).
	zpMin
	// zpRounded is zpPlane with each zero point rounded to the nearest
	// integer in 0..255 and stored as u8 (WeightsRounded): the CPU plugin
	// decompresses integer zero points in a faster kernel, and the weights
	// are no longer exact (see WeightsRounded).
	zpRounded
)

// packing is the compressed form of one block type.
type packing struct {
	group   int64 // elements per scale (and zero point)
	wt      elem  // weight plane type: u4 or i8
	scale   elem  // f16 when the block scale is an f16 as stored, else f32
	zp      zeroPoint
	zpValue uint8 // for zpScalar
	// kernel is the block type laid out whole for ovrun's kernel
	// (kernel.go): one u8 plane of the file's bytes, no scale or
	// zero-point plane. "" for OpenVINO's compressed form.
	kernel DType
}

const (
	u4 elem = "u4"
	u8 elem = "u8"
	i8 elem = "i8"
)

// packingOf is the compressed form of a GGUF block type. Q8_0, Q4_0 and Q6_K
// are symmetric and their compressed form is exact; Q4_1 and Q4_K add a
// float minimum, which becomes an f32 zero point min/scale, so
// (q - zp) * scale equals q*scale + min to about one float32 ulp of the
// group's largest magnitude (the graph is not bit-identical to the
// dequantized weights there).
func packingOf(d DType) packing {
	switch d {
	case DTypeQ8_0:
		return packing{group: 32, wt: i8, scale: f16}
	case DTypeQ4_0:
		return packing{group: 32, wt: u4, scale: f16, zp: zpScalar, zpValue: 8}
	case DTypeQ4_1:
		return packing{group: 32, wt: u4, scale: f16, zp: zpPlane}
	case DTypeQ4_K:
		return packing{group: 32, wt: u4, scale: f32, zp: zpPlane}
	case DTypeQ6_K:
		return packing{group: 16, wt: i8, scale: f32}
	}
	return packing{}
}

// planeBytes are the sizes of the weight, scale and zero-point planes of a
// [rows, n] tensor.
func (p packing) planeBytes(rows, n int64) (w, scale, zp int64) {
	if p.kernel != "" {
		_, bb := p.kernel.block()
		return rows * n / 32 * int64(bb), 0, 0
	}
	w = rows * n
	if p.wt == u4 {
		w /= 2
	}
	groups := rows * (n / p.group)
	scale = groups * 4
	if p.scale == f16 {
		scale = groups * 2
	}
	switch p.zp {
	case zpPlane:
		zp = groups * 4
	case zpMin:
		zp = scale
	case zpRounded:
		zp = groups
	}
	return w, scale, zp
}

// putZP writes group g's zero point zp, or its minimum for zpMin, into a
// plane of the packing's kind.
func (p packing) putZP(plane []byte, g int, zp, minimum float32) {
	switch {
	case p.zp == zpRounded:
		plane[g] = uint8(max(0, min(255, math.Round(float64(zp)))))
	case p.zp == zpMin && p.scale == f16:
		binary.LittleEndian.PutUint16(plane[2*g:], Float32ToF16(minimum))
	case p.zp == zpMin:
		putF32(plane[4*g:], minimum)
	default:
		putF32(plane[4*g:], zp)
	}
}

// packRow repacks one row of n elements of type d (src holds exactly its
// blocks) into the row's slices of the three planes of packing p
// (packingOf(d), its zero points possibly rounded).
func packRow(d DType, p packing, src []byte, n int, w, scale, zp []byte) {
	be, bb := d.block()
	gpb := be / int(p.group) // groups per block
	for b := range n / be {
		blk := src[b*bb : (b+1)*bb]
		g0 := b * gpb // first group of the block in the row
		switch d {
		case DTypeQ8_0:
			copy(w[b*32:], blk[2:34])
			copy(scale[2*g0:], blk[:2])
		case DTypeQ4_0:
			pack4(w[b*16:], func(j int) uint8 { return q4Nibble(blk[2:], j) }, 32)
			copy(scale[2*g0:], blk[:2])
		case DTypeQ4_1:
			packQ4_1(p, blk, w[b*16:], scale[2*g0:], zp, g0)
		case DTypeQ4_K:
			packQ4_K(p, blk, w[b*128:], scale[4*g0:], zp, g0)
		case DTypeQ6_K:
			d := f16At(blk[208:])
			for e := range 256 {
				w[b*256+e] = byte(int8(int(q6KValue(blk, e)) - 32))
			}
			for s := range 16 {
				putF32(scale[4*(g0+s):], float32(d*float32(int8(blk[192+s]))))
			}
		}
	}
}

// pack4 writes n 4-bit values, two per byte, low nibble first.
func pack4(dst []byte, q func(int) uint8, n int) {
	for k := range n / 2 {
		dst[k] = q(2*k) | q(2*k+1)<<4
	}
}

// packQ4_1 writes w = d*q + m as (q - zp) * d with zp = -m/d, or with m
// as the group's minimum (zpMin), into group g of the zero-point plane. A
// block with d = 0 holds m everywhere: its nibbles become 1, its scale m,
// its zero point or minimum 0 (so both forms read the same weight and scale
// planes).
func packQ4_1(p packing, blk, w, scale, zp []byte, g int) {
	d, m := f16At(blk), f16At(blk[2:])
	if d == 0 {
		pack4(w, func(int) uint8 { return 1 }, 32)
		copy(scale, blk[2:4])
		p.putZP(zp, g, 0, 0)
		return
	}
	pack4(w, func(j int) uint8 { return q4Nibble(blk[4:], j) }, 32)
	copy(scale, blk[:2])
	p.putZP(zp, g, -m/d, m)
}

// packQ4_K writes each sub-block's w = s*q - dm (s = d*sc, dm = dmin*m) as
// (q - dm/s) * s, or with -dm as the group's minimum (zpMin), into groups
// g..g+7; when s = 0 as 1 * (-dm), zero point or minimum 0.
func packQ4_K(p packing, blk, w, scale, zp []byte, g int) {
	d, dmin := f16At(blk), f16At(blk[2:])
	for s := range 8 {
		sc, m := q4KScaleMin(blk[4:16], s)
		ds, dm := float32(d*float32(sc)), float32(dmin*float32(m))
		out := w[16*s : 16*s+16]
		if ds == 0 {
			pack4(out, func(int) uint8 { return 1 }, 32)
			putF32(scale[4*s:], -dm)
			p.putZP(zp, g+s, 0, 0)
			continue
		}
		pack4(out, func(j int) uint8 { return q4KNibble(blk[16:], 32*s+j) }, 32)
		putF32(scale[4*s:], ds)
		p.putZP(zp, g+s, dm/ds, -dm)
	}
}

func putF32(b []byte, v float32) { binary.LittleEndian.PutUint32(b, math.Float32bits(v)) }
