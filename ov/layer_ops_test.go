package ov

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"
)

// This file tests the layer's operations of ovrun's kernel library
// (ov/ext/layer_ops.cc) against float64 references written here from
// their documented definitions.

// layerOpsXML is RMSNorm(x [rows, h], w [h]) -> norm and RoPE(r [rows,
// heads, d], cos [rows, d/2], sin [rows, d/2]) -> rope, every input a
// parameter.
func layerOpsXML(rows, h, heads, d int, eps float64) string {
	param := func(id int, name string, dims ...int) string { return paramXML(id, name, "f32", dims...) }
	dims := func(v ...int) (s string) {
		for _, x := range v {
			s += fmt.Sprintf("<dim>%d</dim>", x)
		}
		return s
	}
	x, r, half := dims(rows, h), dims(rows, heads, d), dims(rows, d/2)
	return fmt.Sprintf(`<?xml version="1.0"?>
<net name="layer" version="11"><layers>
%s
%s
<layer id="2" name="norm" type="RMSNorm" version="ovrun"><data eps="%g"/><input><port id="0">%s</port><port id="1">%s</port></input><output><port id="2" precision="FP32" names="norm">%s</port></output></layer>
<layer id="3" name="norm_out" type="Result" version="opset1"><input><port id="0">%s</port></input></layer>
%s
%s
%s
<layer id="7" name="rope" type="RoPE" version="ovrun"><data head_size="%d"/><input><port id="0">%s</port><port id="1">%s</port><port id="2">%s</port></input><output><port id="3" precision="FP32" names="rope">%s</port></output></layer>
<layer id="8" name="rope_out" type="Result" version="opset1"><input><port id="0">%s</port></input></layer>
</layers><edges>
<edge from-layer="0" from-port="0" to-layer="2" to-port="0"/><edge from-layer="1" from-port="0" to-layer="2" to-port="1"/><edge from-layer="2" from-port="2" to-layer="3" to-port="0"/>
<edge from-layer="4" from-port="0" to-layer="7" to-port="0"/><edge from-layer="5" from-port="0" to-layer="7" to-port="1"/><edge from-layer="6" from-port="0" to-layer="7" to-port="2"/><edge from-layer="7" from-port="3" to-layer="8" to-port="0"/>
</edges></net>`,
		param(0, "x", rows, h), param(1, "w", h), eps, x, dims(h), x, x,
		param(4, "r", rows, heads, d), param(5, "cos", rows, d/2), param(6, "sin", rows, d/2),
		d, r, half, half, r, r)
}

// TestLayerOpsMatchReference normalizes and rotates random rows against
// float64 references: RMSNorm as x / sqrt(mean(x^2) + eps) * w, RoPE as
// each head's halves a, b becoming a*cos - b*sin and b*cos + a*sin, so a
// wrong half, sign, row or head offset is caught.
func TestLayerOpsMatchReference(t *testing.T) {
	c := needCore(t)
	if err := c.GGUFLinear(); err != nil {
		t.Fatalf("kernel library unavailable: %v", err)
	}
	const rows, h, heads, d, eps = 3, 40, 3, 16, 1e-5
	model, err := c.ReadModel([]byte(layerOpsXML(rows, h, heads, d, eps)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	req := requestOn(t, c, model)
	rng := rand.New(rand.NewPCG(3, 4))
	input := func(name string, dims ...int64) []float32 {
		tn, err := NewTensor(F32, dims)
		if err != nil {
			t.Fatal(err)
		}
		defer tn.Close()
		v := tn.Float32s()
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		if err := req.SetTensor(name, tn); err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), v...)
	}
	x, w := input("x", rows, h), input("w", h)
	r, cos, sin := input("r", rows, heads, d), input("cos", rows, d/2), input("sin", rows, d/2)
	if err := req.Infer(); err != nil {
		t.Fatal(err)
	}
	near := func(what string, i int, got float32, want float64) {
		t.Helper()
		if math.Abs(float64(got)-want) > 1e-6*(1+math.Abs(want)) {
			t.Fatalf("%s element %d: %g, want %g", what, i, got, want)
		}
	}
	norm := outputOf(t, req, "norm")
	for row := range rows {
		var ss float64
		for e := range h {
			ss += float64(x[row*h+e]) * float64(x[row*h+e])
		}
		inv := 1 / math.Sqrt(ss/h+eps)
		for e := range h {
			near("norm", row*h+e, norm[row*h+e], float64(x[row*h+e])*inv*float64(w[e]))
		}
	}
	rope := outputOf(t, req, "rope")
	for row := range rows {
		for hd := range heads {
			base := (row*heads + hd) * d
			for j := range d / 2 {
				a, b := float64(r[base+j]), float64(r[base+d/2+j])
				cj, sj := float64(cos[row*d/2+j]), float64(sin[row*d/2+j])
				near("rope", base+j, rope[base+j], a*cj-b*sj)
				near("rope", base+d/2+j, rope[base+d/2+j], b*cj+a*sj)
			}
		}
	}
}

// paramXML is an IR Parameter layer of element type et (f32, u8 or i64)
// and shape dims, its output port named name.
func paramXML(id int, name, et string, dims ...int) string {
	shape, ports := "", ""
	for i, v := range dims {
		if i > 0 {
			shape += ","
		}
		shape += fmt.Sprint(v)
		ports += fmt.Sprintf("<dim>%d</dim>", v)
	}
	precision := map[string]string{"f32": "FP32", "u8": "U8", "i64": "I64"}[et]
	return fmt.Sprintf(`<layer id="%d" name="%s" type="Parameter" version="opset1"><data shape="%s" element_type="%s"/><output><port id="0" precision="%s" names="%s">%s</port></output></layer>`,
		id, name, shape, et, precision, name, ports)
}

// attendXML is Attend(q [1, T, nh*d], k, v [1, T, hkv*d], table u8 [16],
// past i64 [1] [, count i64 [1]]) -> att over layer 0's caches of blocks
// blocks of et, every input a parameter.
func attendXML(tokens, nh, hkv, d, block, blocks int, et string, counted bool) string {
	param := paramXML
	var edges, countParam, countPort string
	for i := range 5 {
		edges += fmt.Sprintf(`<edge from-layer="%d" from-port="0" to-layer="5" to-port="%d"/>`, i, i)
	}
	outPort := 5
	if counted {
		countParam, countPort, outPort = param(7, "count", "i64", 1), `<port id="5"><dim>1</dim></port>`, 6
		edges += `<edge from-layer="7" from-port="0" to-layer="5" to-port="5"/>`
	}
	out := fmt.Sprintf("<dim>1</dim><dim>%d</dim><dim>%d</dim>", tokens, nh*d)
	return fmt.Sprintf(`<?xml version="1.0"?>
<net name="attend" version="11"><layers>
%s
%s
%s
%s
%s
<layer id="5" name="att" type="Attend" version="ovrun"><data heads="%d" kv_heads="%d" head_size="%d" block="%d" blocks="%d" layer="0" cache_type="%s"/><input><port id="0">%s</port><port id="1"><dim>1</dim><dim>%d</dim><dim>%d</dim></port><port id="2"><dim>1</dim><dim>%d</dim><dim>%d</dim></port><port id="3"><dim>16</dim></port><port id="4"><dim>1</dim></port>%s</input><output><port id="%d" precision="FP32" names="att">%s</port></output></layer>
<layer id="6" name="att_out" type="Result" version="opset1"><input><port id="0">%s</port></input></layer>
%s
</layers><edges>%s<edge from-layer="5" from-port="%d" to-layer="6" to-port="0"/></edges></net>`,
		param(0, "q", "f32", 1, tokens, nh*d), param(1, "k", "f32", 1, tokens, hkv*d), param(2, "v", "f32", 1, tokens, hkv*d),
		param(3, "table", "u8", 16), param(4, "past", "i64", 1),
		nh, hkv, d, block, blocks, et, out, tokens, hkv*d, tokens, hkv*d, countPort, outPort, out, out, countParam, edges, outPort)
}

// TestAttendMatchesReference runs Attend on random queries and caches (the
// table holding their addresses) in
// f32 and bf16 caches (in f32 and bf16 graphs), one token and several, with a past that spans more than
// one of the operation's chunks of slots, against a float64 reference of
// its definition: the chunk's K/V rounded to the cache's type and written
// into the caches at slots past.. (checked in place), then each query
// head's softmax over slots 0..past+t of its KV head. A wrong slot, block
// stride, head group, causal bound or chunk combination is caught; a table
// with no cache in it fails the call. With a count (a padded token axis)
// only the first count tokens are written and attended: the padding's
// slots keep what they held.
func TestAttendMatchesReference(t *testing.T) {
	c := needCore(t)
	if err := c.GGUFLinear(); err != nil {
		t.Fatalf("kernel library unavailable: %v", err)
	}
	const nh, hkv, d, block = 6, 2, 16, 32
	bf16Bits := func(v float64) uint16 {
		b := math.Float32bits(float32(v))
		return uint16((b + 0x7fff + (b >> 16 & 1)) >> 16)
	}
	types := map[string]struct {
		et     ElementType
		encode func(float64) uint16
		decode func(uint16) float64
	}{
		"bf16": {BF16, bf16Bits, func(h uint16) float64 { return float64(math.Float32frombits(uint32(h) << 16)) }},
	}
	for _, tc := range []struct {
		et           string
		tokens, past int
		precision    string // the graph's INFERENCE_PRECISION_HINT
		count        int    // the real tokens of a padded axis; 0: no count input
	}{{"f32", 1, 300, "f32", 0}, {"f32", 1, 1100, "f32", 0}, {"f32", 3, 5, "f32", 0}, {"f32", 1, 0, "f32", 0}, {"bf16", 1, 40, "f32", 0}, {"bf16", 2, 260, "bf16", 0},
		{"f32", 8, 13, "f32", 3}, {"f32", 8, 0, "f32", 8}, {"bf16", 8, 70, "f32", 1}} {
		t.Run(fmt.Sprintf("%s-T%d-past%d-%s-count%d", tc.et, tc.tokens, tc.past, tc.precision, tc.count), func(t *testing.T) {
			if caps, err := c.Property("CPU", "OPTIMIZATION_CAPABILITIES"); tc.precision == "bf16" && (err != nil || !strings.Contains(caps, "BF16")) {
				t.Skipf("no bf16 inference on this CPU (%q)", caps)
			}
			T, nb := tc.tokens, (tc.past+tc.tokens+block-1)/block+1
			model, err := c.ReadModel([]byte(attendXML(tc.tokens, nh, hkv, d, block, nb, tc.et, tc.count > 0)), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer model.Close()
			req := requestOn(t, c, model, Property{"INFERENCE_PRECISION_HINT", tc.precision})
			rng := rand.New(rand.NewPCG(5, uint64(tc.past)))
			draw := func() float64 { return math.Copysign(0.05+rng.Float64()*1.5, rng.Float64()-0.5) }
			set := func(name string, et ElementType, dims ...int64) *Tensor {
				tn, err := NewTensor(et, dims)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { tn.Close() })
				if err := req.SetTensor(name, tn); err != nil {
					t.Fatal(err)
				}
				return tn
			}
			qt, kt, vt := set("q", F32, 1, int64(T), nh*d), set("k", F32, 1, int64(T), hkv*d), set("v", F32, 1, int64(T), hkv*d)
			for _, tn := range []*Tensor{qt, kt, vt} {
				for i, v := 0, tn.Float32s(); i < len(v); i++ {
					v[i] = float32(draw())
				}
			}
			set("past", I64, 1).Int64s()[0] = int64(tc.past)
			real := T // the tokens written and attended
			if tc.count > 0 {
				real = tc.count
				set("count", I64, 1).Int64s()[0] = int64(tc.count)
			}
			table := set("table", U8, 16) // the caches' addresses, K then V
			// caches[0], caches[1]: K and V as the reference reads them,
			// [slot][h][d]; slot s sits at ((s/block*hkv+h)*block+s%block)*d.
			slots := nb * block
			caches := [2][]float64{make([]float64, slots*hkv*d), make([]float64, slots*hkv*d)}
			bound := [2]*Tensor{} // the caches, in the paged layout
			at := func(s, h, e int) int { return ((s/block*hkv+h)*block+s%block)*d + e }
			for ci := range bound {
				tn, ok := types[tc.et]
				et := F32
				if ok {
					et = tn.et
				}
				bound[ci], err = NewTensor(et, []int64{int64(nb), hkv, block, d})
				if err != nil {
					t.Fatal(err)
				}
				defer bound[ci].Close()
				binary.LittleEndian.PutUint64(table.Bytes()[8*ci:], uint64(uintptr(bound[ci].Data())))
				for s := range slots {
					for h := range hkv {
						for e := range d {
							v := draw()
							if ok {
								b := tn.encode(v)
								unsafe.Slice((*uint16)(bound[ci].Data()), slots*hkv*d)[at(s, h, e)] = b
								v = tn.decode(b)
							} else {
								bound[ci].Float32s()[at(s, h, e)] = float32(v)
								v = float64(float32(v))
							}
							caches[ci][(s*hkv+h)*d+e] = v
						}
					}
				}
			}
			// The chunk's K/V as the cache's type holds them.
			round := func(v float32) float64 {
				if tn, ok := types[tc.et]; ok {
					return tn.decode(tn.encode(float64(v)))
				}
				return float64(v)
			}
			for ci, src := range []*Tensor{kt, vt} {
				for tok := range real {
					for h := range hkv {
						for e := range d {
							caches[ci][((tc.past+tok)*hkv+h)*d+e] = round(src.Float32s()[(tok*hkv+h)*d+e])
						}
					}
				}
			}
			if err := req.Infer(); err != nil {
				t.Fatal(err)
			}
			for ci := range bound {
				for tok := range T {
					for h := range hkv {
						for e := range d {
							i := at(tc.past+tok, h, e)
							var got float64
							if tn, ok := types[tc.et]; ok {
								got = tn.decode(unsafe.Slice((*uint16)(bound[ci].Data()), slots*hkv*d)[i])
							} else {
								got = float64(bound[ci].Float32s()[i])
							}
							if want := caches[ci][((tc.past+tok)*hkv+h)*d+e]; got != want {
								t.Fatalf("cache %d slot %d head %d element %d: %g in the bound tensor, want %g", ci, tc.past+tok, h, e, got, want)
							}
						}
					}
				}
			}
			att, q := outputOf(t, req, "att"), qt.Float32s()
			// With no cache in the table the call fails; it reads nothing.
			clear(table.Bytes())
			if err := req.Infer(); err == nil {
				t.Error("Attend ran with an empty table")
			}
			worst := 0.0
			defer func() { t.Logf("max abs error %.3g", worst) }()
			for tok := range real {
				for n := range nh {
					h := n / (nh / hkv)
					seen := tc.past + tok + 1
					scores, top := make([]float64, seen), math.Inf(-1)
					for s := range seen {
						for e := range d {
							scores[s] += float64(q[(tok*nh+n)*d+e]) * caches[0][(s*hkv+h)*d+e]
						}
						scores[s] /= math.Sqrt(d)
						top = math.Max(top, scores[s])
					}
					var sum float64
					for s := range scores {
						scores[s] = math.Exp(scores[s] - top)
						sum += scores[s]
					}
					for e := range d {
						var want float64
						for s := range seen {
							want += scores[s] / sum * caches[1][(s*hkv+h)*d+e]
						}
						worst = max(worst, math.Abs(float64(att[(tok*nh+n)*d+e])-want))
						if got := att[(tok*nh+n)*d+e]; math.Abs(float64(got)-want) > 1e-6*(1+math.Abs(want)) {
							t.Fatalf("token %d head %d element %d: %g, want %g", tok, n, e, got, want)
						}
					}
				}
			}
		})
	}
}
