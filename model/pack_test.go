package model

import (
	"encoding/binary"
	"fmt"
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
// (q - zp) * scale in float32, or q * scale + min with a minimum plane.
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
		s := planeAt(p.scale, scale, g)
		if p.zp == zpMin {
			out[e] = q*s + planeAt(p.scale, zp, g)
			continue
		}
		switch p.zp {
		case zpScalar:
			q -= float32(p.zpValue)
		case zpPlane:
			q -= math.Float32frombits(binary.LittleEndian.Uint32(zp[4*g:]))
		case zpRounded:
			q -= float32(zp[g])
		}
		out[e] = q * s
	}
	return out
}

// planeAt is value g of a plane of f16 or f32 values.
func planeAt(et elem, plane []byte, g int) float32 {
	if et == f16 {
		return F16ToFloat32(binary.LittleEndian.Uint16(plane[2*g:]))
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(plane[4*g:]))
}

// packRows packs rows rows of n elements of type d from raw into fresh planes.
func packRows(d DType, p packing, raw []byte, rows, n int) (w, sc, zp []byte) {
	wb, sb, zb := p.planeBytes(int64(rows), int64(n))
	w, sc, zp = make([]byte, wb), make([]byte, sb), make([]byte, zb)
	wr, sr, zr := p.planeBytes(1, int64(n))
	src := len(raw) / rows
	for r := range int64(rows) {
		packRow(d, p, raw[r*int64(src):(r+1)*int64(src)], n, w[r*wr:(r+1)*wr], sc[r*sr:(r+1)*sr], zp[r*zr:(r+1)*zr])
	}
	return w, sc, zp
}

// TestRoundedZeroPoints packs Q4_1 and Q4_K blocks both ways: the rounded
// form has the same weight and scale planes, each zero point is the float
// one rounded to the nearest integer in 0..255, and so every element moves
// by at most half its group's scale (groups whose zero point was clamped
// are only counted: the test data makes some).
func TestRoundedZeroPoints(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, d := range []DType{DTypeQ4_1, DTypeQ4_K} {
		t.Run(string(d), func(t *testing.T) {
			be, _ := d.block()
			const rows = 8
			n := 2 * be
			raw := randomBlocks(d, rows*2, rng)
			p := packingOf(d)
			r := p
			r.zp = zpRounded
			w, sc, zp := packRows(d, p, raw, rows, n)
			rw, rsc, rzp := packRows(d, r, raw, rows, n)
			if string(w) != string(rw) || string(sc) != string(rsc) {
				t.Fatal("rounding the zero points changed the weight or scale plane")
			}
			if len(rzp) != len(zp)/4 {
				t.Fatalf("rounded zero-point plane has %d bytes, want one per group (%d)", len(rzp), len(zp)/4)
			}
			exact, got := unpack(p, rows*n, w, sc, zp), unpack(r, rows*n, rw, rsc, rzp)
			inRange := 0
			for g := range len(rzp) {
				f := math.Float32frombits(binary.LittleEndian.Uint32(zp[4*g:]))
				want := uint8(max(0, min(255, math.Round(float64(f)))))
				if rzp[g] != want {
					t.Fatalf("group %d: zero point %g rounded to %d, want %d", g, f, rzp[g], want)
				}
				if f < -0.5 || f > 255.5 || f != f {
					continue
				}
				inRange++
				var s float64
				if p.scale == f16 {
					s = float64(F16ToFloat32(binary.LittleEndian.Uint16(sc[2*g:])))
				} else {
					s = float64(math.Float32frombits(binary.LittleEndian.Uint32(sc[4*g:])))
				}
				for e := g * int(p.group); e < (g+1)*int(p.group); e++ {
					if diff := math.Abs(float64(got[e] - exact[e])); diff > 0.5*math.Abs(s)*(1+1e-6)+1e-30 && !math.IsInf(s, 0) {
						t.Fatalf("element %d moved by %g, more than half the scale %g", e, diff, s)
					}
				}
			}
			if inRange < len(rzp)/2 {
				t.Errorf("only %d of %d zero points in range: the test data is degenerate", inRange, len(rzp))
			}
		})
	}
}

// TestPackMatchesDequantize repacks random blocks of every block type into
// OpenVINO's compressed planes and decodes them as the graph does: exact for
// the symmetric types and for Q4_1 and Q4_K with a minimum plane (linear
// weights), within 2 float32 ulps of the group's largest magnitude for Q4_1
// and Q4_K whose minimum becomes a float zero point (gathered weights).
func TestPackMatchesDequantize(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type form struct {
		d  DType
		zp zeroPoint
	}
	forms := []form{{DTypeQ8_0, zpNone}, {DTypeQ4_0, zpScalar}, {DTypeQ4_1, zpPlane}, {DTypeQ4_1, zpMin}, {DTypeQ4_K, zpPlane}, {DTypeQ4_K, zpMin}, {DTypeQ6_K, zpNone}}
	for _, f := range forms {
		d := f.d
		t.Run(fmt.Sprintf("%s/%s", d, map[zeroPoint]string{zpNone: "symmetric", zpScalar: "scalar-zp", zpPlane: "zp-plane", zpMin: "min-plane"}[f.zp]), func(t *testing.T) {
			be, _ := d.block()
			const rows = 8
			n := 2 * be // two blocks per row
			raw := randomBlocks(d, rows*2, rng)
			p := packingOf(d)
			p.zp = f.zp
			w, sc, zp := packRows(d, p, raw, rows, n)
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
