package model

import (
	"encoding/xml"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// irNet is the part of an IR file the tests read: each layer's id, name,
// type, shape (Parameters) and output ports, and the edges.
type irNet struct {
	Layers []struct {
		ID   int    `xml:"id,attr"`
		Name string `xml:"name,attr"`
		Type string `xml:"type,attr"`
		Data struct {
			Shape string `xml:"shape,attr"`
		} `xml:"data"`
		Outputs []struct {
			Names string `xml:"names,attr"`
			Dims  []int  `xml:"dim"`
		} `xml:"output>port"`
	} `xml:"layers>layer"`
	Edges []struct {
		From int `xml:"from-layer,attr"`
		To   int `xml:"to-layer,attr"`
	} `xml:"edges>edge"`
}

// boundWeights loads a synthetic F32 checkpoint of the preset and binds its
// weights to a Go buffer, enough to build IR.
func boundWeights(t *testing.T, preset string) (*Checkpoint, *Weights) {
	t.Helper()
	ck, err := Load(synthTo(t, preset, 1, DTypeF32))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	w := NewWeights(ck)
	if err := w.Bind(make([]byte, w.Size())); err != nil {
		t.Fatal(err)
	}
	return ck, w
}

// TestDecodeReadsKVInPlace checks the property that decode speed at large
// capacities rests on: in a decode graph every past K/V input is only
// reshaped (a view) and read by MatMuls (or has its static shape read), never concatenated or transposed
// (a copy of the layer's whole cache on every step, 60% of a step at
// capacity 4096 on the CPU plugin), and so is it in a shared graph, which
// decodes too; prefill graphs keep one ScaledDotProductAttention per layer.
func TestDecodeReadsKVInPlace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		preset string
	}{
		{name: "qwen2 GQA", preset: "tiny"},
		{name: "llama MQA", preset: "tiny-llama"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ck, w := boundWeights(t, tc.preset)
			layers := ck.Config.NumHiddenLayers
			for _, spec := range []GraphSpec{
				{Capacity: 16, Chunk: 1}, {Capacity: 16, Chunk: 4},
				{Capacity: 16, Chunk: 1, Attention: AttentionBounded}, {Capacity: 16, Chunk: 4, Attention: AttentionBounded},
				{Capacity: 16, Chunk: 1, KVPrecision: "bf16"}, {Capacity: 16, Chunk: 1, Attention: AttentionBounded, KVPrecision: "bf16"},
				{Capacity: 16, Chunk: 4, Shared: true, Attention: AttentionBounded, KVPrecision: "bf16"},
			} {
				b, err := BuildIR(w, spec)
				if err != nil {
					t.Fatal(err)
				}
				net := parseIR(t, b)
				typ, byName := map[int]string{}, map[string]int{}
				consumers := map[int][]int{}
				sdpa := 0
				for _, l := range net.Layers {
					typ[l.ID], byName[l.Name] = l.Type, l.ID
					if l.Type == "ScaledDotProductAttention" {
						sdpa++
					}
				}
				for _, e := range net.Edges {
					consumers[e.From] = append(consumers[e.From], e.To)
				}
				// A cache in bf16 is read through one Convert (of the
				// slots bound: a bounded graph gets the live prefix bound,
				// so nothing in it slices or copies the cache); the checks
				// below apply to what comes after it.
				var hops []string
				if spec.KVPrecision == "bf16" {
					hops = append(hops, "Convert")
				}
				for i := 0; i < layers; i++ {
					for _, in := range []string{PastKey(i), PastValue(i)} {
						for _, hop := range hops {
							cs := slices.DeleteFunc(slices.Clone(consumers[byName[in]]), func(c int) bool { return typ[c] == "ShapeOf" })
							if len(cs) != 1 || typ[cs[0]] != hop {
								t.Fatalf("%s %+v: %s is read by %v, want one %s", spec.Name(), spec, in, cs, hop)
							}
							byName[in] = cs[0]
						}
					}
				}
				if spec.Chunk > 1 && !spec.Shared {
					if sdpa != layers {
						t.Errorf("%s: %d ScaledDotProductAttention ops, want %d", spec.Name(), sdpa, layers)
					}
					continue
				}
				if sdpa != 0 {
					t.Errorf("%s: %d ScaledDotProductAttention ops, want none", spec.Name(), sdpa)
				}
				for i := 0; i < layers; i++ {
					for _, in := range []string{PastKey(i), PastValue(i)} {
						id, ok := byName[in]
						if !ok {
							t.Fatalf("%s: no input %s", spec.Name(), in)
						}
						for _, r := range consumers[id] {
							path := fmt.Sprintf("%s -> %s", in, typ[r])
							if typ[r] == "ShapeOf" { // reads no data; folded on static shapes
								continue
							}
							if typ[r] != "Reshape" {
								t.Errorf("%s: %s, want a Reshape", spec.Name(), path)
								continue
							}
							for _, m := range consumers[r] {
								if typ[m] != "MatMul" {
									t.Errorf("%s: %s -> %s, want a MatMul", spec.Name(), path, typ[m])
								}
							}
						}
					}
				}
			}
		})
	}
}

// TestPastInputShapes pins how the past K/V inputs are declared: static in
// a static graph (NPU compiles nothing else), and 1..C slots in a bounded
// one, for which the CPU plugin then keeps no C-slot buffer of its own per
// input (SmolLM2 at capacity 4096, bf16: peak RSS of generate 489 -> 401
// MiB); the runtime binds all C slots either way.
func TestPastInputShapes(t *testing.T) {
	ck, w := boundWeights(t, "tiny")
	rest := fmt.Sprintf("%d,%d", ck.Config.KVHeads(), ck.Config.HeadDim())
	for _, spec := range []GraphSpec{
		{Capacity: 96, Chunk: 1}, {Capacity: 96, Chunk: 8},
		{Capacity: 96, Chunk: 1, Attention: AttentionBounded}, {Capacity: 96, Chunk: 8, Attention: AttentionBounded},
	} {
		b, err := BuildIR(w, spec)
		if err != nil {
			t.Fatal(err)
		}
		net := parseIR(t, b)
		want := "96," + rest
		if spec.Attention == AttentionBounded {
			want = "1..96," + rest
		}
		n := 0
		for _, l := range net.Layers {
			if l.Type != "Parameter" || (!strings.HasPrefix(l.Name, "past_key.") && !strings.HasPrefix(l.Name, "past_value.")) {
				continue
			}
			n++
			if l.Data.Shape != want {
				t.Errorf("%s %s: %s declared %q, want %q", spec.Name(), spec.Attention, l.Name, l.Data.Shape, want)
			}
		}
		if n != 2*ck.Config.NumHiddenLayers {
			t.Errorf("%s: %d past inputs, want %d", spec.Name(), n, 2*ck.Config.NumHiddenLayers)
		}
	}
}

// TestLiveSlots pins the bounded graph's live prefix at its edges: the
// chunk's first position rounded up past the next multiple of BoundedBlock,
// never beyond the capacity, never empty.
func TestLiveSlots(t *testing.T) {
	for _, tc := range []struct {
		name          string
		pos, capacity int
		want          int
	}{
		{name: "empty cache", pos: 0, capacity: 4096, want: 64},
		{name: "last slot of the first block", pos: 63, capacity: 4096, want: 64},
		{name: "first slot of the second block", pos: 64, capacity: 4096, want: 128},
		{name: "mid block", pos: 144, capacity: 4096, want: 192},
		{name: "capped at capacity", pos: 4095, capacity: 4096, want: 4096},
		{name: "capacity below a block", pos: 5, capacity: 16, want: 16},
		{name: "capacity not a multiple of the block", pos: 130, capacity: 150, want: 150},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LiveSlots(tc.pos, tc.capacity); got != tc.want {
				t.Errorf("LiveSlots(%d, %d) = %d, want %d", tc.pos, tc.capacity, got, tc.want)
			}
		})
	}
}

func TestParseAttention(t *testing.T) {
	for _, s := range []string{"auto", "bounded", "static"} {
		if a, err := ParseAttention(s); err != nil || string(a) != s {
			t.Errorf("ParseAttention(%q) = %q, %v", s, a, err)
		}
	}
	if _, err := ParseAttention("dynamic"); err == nil {
		t.Error("ParseAttention(dynamic): no error")
	}
	w := &Weights{}
	if _, err := BuildIR(w, GraphSpec{Capacity: 16, Chunk: 1, Attention: AttentionAuto}); err == nil {
		t.Error("BuildIR with attention auto: no error (the compiler must resolve it)")
	}
}

// parseIR reads an IR's layers.
func parseIR(t *testing.T, ir []byte) irNet {
	t.Helper()
	var net irNet
	if err := xml.Unmarshal(ir, &net); err != nil {
		t.Fatal(err)
	}
	return net
}
