package model

import (
	"fmt"
	"math"
)

// This file is the static batched graph (GraphSpec.Batch > 0 with static
// attention, Chunk 1): the NPU's form of continuous batching, every shape
// static. One call decodes one token for each of Batch sequences:
//
//	input_ids, position_ids  i64 [1, B]        token b and its position
//	past_key.i, past_value.i [B*C, Hkv, D]     B caches back to back: sequence b's slots are b*C..b*C+C-1
//	present_key.i, ..value.i [B, Hkv, D]       each token's K/V row, in the KV precision
//	logits                   f32 [B, V]        every token's row
//
// The B tokens stand where a chunk's T tokens stand, so the projections,
// the MLP and the rotary embedding are the chunk's code on [1, B, H];
// only the attention differs: token b attends slots 0..position_b-1 of its
// own cache and itself, never another sequence's slots. There is no
// logits_index input. A slot the caller leaves idle is fed any id at
// position 0 (it then attends only itself) and its outputs are ignored.

// StaticBatch reports whether s is a static batched graph (Batch > 0 and
// static attention) rather than a batched paged one.
func (s GraphSpec) StaticBatch() bool {
	return s.Batch > 0 && (s.Attention == "" || s.Attention == AttentionStatic)
}

// checkStaticBatch refuses a static batched spec BuildIR cannot build.
func (s GraphSpec) checkStaticBatch() error {
	switch {
	case s.Chunk != 1:
		return fmt.Errorf("graph %s: a static batched graph takes one token per sequence (chunk 1), not %d", s.Name(), s.Chunk)
	case s.Shared:
		return fmt.Errorf("graph %s: a static batched graph has static shapes only (not shared)", s.Name())
	}
	return nil
}

// staticBatchMask builds the additive mask [B, C+1] of a static batched
// graph from the tokens' positions: row b is 0 over the slots below
// position_b of sequence b's cache and over the token itself (the last
// column), -inf over the rest of the cache.
func (b *decoderBuilder) staticBatchMask(pos port) {
	g := b.g
	B, C := b.batch, b.C
	slots := g.op("Range", "opset4", []attr{{"output_type", "i64"}}, []int64{C}, i64, g.scalarI64(0), g.scalarI64(C), g.scalarI64(1)) // [C]
	slots = b.reshape(slots, []int64{1, C})                                                                                           // [1, C]
	qpos := b.reshape(pos, []int64{B, 1})                                                                                             // [B, 1]
	live := g.op("Less", "opset1", []attr{{"auto_broadcast", "numpy"}}, []int64{B, C}, boolean, slots, qpos)                          // [B, C]
	past := g.op("Select", "opset1", []attr{{"auto_broadcast", "numpy"}}, []int64{B, C}, f32, live,
		g.scalarF32(0), g.scalarF32(float32(math.Inf(-1)))) // [B, C]
	self := g.constF32([]int64{B, 1}, make([]float32, B)...)                                     // [B, 1]
	b.mask = g.op("Concat", "opset1", []attr{{"axis", "1"}}, []int64{B, C + 1}, f32, past, self) // [B, C+1]
}

// attendBatchStatic is a static batched graph's attention: q [B, Nh, D]
// and k, v [B, Hkv, D] (rotary applied), one token per sequence, over the
// caches [B*C, Hkv, D] read as B matrices [C, Hkv*D] (a reshape, no copy)
// by MatMuls batched over the leading B axis. Grouped-query heads use
// attendRows's block-diagonal query: each query head keeps its D values in
// the columns of its KV head, and a Gather keeps each head's own block of
// the product with V.
func (b *decoderBuilder) attendBatchStatic(q, k, v, pastK, pastV port) port {
	g, cfg := b.g, b.cfg
	B, C := b.batch, b.C
	Nh, Hkv, D := int64(cfg.NumAttentionHeads), int64(cfg.KVHeads()), int64(cfg.HeadDim())
	G, KD := Nh/Hkv, Hkv*D
	scaled, own := make([]float32, Nh*Hkv), make([]int64, Nh)
	for n := int64(0); n < Nh; n++ {
		scaled[n*Hkv+n/G] = float32(1 / math.Sqrt(float64(D)))
		own[n] = n*Hkv + n/G
	}
	selq := g.constF32([]int64{1, Nh, Hkv, 1}, scaled...)                         // [1, Nh, Hkv, 1]
	qb := b.mul(b.reshape(q, []int64{B, Nh, 1, D}), selq, []int64{B, Nh, Hkv, D}) // [B, Nh, Hkv, D]
	qb = b.reshape(qb, []int64{B, Nh, KD})                                        // [B, Nh, Hkv*D]
	kp := b.reshape(pastK, []int64{B, C, KD})                                     // [B, C, Hkv*D]
	vp := b.reshape(pastV, []int64{B, C, KD})                                     // [B, C, Hkv*D]
	kn := b.reshape(k, []int64{B, 1, KD})                                         // [B, 1, Hkv*D]
	vn := b.reshape(v, []int64{B, 1, KD})                                         // [B, 1, Hkv*D]
	s := g.op("Concat", "opset1", []attr{{"axis", "2"}}, []int64{B, Nh, C + 1}, f32,
		b.matmulT(qb, kp, []int64{B, Nh, C}), b.matmulT(qb, kn, []int64{B, Nh, 1})) // [B, Nh, C+1]
	s = b.add(s, b.unsqueeze(b.mask, 1), []int64{B, Nh, C + 1})                           // [B, Nh, C+1]
	p := g.op("Softmax", "opset8", []attr{{"axis", "-1"}}, []int64{B, Nh, C + 1}, f32, s) // [B, Nh, C+1]
	parts := g.add("VariadicSplit", "opset1", "", nil, []port{p, g.scalarI64(2), g.constI64([]int64{2}, C, 1)},
		port{shape: []int64{B, Nh, C}, et: f32}, port{shape: []int64{B, Nh, 1}, et: f32}) // [B, Nh, C], [B, Nh, 1]
	o := b.add(b.matmul(parts[0], vp, []int64{B, Nh, KD}), b.matmul(parts[1], vn, []int64{B, Nh, KD}), []int64{B, Nh, KD}) // [B, Nh, Hkv*D]
	o = b.reshape(o, []int64{B, Nh * Hkv, D})                                                                              // [B, Nh*Hkv, D]
	o = g.op("Gather", "opset8", []attr{{"batch_dims", "0"}}, []int64{B, Nh, D}, f32, o,
		g.constI64([]int64{Nh}, own...), g.scalarI64(1)) // [B, Nh, D]: each head's own block
	return b.reshape(o, []int64{1, B, Nh * D}) // [1, B, Nh*D]
}

// staticBatch reports whether the graph being built is a static batched one.
func (b *decoderBuilder) staticBatch() bool { return b.batch > 0 && !b.paged && !b.bounded }
