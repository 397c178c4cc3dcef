package model

import (
	"encoding/binary"
	"fmt"
	"math"
)

// This file is the paged form of attention (AttentionPaged): each layer's
// attention is one PagedAttentionExtension operation over the cache in
// blocks. The operation's inputs are those OpenVINO's SDPAToPagedAttention
// pass gives it in the 2026.3 release (28, most of them empty: no sliding
// window, ALiBi, cache rotation, sparse or adaptive attention); the CPU
// plugin reads the head counts and sizes from the layer's attributes, which
// ovrun's extension (ov/ext) turns into the node's runtime info.

// pagedSeq holds the operation's inputs every layer shares: one sequence
// whose chunk starts at position p with T tokens.
type pagedSeq struct {
	first       port // i64 [1] = p
	pastLens    port // i32 [1] = p
	begins      port // i32 [2] = 0, T
	blocks      port // i32 [nb] = 0..nb-1, nb = ceil((p+T)/PagedBlock)
	blockBegins port // i32 [2] = 0, nb
	maxLen      port // i32 [] = p+T
	scale       port // f32 [] = 1/sqrt(D)
	// unused are the inputs after scale that ovrun leaves empty or 0:
	// 10 and 11, then 13 on (12 is maxLen).
	unused []port
}

// pagedInputs computes the sequence inputs from the chunk's positions (the
// first one is the tokens already cached) and its length: the runtime binds
// the same tensors as for the other forms, and the cache's block table is
// the identity (block i holds slots i*PagedBlock.., a prefix of the buffer).
func (b *decoderBuilder) pagedInputs(pos port) {
	g := b.g
	T := b.T
	D := int64(b.cfg.HeadDim())
	first := g.op("Gather", "opset8", []attr{{"batch_dims", "0"}}, []int64{1}, i64,
		b.reshape(pos, []int64{T}), g.constI64([]int64{1}, 0), g.scalarI64(0)) // [1] = p
	if b.kernelAttend() { // Attend takes the first position alone
		b.pa = &pagedSeq{first: first}
		return
	}
	tokens := b.tokens
	if T >= 0 {
		tokens = g.constI64([]int64{1}, T)
	}
	end := b.add(first, tokens, []int64{1}) // [1] = p+T
	nb := g.op("Divide", "opset1", []attr{{"auto_broadcast", "numpy"}, {"m_pythondiv", "true"}}, []int64{1}, i64,
		b.add(end, g.constI64([]int64{1}, PagedBlock-1), []int64{1}), g.constI64([]int64{1}, PagedBlock)) // [1]
	zero := g.constI64([]int64{1}, 0)
	toI32 := func(x port) port {
		return g.op("Convert", "opset1", []attr{{"destination_type", string(i32)}}, x.shape, i32, x)
	}
	concat := func(x, y port) port {
		return g.op("Concat", "opset1", []attr{{"axis", "0"}}, []int64{2}, i64, x, y)
	}
	scalar := func(x port) port { return b.reshape(x, []int64{}) }
	b.pa = &pagedSeq{
		first:       first,
		pastLens:    toI32(first),
		begins:      toI32(concat(zero, tokens)),
		blocks:      g.op("Range", "opset4", []attr{{"output_type", string(i32)}}, []int64{-1}, i32, g.scalarI64(0), scalar(nb), g.scalarI64(1)),
		blockBegins: toI32(concat(zero, nb)),
		maxLen:      toI32(scalar(end)),
		scale:       g.scalarF32(float32(1 / math.Sqrt(float64(D)))),
	}
	b.pa.unused = b.pagedUnused()
}

// pagedUnused are the operation's inputs ovrun leaves empty or 0.
func (b *decoderBuilder) pagedUnused() []port {
	g := b.g
	// Inputs 10 and 13-27, in order: sliding window (0: none), ALiBi
	// slopes, score aggregation window, rotated block indices, rotation
	// deltas, rotation table, xattention threshold, block size and stride,
	// sinks, adaptive RKV start size, evictable sizes, diversity block set
	// indices and begins, and two more index lists; empty or 0 = unused.
	i32s := func(shape []int64, v ...int32) port {
		data := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(data[4*i:], uint32(x))
		}
		return g.constBytes(i32, shape, data)
	}
	empty := []int64{0}
	return []port{
		i32s([]int64{}, 0),              // 10 sliding_window
		g.constF32(empty),               // 11 alibi_slopes
		i32s(empty),                     // 13 score_aggregation_window
		i32s(empty),                     // 14 rotated_block_indices
		i32s(empty),                     // 15 rotation_deltas
		g.constF32(empty),               // 16 rotation_trig_lut
		g.constF32(empty),               // 17 xattention_threshold
		i32s([]int64{}, 0),              // 18 xattention_block_size
		i32s([]int64{}, 0),              // 19 xattention_stride
		g.constF32([]int64{0, 0, 0, 0}), // 20 sinks
		i32s([]int64{}, 0),              // 21 adaptive_rkv_start_size
		i32s(empty),                     // 22 adaptive_rkv_evictable_sizes
		i32s(empty),                     // 23 adaptive_rkv_diversity_block_set_indices
		i32s(empty),                     // 24 adaptive_rkv_diversity_block_set_indices_begins
		i32s(empty),                     // 25
		g.constBytes(u8, empty, nil),    // 26
		i32s(empty),                     // 27
	}
}

// AttendsInKernel reports whether spec's graph over w attends through
// ovrun's Attend operation (ov/ext/layer_ops.cc) rather than OpenVINO's
// PagedAttentionExtension: a kernel graph's decode step (paged, one token
// of one sequence, an f32 or bf16 cache), over the same cache layout, so
// a prompt written by a prefill or shared graph's PagedAttention is read
// as it is. The plugin's PagedAttention node costs SmolLM2 about 20 us a
// layer before it reads a slot (0.6 of a 3.5 ms step at 8 live tokens);
// its kernels stay for chunks of many tokens.
//
// Such a graph takes its caches' addresses (KVTable), not the caches: as
// inputs with a dynamic block axis, an operation the plugin does not know
// gets its shapes inferred on every call (24 us a layer); declared
// static, the plugin reserves a buffer of the capacity's size for each
// (untouched, but in memory once transparent huge pages fill it: SmolLM2
// at capacity 4096 went from 168 to 338 MiB during its answer). The graph
// then serves one capacity, not every rung as other paged graphs do. An
// f16 cache stays with PagedAttention: Attend writes the cache in place,
// and the plugin hands an operation f16 inputs converted to f32.
func (w *Weights) AttendsInKernel(spec GraphSpec) bool {
	kv := spec.KVPrecision
	return w.format.Kernel() && spec.Attention == AttentionPaged && spec.Batch == 0 && spec.Chunk == 1 && !spec.DynamicTokens() &&
		(kv == "" || kv == "f32" || kv == "bf16")
}

// KernelStepTokens is the static token axis of a graph that attends
// through Attend, for weights of which a decode step reads stepBytes
// (Weights.StepBytes): a decode step is one real token of the axis
// (TokenCount), and a prompt goes through the same graph that many
// tokens a call, each call reading the weights once, with no second graph
// to compile. The padding costs the layer's small operations (norms,
// rotary, element-wise) the axis's rows instead of 1, about the same time
// whatever the weights (their rows are the hidden size); the products and
// the attention skip it. So the axis is 16 where reading the weights
// dwarfs that cost, 8 below kernelWideBytes. Measured on AVX2, a decode
// step of the graph with 16 against 8 (scripts/profile_ir.py): SmolLM2
// 135M (about 140 MB a step) 10% slower; the 0.5B shapes (526 MB) equal,
// and their 16-token prompt one call of 117 ms instead of two of 98.
func KernelStepTokens(stepBytes int64) int {
	if stepBytes >= kernelWideBytes {
		return 16
	}
	return 8
}

// kernelWideBytes is the decode step's weight reading from which a kernel
// decode graph takes 16 tokens a call (KernelStepTokens).
const kernelWideBytes = 256 << 20

// StepTokens is the most tokens one call of spec's graph over w takes:
// KernelStepTokens where it attends through Attend (AttendsInKernel),
// else the spec's chunk.
func (w *Weights) StepTokens(spec GraphSpec) int {
	if w.AttendsInKernel(spec) {
		return KernelStepTokens(w.StepBytes())
	}
	return spec.Chunk
}

// kernelAttend is AttendsInKernel for the graph being built.
func (b *decoderBuilder) kernelAttend() bool { return b.g.w.AttendsInKernel(b.spec) }

// batchInputs makes the sequence inputs graph inputs (a batched graph):
// the runtime binds every sequence's past length, token span and block
// table for each call. The positions stay an input of their own, as in
// every graph (the rotary embedding reads them).
func (b *decoderBuilder) batchInputs() {
	g := b.g
	D := int64(b.cfg.HeadDim())
	S := b.batch
	seqs := func(name string, n int64) port { return g.parameterUpTo(name, i32, []int64{-1}, []int64{n}) }
	b.pa = &pagedSeq{
		pastLens:    seqs(PastLens, S),
		begins:      seqs(SubsequenceBegins, S+1),
		blocks:      g.parameterUpTo(BlockIndices, i32, []int64{-1}, nil),
		blockBegins: seqs(BlockIndicesBegins, S+1),
		maxLen:      g.parameter(MaxContextLen, i32, []int64{}),
		scale:       g.scalarF32(float32(1 / math.Sqrt(float64(D)))),
	}
	b.pa.unused = b.pagedUnused()
}

// attendPaged is one layer's attention through PagedAttentionExtension:
// q [T, Nh, D] and k, v [T, Hkv, D] (rotary applied), and the layer's
// paged caches, which the operation also writes the chunk's K/V into.
func (b *decoderBuilder) attendPaged(layer int, q, k, v, cacheK, cacheV port) port {
	g, cfg := b.g, b.cfg
	T := b.T
	Nh, Hkv, D := int64(cfg.NumAttentionHeads), int64(cfg.KVHeads()), int64(cfg.HeadDim())
	pa := b.pa
	if b.kernelAttend() { // q, k, v are the projections' rows [1, T, n*D]; the caches are the table's
		return g.op("Attend", "ovrun", []attr{
			{"heads", fmt.Sprint(Nh)}, {"kv_heads", fmt.Sprint(Hkv)}, {"head_size", fmt.Sprint(D)},
			{"block", fmt.Sprint(PagedBlock)}, {"blocks", fmt.Sprint((b.C + PagedBlock - 1) / PagedBlock)},
			{"layer", fmt.Sprint(layer)}, {"cache_type", string(b.kv)},
		}, []int64{1, T, Nh * D}, f32, q, k, v, b.kvTable, pa.first, b.count) // [1, T, Nh*D]
	}
	inputs := []port{
		b.reshape(q, []int64{T, Nh * D}), b.reshape(k, []int64{T, Hkv * D}), b.reshape(v, []int64{T, Hkv * D}),
		cacheK, cacheV, pa.pastLens, pa.begins, pa.blocks, pa.blockBegins, pa.scale,
	}
	inputs = append(inputs, pa.unused[:2]...)
	inputs = append(inputs, pa.maxLen)
	inputs = append(inputs, pa.unused[2:]...)
	out := g.add("PagedAttentionExtension", "extension", "", []attr{
		{"write_kv_cache", "true"},
		{"num_k_heads", fmt.Sprint(Hkv)}, {"k_head_size", fmt.Sprint(D)},
		{"num_v_heads", fmt.Sprint(Hkv)}, {"v_head_size", fmt.Sprint(D)},
	}, inputs,
		port{shape: []int64{T, Nh * D}, et: f32}, // the attention
		port{shape: []int64{-1}, et: f32},        // scores (unused)
		port{shape: []int64{-1}, et: f32},        // diversity (unused)
	)[0]
	return b.reshape(out, []int64{1, T, Nh * D}) // [1, T, Nh*D]
}
