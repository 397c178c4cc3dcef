package model

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// randomBlocks makes n blocks of type d from random bytes with block scales
// drawn from ordinary and extreme finite f16 values.
func randomBlocks(d DType, n int, rng *rand.Rand) []byte {
	_, bb := d.block()
	raw := make([]byte, n*bb)
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	extreme := []uint16{0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3c00}
	scales := map[DType][]int{DTypeQ8_0: {0}, DTypeQ4_0: {0}, DTypeQ4_1: {0, 2}, DTypeQ4_K: {0, 2}, DTypeQ6_K: {208}}[d]
	for b := range n {
		for _, off := range scales {
			v := Float32ToF16(float32(rng.NormFloat64() * 0.05))
			if rng.IntN(3) == 0 {
				v = extreme[rng.IntN(len(extreme))]
			}
			binary.LittleEndian.PutUint16(raw[b*bb+off:], v)
		}
	}
	return raw
}

// unpack decodes the compressed planes the way the graph does:
// (q - zp) * scale in float32.
func unpack(p packing, n int, w, scale, zp []byte) []float32 {
	out := make([]float32, n)
	for e := range out {
		var q float32
		switch p.wt {
		case u4:
			q = float32(w[e/2] >> (4 * (e % 2)) & 0x0f)
		case i8:
			q = float32(int8(w[e]))
		}
		g := e / int(p.group)
		var s float32
		if p.scale == f16 {
			s = F16ToFloat32(binary.LittleEndian.Uint16(scale[2*g:]))
		} else {
			s = math.Float32frombits(binary.LittleEndian.Uint32(scale[4*g:]))
		}
		switch p.zp {
		case zpScalar:
			q -= float32(p.zpValue)
		case zpPlane:
			q -= math.Float32frombits(binary.LittleEndian.Uint32(zp[4*g:]))
		}
		out[e] = q * s
	}
	return out
}

// TestPackMatchesDequantize repacks random blocks of every block type into
// OpenVINO's compressed planes and decodes them as the graph does: exact for
// the symmetric types, within 2 float32 ulps of the group's largest
// magnitude for Q4_1 and Q4_K, whose minimum becomes a float zero point.
func TestPackMatchesDequantize(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, d := range []DType{DTypeQ8_0, DTypeQ4_0, DTypeQ4_1, DTypeQ4_K, DTypeQ6_K} {
		t.Run(string(d), func(t *testing.T) {
			be, _ := d.block()
			const rows = 8
			n := 2 * be // two blocks per row
			raw := randomBlocks(d, rows*2, rng)
			p := packingOf(d)
			wb, sb, zb := p.planeBytes(rows, int64(n))
			w, sc, zp := make([]byte, wb), make([]byte, sb), make([]byte, zb)
			wr, sr, zr := p.planeBytes(1, int64(n))
			src := len(raw) / rows
			for r := range rows {
				packRow(d, raw[r*src:(r+1)*src], n, w[int64(r)*wr:int64(r+1)*wr], sc[int64(r)*sr:int64(r+1)*sr], zp[int64(r)*zr:int64(r+1)*zr])
			}
			got := unpack(p, rows*n, w, sc, zp)
			want, err := Dequantize(d, raw, rows*n)
			if err != nil {
				t.Fatal(err)
			}
			exact := p.zp != zpPlane
			bad, checked := 0, 0
			for g := 0; g < len(want); g += int(p.group) {
				peak, finite := float32(0), true
				for _, v := range want[g : g+int(p.group)] {
					finite = finite && !math.IsInf(float64(v), 0) && v == v
					peak = max(peak, float32(math.Abs(float64(v))))
				}
				if !finite {
					continue
				}
				checked++
				tol := 2 * peak * 0x1p-23
				if d == DTypeQ4_1 || d == DTypeQ4_K { // the minimum itself may exceed every value
					tol = 4 * max(peak, 1e-30) * 0x1p-23
				}
				for e := g; e < g+int(p.group); e++ {
					diff := math.Abs(float64(got[e] - want[e]))
					if (exact && math.Float32bits(got[e]) != math.Float32bits(want[e]) && got[e] != want[e]) || (!exact && diff > float64(tol)) {
						if bad++; bad <= 5 {
							t.Errorf("element %d: packed gives %g, dequantized %g (group peak %g)", e, got[e], want[e], peak)
						}
					}
				}
			}
			if checked < len(want)/int(p.group)/2 {
				t.Errorf("only %d groups finite: the test data is degenerate", checked)
			}
		})
	}
}
