package model

import (
	"encoding/binary"
	"fmt"
	"math"
)

// GGUF block types this package runs. A block holds blockElems consecutive
// elements of one row in blockBytes bytes (ggml's block_q8_0, block_q4_K ...).
const (
	DTypeQ8_0 DType = "Q8_0"
	DTypeQ4_0 DType = "Q4_0"
	DTypeQ4_1 DType = "Q4_1"
	DTypeQ4_K DType = "Q4_K"
	DTypeQ6_K DType = "Q6_K"
)

// IsQuantized reports whether d is a GGUF block type this package runs.
func (d DType) IsQuantized() bool {
	switch d {
	case DTypeQ8_0, DTypeQ4_0, DTypeQ4_1, DTypeQ4_K, DTypeQ6_K:
		return true
	}
	return false
}

// IsWeight reports whether d is a weight type this package runs: a float
// type or a GGUF block type.
func (d DType) IsWeight() bool { return d.IsFloatWeight() || d.IsQuantized() }

// block is the block layout of a weight type: F32, F16 and BF16 are blocks of
// one element.
func (d DType) block() (elems, bytes int) {
	switch d {
	case DTypeF32:
		return 1, 4
	case DTypeF16, DTypeBF16:
		return 1, 2
	case DTypeQ8_0:
		return 32, 34
	case DTypeQ4_0:
		return 32, 18
	case DTypeQ4_1:
		return 32, 20
	case DTypeQ4_K:
		return 256, 144
	case DTypeQ6_K:
		return 256, 210
	}
	return 0, 0
}

// Dequantize decodes n elements of weight type d stored in data into float32,
// computing each value exactly as the reference dequantizer of the gguf
// Python package does (float32 arithmetic in the same order), so results are
// bit-identical.
func Dequantize(d DType, data []byte, n int) ([]float32, error) {
	be, bb := d.block()
	if be == 0 {
		return nil, fmt.Errorf("dequantize: unsupported dtype %s", d)
	}
	if n < 0 || n%be != 0 || len(data) != n/be*bb {
		return nil, fmt.Errorf("dequantize: %d bytes do not hold %d elements of %s", len(data), n, d)
	}
	out := make([]float32, n)
	dequantize(d, data, out)
	return out, nil
}

// dequantize decodes whole blocks; len(out) is a multiple of the block size
// and data holds exactly its blocks.
func dequantize(d DType, data []byte, out []float32) {
	be, bb := d.block()
	for b := range len(out) / be {
		src, dst := data[b*bb:(b+1)*bb], out[b*be:(b+1)*be]
		switch d {
		case DTypeF32:
			dst[0] = math.Float32frombits(binary.LittleEndian.Uint32(src))
		case DTypeF16:
			dst[0] = F16ToFloat32(binary.LittleEndian.Uint16(src))
		case DTypeBF16:
			dst[0] = BF16ToFloat32(binary.LittleEndian.Uint16(src))
		case DTypeQ8_0:
			dequantQ8_0(src, dst)
		case DTypeQ4_0:
			dequantQ4_0(src, dst)
		case DTypeQ4_1:
			dequantQ4_1(src, dst)
		case DTypeQ4_K:
			dequantQ4_K(src, dst)
		case DTypeQ6_K:
			dequantQ6_K(src, dst)
		}
	}
}

func f16At(b []byte) float32 { return F16ToFloat32(binary.LittleEndian.Uint16(b)) }

// Explicit float32 conversions below force rounding after every operation
// (Go may otherwise fuse a multiply and an add on some architectures).

// Q8_0: f16 d, 32 x int8 q; w = q * d.
func dequantQ8_0(b []byte, w []float32) {
	d := f16At(b)
	for j := range 32 {
		w[j] = float32(int8(b[2+j])) * d
	}
}

// q4Nibble is element j (0..31) of a 32-element 4-bit block: the low nibbles
// of the 16 bytes hold elements 0..15, the high nibbles 16..31.
func q4Nibble(qs []byte, j int) uint8 {
	if j < 16 {
		return qs[j] & 0x0f
	}
	return qs[j-16] >> 4
}

// Q4_0: f16 d, 16 bytes of nibbles; w = d * (q - 8).
func dequantQ4_0(b []byte, w []float32) {
	d := f16At(b)
	for j := range 32 {
		w[j] = d * float32(int(q4Nibble(b[2:], j))-8)
	}
}

// Q4_1: f16 d, f16 m, 16 bytes of nibbles; w = d*q + m.
func dequantQ4_1(b []byte, w []float32) {
	d, m := f16At(b), f16At(b[2:])
	for j := range 32 {
		w[j] = float32(d*float32(q4Nibble(b[4:], j))) + m
	}
}

// q4KScaleMin unpacks the 6-bit scale and min of sub-block j (0..7) from the
// 12 packed bytes of a Q4_K block (ggml's get_scale_min_k4).
func q4KScaleMin(s []byte, j int) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0x0f | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}

// q4KNibble is element e (0..255) of a Q4_K block's 128 bytes of nibbles:
// each 64-element chunk c uses bytes 32c..32c+31, low nibbles first.
func q4KNibble(qs []byte, e int) uint8 {
	c, r := e/64, e%64
	if r < 32 {
		return qs[32*c+r] & 0x0f
	}
	return qs[32*c+r-32] >> 4
}

// Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins for eight
// sub-blocks of 32, 128 bytes of nibbles; w = (d*sc)*q - dmin*m.
func dequantQ4_K(b []byte, w []float32) {
	d, dmin := f16At(b), f16At(b[2:])
	for s := range 8 {
		sc, m := q4KScaleMin(b[4:16], s)
		ds, dm := float32(d*float32(sc)), float32(dmin*float32(m))
		for j := range 32 {
			e := 32*s + j
			w[e] = float32(ds*float32(q4KNibble(b[16:], e))) - dm
		}
	}
}

// q6KValue is element e (0..255) of a Q6_K block as stored (0..63): four
// low bits from ql[128] and two high bits from qh[64].
func q6KValue(b []byte, e int) uint8 {
	h, r := e/128, e%128
	ql := b[64*h+r%64] >> (4 * (r / 64)) & 0x0f
	qh := b[128+32*h+r%32] >> (2 * (r / 32)) & 0x03
	return ql | qh<<4
}

// Q6_K: 128 bytes of low bits, 64 of high bits, 16 int8 scales of
// sub-blocks of 16, f16 d; w = (d*scale) * (q - 32).
func dequantQ6_K(b []byte, w []float32) {
	d := f16At(b[208:])
	for s := range 16 {
		ds := float32(d * float32(int8(b[192+s])))
		for j := range 16 {
			e := 16*s + j
			w[e] = ds * float32(int(q6KValue(b, e))-32)
		}
	}
}
