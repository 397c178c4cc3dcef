package ov

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// This file tests the layer's operations of ovrun's kernel library
// (ov/ext/layer_ops.cc) against float64 references written here from
// their documented definitions.

// layerOpsXML is RMSNorm(x [rows, h], w [h]) -> norm and RoPE(r [rows,
// heads, d], cos [rows, d/2], sin [rows, d/2]) -> rope, every input a
// parameter.
func layerOpsXML(rows, h, heads, d int, eps float64) string {
	param := func(id int, name string, dims ...int) string {
		shape, ports := "", ""
		for i, v := range dims {
			if i > 0 {
				shape += ","
			}
			shape += fmt.Sprint(v)
			ports += fmt.Sprintf("<dim>%d</dim>", v)
		}
		return fmt.Sprintf(`<layer id="%d" name="%s" type="Parameter" version="opset1"><data shape="%s" element_type="f32"/><output><port id="0" precision="FP32" names="%s">%s</port></output></layer>`,
			id, name, shape, name, ports)
	}
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
