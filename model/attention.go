package model

import "fmt"

// Attention is the form of a graph's attention over the past KV slots.
type Attention string

const (
	// AttentionStatic attends over every slot of the capacity (the mask
	// removes the unused ones from the result, not from the work): every
	// shape in the graph is static, as NPU needs.
	AttentionStatic Attention = "static"
	// AttentionBounded declares each layer's past K/V inputs 1..Capacity
	// slots and attends over the slots bound: the runtime binds the first
	// LiveSlots(position) of its cache (a prefix view, no copy), so the
	// attention costs O(live tokens) instead of O(capacity), and the CPU
	// plugin keeps no Capacity-slot buffer of its own per input. Needs a
	// device that accepts dynamic shapes inside a graph (CPU, GPU).
	AttentionBounded Attention = "bounded"
	// AttentionPaged attends through OpenVINO's PagedAttentionExtension
	// operation, the CPU plugin's kernels for OpenVINO GenAI's
	// PagedAttention back-end: each layer's cache input is the paged
	// layout [Capacity/PagedBlock, Hkv, PagedBlock, D] (the slot axis
	// still outermost, so a rung's cache is a prefix of a larger one), the
	// operation writes the chunk's K/V into it in place (the graph has no
	// present outputs) and reads only the blocks of the live tokens; the
	// token axis is dynamic whatever the chunk, so nothing is padded.
	// Needs ovrun's extension library (ov.PagedAttentionLibrary) and the
	// CPU.
	AttentionPaged Attention = "paged"
	// AttentionAuto picks paged on the CPU where the extension is there,
	// bounded or static where the device takes dynamic shapes inside a
	// graph, static elsewhere (see ovexec).
	AttentionAuto Attention = "auto"
)

// PagedBlock is the slots per block of a paged cache: the CPU plugin's
// block size for PagedAttention.
const PagedBlock = 32

// CacheBlock is the slots a cache of this form is allocated and bound in
// (runtime.KVShape.Block): PagedBlock for paged attention, else 0 (single
// slots).
func (a Attention) CacheBlock() int {
	if a == AttentionPaged {
		return PagedBlock
	}
	return 0
}

// BoundedBlock is the granularity of a bounded graph's live prefix: the
// slots bound are the chunk's first position rounded up to the next
// multiple of BoundedBlock (so the plugin sees a new shape once every
// BoundedBlock tokens, not every step), capped at the capacity.
const BoundedBlock = 64

// LiveSlots is the number of past slots the runtime binds to a bounded
// graph of capacity c when its chunk starts at position p:
// (p/BoundedBlock+1)*BoundedBlock, at most c. Slots p.. among them are
// masked as in the static graph.
func LiveSlots(p, c int) int {
	return min(c, (p/BoundedBlock+1)*BoundedBlock)
}

// ParseAttention reads auto, paged, bounded or static.
func ParseAttention(s string) (Attention, error) {
	switch a := Attention(s); a {
	case AttentionAuto, AttentionPaged, AttentionBounded, AttentionStatic:
		return a, nil
	}
	return "", fmt.Errorf("attention %q: want auto, paged, bounded or static", s)
}

// DynamicTokens reports whether the graph takes any number of tokens up to
// its chunk per call (a shared graph, or a paged one: it writes every token
// it is given into the cache, so a chunk is never padded).
func (s GraphSpec) DynamicTokens() bool {
	return s.Shared || s.Attention == AttentionPaged && s.Chunk > 1
}

// pastF32 is the f32 value of a past K/V input as attention reads it: all
// of its slots (a bounded graph gets the live prefix bound, so a cache
// stored in bf16 is converted for the live prefix alone).
func (b *decoderBuilder) pastF32(x port) port { return b.g.asF32(x) } // [P, Hkv, D] f32

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
