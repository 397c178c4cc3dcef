package model

import "fmt"

// Attention is the form of a graph's attention over the past KV slots.
type Attention string

const (
	// AttentionStatic attends over every slot of the capacity (the mask
	// removes the unused ones from the result, not from the work): every
	// shape in the graph is static, as NPU needs.
	AttentionStatic Attention = "static"
	// AttentionBounded slices each layer's past K/V to the first
	// LiveSlots(position) slots inside the graph: the runtime binds all
	// Capacity slots (the inputs are declared 1..Capacity, which spares
	// the CPU plugin a buffer of its own per input), the attention costs
	// O(live tokens) instead of O(capacity). Needs a device that accepts dynamic shapes inside a
	// graph (CPU, GPU).
	AttentionBounded Attention = "bounded"
	// AttentionAuto picks bounded where the device takes dynamic shapes
	// inside a graph and static elsewhere (see ovexec).
	AttentionAuto Attention = "auto"
)

// BoundedBlock is the granularity of a bounded graph's live prefix: the
// slots attended over are the chunk's first position rounded up to the next
// multiple of BoundedBlock (so the plugin sees a new shape once every
// BoundedBlock tokens, not every step), capped at the capacity.
const BoundedBlock = 64

// LiveSlots is the number of past slots a bounded graph of capacity c
// reads when its chunk starts at position p: (p/BoundedBlock+1)*BoundedBlock,
// at most c. Slots p.. among them are masked as in the static graph.
func LiveSlots(p, c int) int {
	return min(c, (p/BoundedBlock+1)*BoundedBlock)
}

// ParseAttention reads auto, bounded or static.
func ParseAttention(s string) (Attention, error) {
	switch a := Attention(s); a {
	case AttentionAuto, AttentionBounded, AttentionStatic:
		return a, nil
	}
	return "", fmt.Errorf("attention %q: want auto, bounded or static", s)
}

// livePrefix computes, from the chunk's first position, the number of past
// slots a bounded graph reads (LiveSlots inside the graph) and sets b.P to a
// dynamic dimension.
func (b *decoderBuilder) livePrefix(start port) {
	g := b.g
	blk := g.scalarI64(BoundedBlock)
	n := g.op("Divide", "opset1", []attr{{"auto_broadcast", "numpy"}, {"m_pythondiv", "true"}}, []int64{}, i64, start, blk) // [] = p / 64
	n = b.add(n, g.scalarI64(1), []int64{})                                                                                 // []
	n = b.mul(n, blk, []int64{})                                                                                            // []
	b.pastLen = g.op("Minimum", "opset1", []attr{{"auto_broadcast", "numpy"}}, []int64{}, i64, n, g.scalarI64(b.C))         // [] = L
	b.pastStop = b.reshape(b.pastLen, []int64{1})                                                                           // [1]
	b.P = -1
}

// slicePast is the f32 value of a past K/V input [C, Hkv, D] as attention
// reads it: its first L slots when bounded (sliced before any conversion,
// so a cache stored in bf16 is converted for the live prefix alone), all of
// it when static.
func (b *decoderBuilder) slicePast(x port) port {
	g := b.g
	if b.P != b.C {
		shape := append([]int64{b.P}, x.shape[1:]...)
		x = g.op("Slice", "opset8", nil, shape, x.et, x,
			g.constI64([]int64{1}, 0), b.pastStop, g.constI64([]int64{1}, 1), g.constI64([]int64{1}, 0)) // [L, Hkv, D]
	}
	if x.et == f32 {
		return x
	}
	return g.op("Convert", "opset1", []attr{{"destination_type", "f32"}}, x.shape, f32, x) // [L, Hkv, D] f32
}

// toKV converts a chunk's K or V rows to the cache's element type.
func (b *decoderBuilder) toKV(x port) port {
	if b.kv == f32 {
		return x
	}
	return b.g.op("Convert", "opset1", []attr{{"destination_type", string(b.kv)}}, x.shape, b.kv, x)
}

// kvElem reads a GraphSpec's KVPrecision.
func kvElem(p string) (elem, error) {
	switch p {
	case "", "f32":
		return f32, nil
	case "bf16":
		return bf16, nil
	case "f16":
		return f16, nil
	}
	return "", fmt.Errorf("kv precision %q: want f32, bf16 or f16", p)
}

// keys is the shape dimension of the attended keys: the past slots and the chunk.
func (b *decoderBuilder) keys() int64 {
	if b.P < 0 {
		return -1
	}
	return b.P + b.T
}
