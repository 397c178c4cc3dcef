package model

import (
	"bytes"
	"fmt"
	"strings"
)

// This file writes OpenVINO IR v11 XML. OpenVINO's C API cannot build graphs
// op by op, so graphs are emitted as text and read from memory. Every op
// records the shape of its output so the XML carries full port dimensions.

// elem is an OpenVINO element type as the IR spells it ("f32", "i64", ...).
type elem string

const (
	f32     elem = "f32"
	f16     elem = "f16"
	bf16    elem = "bf16"
	i64     elem = "i64"
	i32     elem = "i32"
	boolean elem = "boolean"
)

// precision is the port attribute IR v11 expects for an element type.
func (e elem) precision() string {
	switch e {
	case f32:
		return "FP32"
	case f16:
		return "FP16"
	case bf16:
		return "BF16"
	case i64:
		return "I64"
	case boolean:
		return "BOOL"
	}
	return strings.ToUpper(string(e))
}

// port is one output of a layer: what edges connect from.
type port struct {
	layer int
	id    int
	shape []int64
	et    elem
}

type attr struct{ k, v string }

type irLayer struct {
	id      int
	name    string
	typ     string
	version string
	attrs   []attr
	inputs  []port
	outputs []port
	names   []string // tensor names of each output (may be empty)
}

// irGraph accumulates layers and edges of one IR network.
type irGraph struct {
	name   string
	layers []*irLayer
	w      *Weights
	count  map[string]int
	err    error // first error while building; reported by the caller
	// blocks are the kernel's constants by blob offset: a tied lm_head
	// reads the embedding's Const itself, not a second one over the
	// same bytes, which an exported graph would store (and an import
	// map) twice (SmolLM2: 17.7 MB).
	blocks map[int64]port
}

func newGraph(name string, w *Weights) *irGraph {
	return &irGraph{name: name, w: w, count: map[string]int{}, blocks: map[int64]port{}}
}

// uname makes layer names unique and readable ("MatMul_3").
func (g *irGraph) uname(base string) string {
	g.count[base]++
	return fmt.Sprintf("%s_%d", base, g.count[base])
}

// add appends a layer whose outputs have the given shapes and types.
func (g *irGraph) add(typ, version, name string, attrs []attr, inputs []port, outs ...port) []port {
	l := &irLayer{id: len(g.layers), name: name, typ: typ, version: version, attrs: attrs, inputs: inputs}
	if l.name == "" {
		l.name = g.uname(typ)
	}
	for i, o := range outs {
		o.layer = l.id
		o.id = len(inputs) + i
		l.outputs = append(l.outputs, o)
		l.names = append(l.names, "")
	}
	g.layers = append(g.layers, l)
	return append([]port(nil), l.outputs...) // the caller's to overwrite
}

// op adds a single-output op.
func (g *irGraph) op(typ, version string, attrs []attr, shape []int64, et elem, inputs ...port) port {
	return g.add(typ, version, "", attrs, inputs, port{shape: shape, et: et})[0]
}

// parameter declares a named graph input of static shape.
func (g *irGraph) parameter(name string, et elem, shape []int64) port {
	return g.parameterUpTo(name, et, shape, nil)
}

// parameterUpTo declares a named input with dynamic dimensions: where
// shape has -1 the dimension is 1 to upTo's (IR interval "1..N"), elsewhere
// it is static. A static input gets a buffer of the CPU plugin's own at
// compile time, as large as the input, even when every call binds the
// caller's memory; a dynamic one does not. With no -1 in shape, upTo is
// not read.
func (g *irGraph) parameterUpTo(name string, et elem, shape, upTo []int64) port {
	decl := make([]string, len(shape))
	for i, d := range shape {
		decl[i] = fmt.Sprint(d)
		if d < 0 && upTo != nil {
			decl[i] = fmt.Sprintf("1..%d", upTo[i])
		}
	}
	p := g.add("Parameter", "opset1", name, []attr{{"shape", strings.Join(decl, ",")}, {"element_type", string(et)}}, nil, port{shape: shape, et: et})[0]
	g.layers[p.layer].names[0] = name
	return p
}

// result declares a named graph output.
func (g *irGraph) result(name string, p port) {
	g.layers[p.layer].names[p.id-len(g.layers[p.layer].inputs)] = name
	g.add("Result", "opset1", name+"/sink", nil, []port{p})
}

// constAt references bytes already in the weights blob.
func (g *irGraph) constAt(name string, et elem, shape []int64, offset, size int64) port {
	return g.add("Const", "opset1", name, []attr{
		{"element_type", string(et)}, {"shape", dims(shape)},
		{"offset", fmt.Sprint(offset)}, {"size", fmt.Sprint(size)},
	}, nil, port{shape: shape, et: et})[0]
}

// constBytes places small constant data in the weights pool.
func (g *irGraph) constBytes(et elem, shape []int64, data []byte) port {
	off, err := g.w.poolAdd(data)
	if err != nil && g.err == nil {
		g.err = err
	}
	return g.constAt(g.uname("Const"), et, shape, off, int64(len(data)))
}

func (g *irGraph) constI64(shape []int64, v ...int64) port {
	return g.constBytes(i64, shape, le64(v))
}

func (g *irGraph) constF32(shape []int64, v ...float32) port {
	return g.constBytes(f32, shape, le32(v))
}

// scalarI64 and scalarF32 are rank-0 constants.
func (g *irGraph) scalarI64(v int64) port   { return g.constI64([]int64{}, v) }
func (g *irGraph) scalarF32(v float32) port { return g.constF32([]int64{}, v) }

// weight references a checkpoint tensor as an f32 [out, in] (or [n]) value:
// an f32 Const, a narrower float Const -> Convert (which OpenVINO treats as
// compressed weights), or, for GGUF blocks, OpenVINO's weight-compression
// pattern that the CPU plugin folds into FullyConnected and Gather:
//
//	Const(u4|i8) [out, in/G, G] -> Convert -> [Subtract zp] -> Multiply scale -> Reshape [out, in]
//
// A Fused group's name gives its matrix. For a weight with a minimum plane
// (zpMin) this is q * scale only; linear adds the minima.
func (g *irGraph) weight(name string) port {
	s := g.w.slot(name)
	if s.parts != nil { // stored bytes apart: one constant once folded
		parts := make([]port, len(s.parts))
		for i, n := range s.parts {
			p := g.w.slot(n)
			parts[i] = g.constAt(n, p.et, p.shape, p.off, p.size)
		}
		return g.asF32(g.op("Concat", "opset1", []attr{{"axis", "0"}}, s.shape, s.et, parts...))
	}
	if s.kind != slotPacked {
		return g.asF32(g.constAt(name, s.et, s.shape, s.off, s.size))
	}
	out, in, G := s.shape[0], s.shape[1], s.pack.group
	grouped := []int64{out, in / G, G}
	perGroup := []int64{out, in / G, 1}
	bcast := []attr{{"auto_broadcast", "numpy"}}
	x := g.asF32(g.constAt(name, s.et, grouped, s.off, s.size))                              // [out, in/G, G]
	sc := g.asF32(g.constAt(name+"/scale", s.pack.scale, perGroup, s.scaleOff, s.scaleSize)) // [out, in/G, 1]
	switch s.pack.zp {
	case zpScalar:
		z := g.asF32(g.constBytes(u8, []int64{}, []byte{s.pack.zpValue})) // []
		x = g.op("Subtract", "opset1", bcast, grouped, f32, x, z)         // [out, in/G, G]
	case zpPlane:
		z := g.constAt(name+"/zero_point", f32, perGroup, s.zpOff, s.zpSize) // [out, in/G, 1]
		x = g.op("Subtract", "opset1", bcast, grouped, f32, x, z)            // [out, in/G, G]
	case zpRounded:
		z := g.asF32(g.constAt(name+"/zero_point", u8, perGroup, s.zpOff, s.zpSize)) // [out, in/G, 1]
		x = g.op("Subtract", "opset1", bcast, grouped, f32, x, z)                    // [out, in/G, G]
	}
	x = g.op("Multiply", "opset1", bcast, grouped, f32, x, sc) // [out, in/G, G]
	return g.op("Reshape", "opset1", []attr{{"special_zero", "false"}}, s.shape, f32,
		x, g.constI64([]int64{2}, out, in)) // [out, in]
}

// kernelLinear is x @ W^T through ovrun's GGUFLinear operation for a
// weight laid out for it (kernel.go), y of shape; ok is false for other
// weights. With row (an i64 [1]), a negative value skips the product.
func (g *irGraph) kernelLinear(x port, name string, shape []int64, row ...port) (y port, ok bool) {
	w, typ, ok := g.kernelBlocks(name)
	if !ok {
		return port{}, false
	}
	act := "f32"
	if g.w.format == WeightsKernelQ8 {
		act = "q8"
	}
	return g.op("GGUFLinear", "ovrun", []attr{{"type", typ}, {"activations", act}}, shape, f32, append([]port{x, w}, row...)...), true
}

// kernelGather is the rows ids names of the weight name (an embedding [V,
// H]) through ovrun's GGUFGather, y of shape; ok is false for a weight not
// laid out for the kernel.
func (g *irGraph) kernelGather(name string, ids port, shape []int64) (y port, ok bool) {
	w, typ, ok := g.kernelBlocks(name)
	if !ok {
		return port{}, false
	}
	return g.op("GGUFGather", "ovrun", []attr{{"type", typ}}, shape, f32, w, ids), true
}

// kernelBlocks is the constant of a weight laid out for the kernel
// (kernel.go), [rows, bytes a row], and the kernel's name of its layout.
func (g *irGraph) kernelBlocks(name string) (w port, typ string, ok bool) {
	s := g.w.slot(name)
	if s.kind != slotPacked || s.pack.kernel == "" {
		return port{}, "", false
	}
	w, ok = g.blocks[s.off]
	if !ok {
		w = g.constAt(name, u8, []int64{s.shape[0], s.size / s.shape[0]}, s.off, s.size)
		g.blocks[s.off] = w
	}
	return w, kernelType(s.pack.kernel), true
}

// weightMin is the minimum plane [out, in/G] of a weight stored with one
// (zpMin), as f32, and its group size G; ok is false for other weights.
func (g *irGraph) weightMin(name string) (m port, G int64, ok bool) {
	s := g.w.slot(name)
	if s.kind != slotPacked || s.pack.zp != zpMin {
		return port{}, 0, false
	}
	return g.minPlane(name, s, []int64{s.shape[0], s.shape[1] / s.pack.group}), s.pack.group, true
}

// minPlane reads slot s's minimum plane (zpMin) as f32 in shape ([out,
// in/G] or [out, in/G, 1]).
func (g *irGraph) minPlane(name string, s *slot, shape []int64) port {
	return g.asF32(g.constAt(name+"/min", s.pack.scale, shape, s.zpOff, s.zpSize))
}

// asF32 is x as f32: x itself, or a Convert.
func (g *irGraph) asF32(x port) port {
	if x.et == f32 {
		return x
	}
	return g.op("Convert", "opset1", []attr{{"destination_type", "f32"}}, x.shape, f32, x)
}

// XML renders the network.
func (g *irGraph) XML() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "<?xml version=\"1.0\"?>\n<net name=%q version=\"11\">\n<layers>\n", g.name)
	for _, l := range g.layers {
		fmt.Fprintf(&b, "<layer id=\"%d\" name=%q type=%q version=%q>\n", l.id, l.name, l.typ, l.version)
		if len(l.attrs) > 0 {
			b.WriteString("<data")
			for _, a := range l.attrs {
				fmt.Fprintf(&b, " %s=%q", a.k, a.v)
			}
			b.WriteString("/>\n")
		}
		if len(l.inputs) > 0 {
			b.WriteString("<input>\n")
			for i, in := range l.inputs {
				fmt.Fprintf(&b, "<port id=\"%d\">%s</port>\n", i, dimTags(in.shape))
			}
			b.WriteString("</input>\n")
		}
		if len(l.outputs) > 0 {
			b.WriteString("<output>\n")
			for i, o := range l.outputs {
				names := ""
				if l.names[i] != "" {
					names = fmt.Sprintf(" names=%q", l.names[i])
				}
				fmt.Fprintf(&b, "<port id=\"%d\" precision=%q%s>%s</port>\n", o.id, o.et.precision(), names, dimTags(o.shape))
			}
			b.WriteString("</output>\n")
		}
		b.WriteString("</layer>\n")
	}
	b.WriteString("</layers>\n<edges>\n")
	for _, l := range g.layers {
		for i, in := range l.inputs {
			fmt.Fprintf(&b, "<edge from-layer=\"%d\" from-port=\"%d\" to-layer=\"%d\" to-port=\"%d\"/>\n", in.layer, in.id, l.id, i)
		}
	}
	b.WriteString("</edges>\n</net>\n")
	return b.Bytes()
}

func dims(s []int64) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return strings.Join(parts, ",")
}

func dimTags(s []int64) string {
	var b strings.Builder
	for _, d := range s {
		fmt.Fprintf(&b, "<dim>%d</dim>", d)
	}
	return b.String()
}
