package model

import (
	"fmt"
	"math"
	"strconv"
)

// Graph I/O names. KV is explicit graph input and output owned by the
// runtime: the graph reads past K/V for every slot of its capacity and
// returns the K/V of the tokens it processed; the runtime writes those rows
// into its buffers at their positions.
const (
	InputIDs     = "input_ids"    // i64 [1, T]
	PositionIDs  = "position_ids" // i64 [1, T], consecutive, first = tokens already in the cache
	LogitsIndex  = "logits_index" // i64 [1], row of the chunk whose logits are returned (negative: none wanted, which a kernel graph then skips); [S] in a batched graph, one row per sequence
	OutputLogits = "logits"       // f32 [1, V]; [S, V] in a batched graph
	// KVTable replaces the past K/V inputs of a graph that attends through
	// ovrun's Attend (Weights.AttendsInKernel): u8 [layers*16], each
	// layer's K and V cache addresses, 8 bytes little-endian each, in the
	// paged layout of the graph's capacity. The runtime writes them when
	// it binds a cache, which must stay mapped while the graph runs.
	KVTable = "kv_table"
	// TokenCount is the number of real tokens in a call of a graph whose
	// static token axis is padded (Weights.StepTokens above the chunk):
	// i64 [1], 1 to the axis's length. The tokens after them are neither
	// multiplied nor attended nor written into the cache.
	TokenCount = "token_count"
)

// The scheduling inputs of a batched paged graph (GraphSpec.Batch), i32,
// as PagedAttentionExtension takes them, for S sequences whose tokens
// follow each other in input_ids.
const (
	PastLens           = "past_lens"            // [S]: tokens each sequence has in the pool before this call
	SubsequenceBegins  = "subsequence_begins"   // [S+1]: where each sequence's tokens start in input_ids, then T
	BlockIndices       = "block_indices"        // [N]: every sequence's block table, one after another
	BlockIndicesBegins = "block_indices_begins" // [S+1]: where each sequence's table starts in block_indices, then N
	MaxContextLen      = "max_context_len"      // []: the longest sequence's past plus its tokens
)

// PastKey, PastValue, PresentKey and PresentValue name layer i's KV I/O.
func PastKey(i int) string      { return fmt.Sprintf("past_key.%d", i) }
func PastValue(i int) string    { return fmt.Sprintf("past_value.%d", i) }
func PresentKey(i int) string   { return fmt.Sprintf("present_key.%d", i) }
func PresentValue(i int) string { return fmt.Sprintf("present_value.%d", i) }

// KV layout. Each layer's K and V cache is f32 [C, Hkv, D]: the capacity axis
// is outermost, so the cache of capacity C is exactly the first C*Hkv*D
// elements of any larger buffer with the same layout. A rung's KV can
// therefore be a prefix view of one reservation sized for the largest rung,
// and growing the context rebinds a longer view instead of copying.

// GraphSpec selects the static shapes of one graph.
type GraphSpec struct {
	Capacity int // KV slots the graph attends over (past tokens it can hold)
	Chunk    int // tokens processed per call: 1 for decode, >1 for prefill
	// Attention is the form of the attention over the past slots: ""
	// or AttentionStatic reads all Capacity slots, AttentionBounded only
	// the live prefix (LiveSlots). The compiler resolves AttentionAuto.
	Attention Attention
	// KVPrecision is the element type of the past and present K/V I/O:
	// "" or "f32", or "bf16" / "f16" to store the cache in the precision
	// a bf16 / f16 run's attention consumes (no per-step conversion of the
	// cache, half its memory). The graph computes in f32 either way.
	KVPrecision string
	// Shared makes the token axis dynamic: the graph takes 1 to Chunk
	// tokens per call, so one graph serves both a rung's prompt and its
	// decoding (prefill mode shared) and nothing is padded. It needs
	// bounded attention and a device that accepts dynamic shapes.
	Shared bool
	// Batch > 0 makes a batched paged graph (Attention paged, Shared):
	// one call carries the tokens of up to Batch sequences, 1 to Chunk
	// tokens in all, each sequence at most Capacity positions, and the
	// scheduling inputs are the graph's (BatchInputs): every sequence's
	// first position, token span and block table in one shared pool of
	// KV blocks of any size. The logits are one row per sequence, after
	// its last token. Continuous batching (package engine) runs on it.
	Batch int
}

// Name is a stable label such as "decode-c1024", "prefill-c1024-t64",
// "shared-c1024-t64", "batch-c1024-t256-s16" or "batch-static-c1024-s4".
func (s GraphSpec) Name() string {
	if s.StaticBatch() {
		return fmt.Sprintf("batch-static-c%d-s%d", s.Capacity, s.Batch)
	}
	if s.Batch > 0 {
		return fmt.Sprintf("batch-c%d-t%d-s%d", s.Capacity, s.Chunk, s.Batch)
	}
	if s.Shared {
		return fmt.Sprintf("shared-c%d-t%d", s.Capacity, s.Chunk)
	}
	if s.Chunk == 1 {
		return fmt.Sprintf("decode-c%d", s.Capacity)
	}
	return fmt.Sprintf("prefill-c%d-t%d", s.Capacity, s.Chunk)
}

// BuildIR emits the decoder as OpenVINO IR v11 XML whose constants live in w.
//
// Semantics of one call with T = spec.Chunk tokens at positions p..p+T-1:
// slots 0..p-1 of the past K/V inputs hold the earlier tokens; slots p.. are
// ignored (masked), whatever they contain. The outputs are the logits of
// token logits_index and the K/V rows of the T tokens, which the caller
// stores into slots p..p+T-1 before the next call. Tokens of a chunk padded
// past the prompt never influence earlier tokens (causal mask); their K/V rows
// are simply not stored. A shared graph (spec.Shared) takes any T from 1 to
// spec.Chunk and pads nothing.
func BuildIR(w *Weights, spec GraphSpec) ([]byte, error) {
	if spec.Capacity < 1 || spec.Chunk < 1 {
		return nil, fmt.Errorf("graph %s: capacity and chunk must be positive", spec.Name())
	}
	switch spec.Attention {
	case "", AttentionStatic, AttentionBounded, AttentionPaged:
	default:
		return nil, fmt.Errorf("graph %s: attention %q: want static, bounded or paged (auto is resolved by the compiler)", spec.Name(), spec.Attention)
	}
	if spec.StaticBatch() {
		if err := spec.checkStaticBatch(); err != nil {
			return nil, err
		}
	} else if spec.Batch > 0 && (spec.Attention != AttentionPaged || !spec.Shared) {
		return nil, fmt.Errorf("graph %s: a batched graph needs paged attention and a dynamic token axis (shared), or static attention and chunk 1", spec.Name())
	}
	if spec.Shared && spec.Attention != AttentionBounded && spec.Attention != AttentionPaged {
		return nil, fmt.Errorf("graph %s: a shared graph (1 to %d tokens per call) needs bounded or paged attention, not %q", spec.Name(), spec.Chunk, spec.Attention)
	}
	kv, err := kvElem(spec.KVPrecision)
	if err != nil {
		return nil, fmt.Errorf("graph %s: %w", spec.Name(), err)
	}
	forms, err := familyForms(w)
	if err != nil {
		return nil, fmt.Errorf("graph %s: %w", spec.Name(), err)
	}
	b := &decoderBuilder{spec: spec, g: newGraph(spec.Name(), w), cfg: w.Config(), forms: forms, kv: kv, C: int64(spec.Capacity), T: int64(spec.Chunk), maxT: int64(spec.Chunk), bounded: spec.Attention == AttentionBounded, paged: spec.Attention == AttentionPaged, batch: int64(spec.Batch)}
	if spec.DynamicTokens() {
		b.T = -1
	}
	if b.kernelAttend() { // a few tokens a call, padded, counted by TokenCount
		b.T = int64(w.StepTokens(spec))
		b.maxT = b.T
	}
	if spec.StaticBatch() { // one token per sequence, where a chunk's tokens stand
		b.T = b.batch
	}
	b.P = b.C
	b.build()
	if b.g.err != nil {
		return nil, fmt.Errorf("graph %s: %w", spec.Name(), b.g.err)
	}
	return b.g.XML(), nil
}

type decoderBuilder struct {
	spec GraphSpec
	g    *irGraph
	cfg  *Config
	C    int64 // capacity
	T    int64 // chunk length in shapes: the chunk, or -1 (dynamic) when shared
	// maxT is the most tokens a call takes (the spec's chunk).
	maxT int64
	// P is the past slots' dimension in shapes: C, or -1 (dynamic) when
	// bounded, where pastSlots holds it in the graph.
	P         int64
	bounded   bool
	paged     bool      // attention through PagedAttentionExtension (paged.go)
	pa        *pagedSeq // its sequence inputs, when paged
	batch     int64     // sequences per call of a batched graph (paged, or static: batch_static.go); 0: one
	kv        elem      // element type of the K/V I/O
	forms     forms     // what the model's family makes of the layers
	pastSlots port      // [1]: the past slots bound
	tokens    port      // [1]: the chunk's length, when it is dynamic

	kvTable port // u8 [layers*16]: the caches' addresses (KVTable), when kernelAttend
	count   port // i64 [1]: the real tokens of the padded chunk (TokenCount), when kernelAttend

	cos, sin port // [1, T, 1, D]; [T, D/2] in a kernel graph (layerOps)
	mask     port // [T, P+T] additive f32
}

func (b *decoderBuilder) build() {
	g, cfg := b.g, b.cfg
	V, H := int64(cfg.VocabSize), int64(cfg.HiddenSize)
	Hkv, D := int64(cfg.KVHeads()), int64(cfg.HeadDim())
	tokens := func(name string) port { return g.parameter(name, i64, []int64{1, b.T}) }
	if b.T < 0 {
		tokens = func(name string) port { return g.parameterUpTo(name, i64, []int64{1, b.T}, []int64{1, b.maxT}) }
	}
	ids, pos := tokens(InputIDs), tokens(PositionIDs) // [1, T] each
	var li port                                       // [1], or [S] in a batched graph: each sequence's last token
	switch {
	case b.staticBatch(): // every token's row is returned
	case b.batch > 0:
		li = g.parameterUpTo(LogitsIndex, i64, []int64{-1}, []int64{b.batch})
	default:
		li = g.parameter(LogitsIndex, i64, []int64{1})
	}
	past := make([][2]port, cfg.NumHiddenLayers)
	if b.kernelAttend() { // the caches' addresses: Weights.AttendsInKernel says why
		b.kvTable = g.parameter(KVTable, u8, []int64{int64(16 * cfg.NumHiddenLayers)})
		b.count = g.parameter(TokenCount, i64, []int64{1})
	}
	for i := range past {
		if b.kernelAttend() {
			continue
		}
		if b.paged {
			// The paged layout, declared 1..C/PagedBlock blocks: the
			// runtime binds the whole capacity once, and the operation
			// reads the blocks its sequence inputs name.
			nb := (b.C + PagedBlock - 1) / PagedBlock
			shape, upTo := []int64{-1, Hkv, PagedBlock, D}, []int64{nb, Hkv, PagedBlock, D}
			if b.batch > 0 { // a pool of any size, shared by the batch's sequences
				upTo = nil
			}
			past[i][0] = g.parameterUpTo(PastKey(i), b.kv, shape, upTo)   // [C/B, Hkv, B, D]
			past[i][1] = g.parameterUpTo(PastValue(i), b.kv, shape, upTo) // [C/B, Hkv, B, D]
			continue
		}
		if b.bounded {
			// Declared 1..C slots: the runtime binds the live prefix
			// (LiveSlots), and the plugin keeps no C-slot buffer of
			// its own per input.
			shape, upTo := []int64{-1, Hkv, D}, []int64{b.C, Hkv, D}
			past[i][0] = g.parameterUpTo(PastKey(i), b.kv, shape, upTo)   // [C, Hkv, D]
			past[i][1] = g.parameterUpTo(PastValue(i), b.kv, shape, upTo) // [C, Hkv, D]
			continue
		}
		if b.staticBatch() { // the batch's caches back to back
			past[i][0] = g.parameter(PastKey(i), b.kv, []int64{b.batch * b.C, Hkv, D})   // [B*C, Hkv, D]
			past[i][1] = g.parameter(PastValue(i), b.kv, []int64{b.batch * b.C, Hkv, D}) // [B*C, Hkv, D]
			continue
		}
		past[i][0] = g.parameter(PastKey(i), b.kv, []int64{b.C, Hkv, D})   // [C, Hkv, D]
		past[i][1] = g.parameter(PastValue(i), b.kv, []int64{b.C, Hkv, D}) // [C, Hkv, D]
	}

	if b.T < 0 {
		shape := g.op("ShapeOf", "opset3", []attr{{"output_type", "i64"}}, []int64{2}, i64, ids)                                            // [2]
		b.tokens = g.op("Gather", "opset8", []attr{{"batch_dims", "0"}}, []int64{1}, i64, shape, g.constI64([]int64{1}, 1), g.scalarI64(0)) // [1] = T
	}
	b.rotary(pos)
	if b.bounded {
		b.P = -1
	}
	switch {
	case b.staticBatch():
		b.staticBatchMask(pos)
	case b.batch > 0:
		b.batchInputs()
	case b.paged:
		b.pagedInputs(pos)
	default:
		b.attentionMask(pos, past[0][0])
	}

	x, ok := g.kernelGather("model.embed_tokens.weight", ids, []int64{1, b.T, H}) // [1, T, H]
	if !ok {
		emb := g.weight("model.embed_tokens.weight")                                                                 // [V, H]
		x = g.op("Gather", "opset8", []attr{{"batch_dims", "0"}}, []int64{1, b.T, H}, f32, emb, ids, g.scalarI64(0)) // [1, T, H]
	}
	if b.forms.embedding == EmbedSqrtHidden {
		x = b.mul(x, g.scalarF32(float32(math.Sqrt(float64(H)))), x.shape) // [1, T, H]
	}
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		if b.paged { // the operation reads the cache in its own precision
			x = b.layer(i, x, past[i][0], past[i][1])
			continue
		}
		x = b.layer(i, x, b.pastF32(past[i][0]), b.pastF32(past[i][1]))
	}
	x = b.rmsNorm(x, "model.norm.weight") // [1, T, H]
	if b.staticBatch() {
		logits := b.linear(b.reshape(x, []int64{b.T, H}), "lm_head.weight", V) // [B, V]
		g.result(OutputLogits, logits)
		return
	}
	rows := int64(1)
	if b.batch > 0 {
		rows = -1 // S
	}
	last := g.op("Gather", "opset8", []attr{{"batch_dims", "0"}}, []int64{1, rows, H}, f32, x, li, g.scalarI64(1)) // [1, S, H]
	last = b.reshape(last, []int64{rows, H})                                                                       // [S, H]
	// A prompt's calls before its last want no logits: one sequence's
	// kernel lm_head multiplies index+1 rows, none when the index is
	// negative (18% of SmolLM2's weights, read for nothing).
	logits, ok := port{}, false
	if b.batch == 0 {
		want := b.add(li, g.constI64([]int64{1}, 1), []int64{1})                    // [1]: 1, or 0 for none
		logits, ok = g.kernelLinear(last, "lm_head.weight", []int64{rows, V}, want) // [1, V]
	}
	if !ok {
		logits = b.linear(last, "lm_head.weight", V) // [S, V]
	}
	g.result(OutputLogits, logits)
}

// rotary computes cos and sin of the HF rotary embedding for the chunk's
// positions from small tables, so the angles are exact whatever precision
// the device computes in: position p is written in base 64, p = sum of
// d_k 64^k, and the angle-addition formulas combine cos and sin of each
// digit's angle d_k 64^k f, looked up by integer index in a [64, D/2]
// table computed in float64 (the same bytes for every graph). Computing
// the angle p f in the graph would let a bf16 device round it (bf16 holds
// integers exactly only up to 256; the CPU plugin did so once the K/V
// outputs were bf16, and SmolLM2's logits after 512 tokens moved by 7).
func (b *decoderBuilder) rotary(pos port) {
	g := b.g
	D := int64(b.cfg.HeadDim())
	const base = 64
	inv := make([]float64, D/2)
	for j := range inv {
		inv[j] = 1 / math.Pow(b.cfg.Theta(), float64(2*j)/float64(D))
	}
	half := []int64{b.T, D / 2}
	table := func(scale float64, f func(float64) float64) port {
		v := make([]float32, base*D/2)
		for d := int64(0); d < base; d++ {
			for j := range inv {
				v[d*D/2+int64(j)] = float32(f(float64(d) * scale * inv[j]))
			}
		}
		return g.constF32([]int64{base, D / 2}, v...) // [64, D/2]
	}
	look := func(t, idx port) port {
		return g.op("Gather", "opset8", []attr{{"batch_dims", "0"}}, half, f32, t, idx, g.scalarI64(0)) // [T, D/2]
	}
	sub := func(x, y port) port {
		return g.op("Subtract", "opset1", []attr{{"auto_broadcast", "numpy"}}, half, f32, x, y) // [T, D/2]
	}
	rest := b.reshape(pos, []int64{b.T}) // [T] i64
	var cos, sin port
	// Every position a (padded) chunk can have is below C+T.
	for k, scale := 0, 1.0; k == 0 || scale < float64(b.C+b.maxT); k, scale = k+1, scale*base {
		d := g.op("FloorMod", "opset1", []attr{{"auto_broadcast", "numpy"}}, []int64{b.T}, i64, rest, g.scalarI64(base)) // [T] digit k
		c, s := look(table(scale, math.Cos), d), look(table(scale, math.Sin), d)                                         // [T, D/2]
		if k == 0 {
			cos, sin = c, s
		} else {
			cos, sin = sub(b.mul(cos, c, half), b.mul(sin, s, half)), b.add(b.mul(sin, c, half), b.mul(cos, s, half), half) // [T, D/2]
		}
		rest = g.op("Divide", "opset1", []attr{{"auto_broadcast", "numpy"}, {"m_pythondiv", "true"}}, []int64{b.T}, i64, rest, g.scalarI64(base)) // [T]
	}
	if b.layerOps() {
		b.cos, b.sin = cos, sin // [T, D/2]
		return
	}
	b.cos = b.reshape(g.op("Concat", "opset1", []attr{{"axis", "1"}}, []int64{b.T, D}, f32, cos, cos), []int64{1, b.T, 1, D}) // [1, T, 1, D]
	b.sin = b.reshape(g.op("Concat", "opset1", []attr{{"axis", "1"}}, []int64{b.T, D}, f32, sin, sin), []int64{1, b.T, 1, D}) // [1, T, 1, D]
}

// attentionMask builds the additive mask over the P past slots followed by
// the T chunk tokens: query t sees key j when key j's position is at most
// t's, and a past slot counts only when it lies below the chunk's first
// position (slots at or past it are unused capacity).
func (b *decoderBuilder) attentionMask(pos, pastKey port) {
	g := b.g
	P, T, K := b.P, b.T, b.keys()
	shape := g.op("ShapeOf", "opset3", []attr{{"output_type", "i64"}}, []int64{3}, i64, pastKey)                                     // [3]
	past := g.op("Gather", "opset8", []attr{{"batch_dims", "0"}}, []int64{}, i64, shape, g.scalarI64(0), g.scalarI64(0))             // [] = P
	b.pastSlots = b.reshape(past, []int64{1})                                                                                        // [1]
	slots := g.op("Range", "opset4", []attr{{"output_type", "i64"}}, []int64{P}, i64, g.scalarI64(0), past, g.scalarI64(1))          // [P]
	qpos := b.reshape(pos, []int64{T})                                                                                               // [T]
	start := g.op("Gather", "opset8", []attr{{"batch_dims", "0"}}, []int64{1}, i64, qpos, g.constI64([]int64{1}, 0), g.scalarI64(0)) // [1]
	live := g.op("Less", "opset1", []attr{{"auto_broadcast", "numpy"}}, []int64{P}, boolean, slots, start)                           // [P]
	never := g.constI64([]int64{1}, math.MaxInt64)                                                                                   // [1]
	kpast := g.op("Select", "opset1", []attr{{"auto_broadcast", "numpy"}}, []int64{P}, i64, live, slots, never)                      // [P]
	kpos := g.op("Concat", "opset1", []attr{{"axis", "0"}}, []int64{K}, i64, kpast, qpos)                                            // [P+T]
	kpos = b.reshape(kpos, []int64{1, K})                                                                                            // [1, P+T]
	q := b.reshape(qpos, []int64{T, 1})                                                                                              // [T, 1]
	see := g.op("LessEqual", "opset1", []attr{{"auto_broadcast", "numpy"}}, []int64{T, K}, boolean, kpos, q)                         // [T, P+T]
	b.mask = g.op("Select", "opset1", []attr{{"auto_broadcast", "numpy"}}, []int64{T, K}, f32, see,
		g.scalarF32(0), g.scalarF32(float32(math.Inf(-1)))) // [T, P+T]
}

// layer is one pre-norm decoder block; it emits the chunk's K/V as outputs
// (a paged graph stores them into its caches instead).
func (b *decoderBuilder) layer(i int, x, pastK, pastV port) port {
	g, cfg := b.g, b.cfg
	T := b.T
	H := int64(cfg.HiddenSize)
	Nh, Hkv, D := int64(cfg.NumAttentionHeads), int64(cfg.KVHeads()), int64(cfg.HeadDim())
	pre := fmt.Sprintf("model.layers.%d.", i)

	qkvNames, gateUpNames := layerProjections(i)
	h := b.rmsNorm(x, pre+"input_layernorm.weight")                               // [1, T, H]
	qkv := b.projs(h, qkvNames, []int64{Nh * D, Hkv * D, Hkv * D}, cfg.QKVBias()) // [1, T, Nh*D], 2 x [1, T, Hkv*D]
	q, k, v := qkv[0], qkv[1], qkv[2]
	if b.paged && b.layerOps() { // rotated as the projections' rows, which the operation takes
		q, k = b.rope(q), b.rope(k) // [1, T, Nh*D], [1, T, Hkv*D]
	} else {
		q = b.rope(b.reshape(q, []int64{T, Nh, D}))  // [T, Nh, D]
		k = b.rope(b.reshape(k, []int64{T, Hkv, D})) // [T, Hkv, D]
		v = b.reshape(v, []int64{T, Hkv, D})         // [T, Hkv, D]
	}

	if !b.paged { // a paged graph's attention writes k and v into the caches itself
		g.result(PresentKey(i), b.toKV(k))
		g.result(PresentValue(i), b.toKV(v))
	}
	var att port
	switch {
	case b.paged:
		att = b.attendPaged(i, q, k, v, pastK, pastV) // [1, T, Nh*D]
	case b.staticBatch():
		att = b.attendBatchStatic(q, k, v, pastK, pastV) // [1, B, Nh*D]
	case T == 1 || b.T < 0:
		att = b.attendRows(q, k, v, pastK, pastV) // [1, T, Nh*D]
	default:
		att = b.attendSDPA(q, k, v, pastK, pastV) // [1, T, Nh*D]
	}
	o := b.proj(att, pre+"self_attn.o_proj", H, cfg.OProjBias()) // [1, T, H]
	x = b.add(x, o, []int64{1, T, H})                            // [1, T, H]

	h = b.rmsNorm(x, pre+"post_attention_layernorm.weight") // [1, T, H]
	I := int64(cfg.IntermediateSize)
	gu := b.projs(h, gateUpNames, []int64{I, I}, cfg.MLPBiases()) // 2 x [1, T, I]
	gate, up := gu[0], gu[1]
	act := b.activation(gate)                                  // [1, T, I]
	m := b.mul(act, up, []int64{1, T, I})                      // [1, T, I]
	down := b.proj(m, pre+"mlp.down_proj", H, cfg.MLPBiases()) // [1, T, H]
	return b.add(x, down, []int64{1, T, H})                    // [1, T, H]
}

// activation is the MLP's gate activation of the family.
func (b *decoderBuilder) activation(gate port) port {
	if b.forms.activation == ActGELUTanh {
		return b.g.op("Gelu", "opset7", []attr{{"approximation_mode", "TANH"}}, gate.shape, f32, gate) // [.., I]
	}
	return b.g.op("Swish", "opset4", nil, gate.shape, f32, gate) // [.., I]
}

// attendSDPA is attention over the past slots and the chunk as one
// ScaledDotProductAttention: the cache and the chunk's K/V are concatenated
// and put heads-first, which copies the whole cache of the layer. Prefill
// chunks amortize that copy over their tokens, and SDPA's kernels do the
// most work per byte there.
func (b *decoderBuilder) attendSDPA(q, k, v, pastK, pastV port) port {
	g, cfg := b.g, b.cfg
	T, K := b.T, b.keys()
	Nh, Hkv, D := int64(cfg.NumAttentionHeads), int64(cfg.KVHeads()), int64(cfg.HeadDim())
	G := Nh / Hkv
	kall := g.op("Concat", "opset1", []attr{{"axis", "0"}}, []int64{K, Hkv, D}, f32, pastK, k) // [P+T, Hkv, D]
	vall := g.op("Concat", "opset1", []attr{{"axis", "0"}}, []int64{K, Hkv, D}, f32, pastV, v) // [P+T, Hkv, D]
	kall = b.unsqueeze(b.transpose(kall, []int64{1, 0, 2}), 1)                                 // [Hkv, 1, P+T, D]
	vall = b.unsqueeze(b.transpose(vall, []int64{1, 0, 2}), 1)                                 // [Hkv, 1, P+T, D]
	qh := b.transpose(b.reshape(q, []int64{T, Hkv, G, D}), []int64{1, 2, 0, 3})                // [Hkv, G, T, D]
	scale := g.scalarF32(float32(1 / math.Sqrt(float64(D))))
	att := g.op("ScaledDotProductAttention", "opset13", []attr{{"causal", "false"}},
		[]int64{Hkv, G, T, D}, f32, qh, kall, vall, b.mask, scale) // [Hkv, G, T, D]
	att = b.transpose(att, []int64{2, 0, 1, 3})  // [T, Hkv, G, D]
	return b.reshape(att, []int64{1, T, Nh * D}) // [1, T, Nh*D]
}

// attendRows is the same attention computed on the cache in its own layout:
// each past K/V input, [P, Hkv, D] (P = C, or the live prefix when
// bounded), is read as the matrix [P, Hkv*D] (a reshape, no copy) by two MatMuls, so a decode step reads every slot once
// and writes no copy of the cache. Grouped-query heads are handled with a
// block-diagonal query: query head n keeps its D values in the columns of
// its KV head n/G and zeros elsewhere, so q x K^T gives every head's scores
// against its own KV head, and of the product P x V a Gather keeps, per
// head, the block of its KV head (a mask and a sum over the KV heads read
// Hkv times as much: 10% of a 128-token chunk of the synthetic small). This
// costs Hkv times the multiply-adds of a per-head product, nothing next to
// reading the cache when T is 1.
func (b *decoderBuilder) attendRows(q, k, v, pastK, pastV port) port {
	g, cfg := b.g, b.cfg
	T, P, K := b.T, b.P, b.keys()
	Nh, Hkv, D := int64(cfg.NumAttentionHeads), int64(cfg.KVHeads()), int64(cfg.HeadDim())
	G, KD, R := Nh/Hkv, Hkv*D, T*Nh
	if T < 0 {
		R = -1
	}
	// scaled[n, h] is 1/sqrt(D) where query head n reads KV head h, and
	// own[n] = n*Hkv + h indexes that block among the Nh x Hkv blocks of
	// D values an output row holds.
	scaled, own := make([]float32, Nh*Hkv), make([]int64, Nh)
	for n := int64(0); n < Nh; n++ {
		scaled[n*Hkv+n/G] = float32(1 / math.Sqrt(float64(D)))
		own[n] = n*Hkv + n/G
	}
	selq := g.constF32([]int64{1, Nh, Hkv, 1}, scaled...)                         // [1, Nh, Hkv, 1]
	qb := b.mul(b.reshape(q, []int64{T, Nh, 1, D}), selq, []int64{T, Nh, Hkv, D}) // [T, Nh, Hkv, D]
	qb = b.reshape(qb, []int64{R, KD})                                            // [T*Nh, Hkv*D]
	kp := b.reshape(pastK, []int64{P, KD})                                        // [P, Hkv*D]
	vp := b.reshape(pastV, []int64{P, KD})                                        // [P, Hkv*D]
	kn := b.reshape(k, []int64{T, KD})                                            // [T, Hkv*D]
	vn := b.reshape(v, []int64{T, KD})                                            // [T, Hkv*D]
	s := g.op("Concat", "opset1", []attr{{"axis", "1"}}, []int64{R, K}, f32,
		b.matmulT(qb, kp, []int64{R, P}), b.matmulT(qb, kn, []int64{R, T})) // [T*Nh, P+T]
	s = b.add(b.reshapeTo(s, []int64{T, Nh, K}), b.unsqueeze(b.mask, 1), []int64{T, Nh, K}) // [T, Nh, P+T]
	p := g.op("Softmax", "opset8", []attr{{"axis", "-1"}}, []int64{T, Nh, K}, f32, s)       // [T, Nh, P+T]
	p = b.reshapeTo(p, []int64{R, K})                                                       // [T*Nh, P+T]
	parts := g.add("VariadicSplit", "opset1", "", nil, []port{p, g.scalarI64(1), b.splitLengths()},
		port{shape: []int64{R, P}, et: f32}, port{shape: []int64{R, T}, et: f32}) // [T*Nh, P], [T*Nh, T]
	o := b.add(b.matmul(parts[0], vp, []int64{R, KD}), b.matmul(parts[1], vn, []int64{R, KD}), []int64{R, KD}) // [T*Nh, Hkv*D]
	o = b.reshape(o, []int64{T, Nh * Hkv, D})                                                                  // [T, Nh*Hkv, D]
	o = g.op("Gather", "opset8", []attr{{"batch_dims", "0"}}, []int64{T, Nh, D}, f32, o,
		g.constI64([]int64{Nh}, own...), g.scalarI64(1)) // [T, Nh, D]: each head's own block
	return b.reshape(o, []int64{1, T, Nh * D}) // [1, T, Nh*D]
}

// reshapeTo reshapes x to shape, whose dynamic dimensions (-1) are among
// the chunk's tokens T, T*Nh rows and the attended keys K: a constant
// target where at most one is dynamic, else one computed from the graph's
// dimensions.
func (b *decoderBuilder) reshapeTo(x port, shape []int64) port {
	dynamic := 0
	for _, d := range shape {
		if d < 0 {
			dynamic++
		}
	}
	if dynamic <= 1 {
		return b.reshape(x, shape)
	}
	g := b.g
	keys := b.add(b.pastSlots, b.tokens, []int64{1}) // [1] = P+T
	dims := make([]port, len(shape))
	for i, d := range shape {
		switch {
		case d >= 0:
			dims[i] = g.constI64([]int64{1}, d)
		case i == len(shape)-1:
			dims[i] = keys
		case i == 0 && len(shape) == 3:
			dims[i] = b.tokens
		default:
			dims[i] = g.constI64([]int64{1}, -1)
		}
	}
	target := g.op("Concat", "opset1", []attr{{"axis", "0"}}, []int64{int64(len(shape))}, i64, dims...)
	return g.op("Reshape", "opset1", []attr{{"special_zero", "false"}}, shape, x.et, x, target)
}

// splitLengths is [P, T], the past slots and the chunk's tokens of the
// attended keys: a constant where at most one of them is dynamic, computed
// from the live prefix and the chunk's length where both are.
func (b *decoderBuilder) splitLengths() port {
	if b.P >= 0 || b.T >= 0 {
		return b.g.constI64([]int64{2}, b.P, b.T)
	}
	return b.g.op("Concat", "opset1", []attr{{"axis", "0"}}, []int64{2}, i64, b.pastSlots, b.tokens)
}

// rope applies the rotary embedding to x [T, heads, D]: x*cos +
// rotate_half(x)*sin, as ovrun's RoPE in a kernel graph (which takes x as
// rows of whole heads in any shape, [1, T, heads*D] too), else written in the rank-4 form the CPU plugin fuses into
// one RoPE node (its GPT-NeoX pattern: VariadicSplit on the last axis, the
// second half multiplied by -1, Concat): SmolLM2's decode graph runs 60
// RoPE nodes instead of 90 Splits, 60 Concats and 120 more fused
// Subgraphs, a decode step about 5-10% faster (docs/design.md).
func (b *decoderBuilder) rope(x port) port {
	g := b.g
	s := x.shape
	if b.layerOps() {
		return g.op("RoPE", "ovrun", []attr{{"head_size", fmt.Sprint(b.cfg.HeadDim())}}, s, f32, x, b.cos, b.sin) // x's shape
	}
	s4 := []int64{1, s[0], s[1], s[2]}
	half := []int64{1, s[0], s[1], s[2] / 2}
	x4 := b.unsqueeze(x, 0) // [1, T, heads, D]
	parts := g.add("VariadicSplit", "opset1", "", nil, []port{x4, g.scalarI64(3), g.constI64([]int64{2}, s[2]/2, s[2]/2)},
		port{shape: half, et: f32}, port{shape: half, et: f32}) // 2 x [1, T, heads, D/2]
	neg := b.mul(parts[1], g.scalarF32(-1), half)                                   // [1, T, heads, D/2]
	rot := g.op("Concat", "opset1", []attr{{"axis", "-1"}}, s4, f32, neg, parts[0]) // [1, T, heads, D]
	y := b.add(b.mul(x4, b.cos, s4), b.mul(rot, b.sin, s4), s4)                     // [1, T, heads, D]
	return b.reshape(y, s)                                                          // [T, heads, D]
}

// layerOps reports whether the graph normalizes and rotates through ovrun's
// RMSNorm and RoPE operations (ov/ext/layer_ops.cc), one node each instead
// of the 7 and 8 opset nodes the CPU plugin's compile matches back into
// its own: in kernel graphs, whose library (which has them) every compile
// of one requires.
func (b *decoderBuilder) layerOps() bool { return b.g.w.format.Kernel() }

// rmsNorm is x / sqrt(mean(x^2) + eps) * weight over the last axis, or
// * (1 + weight) in the family's NormOnePlusWeight form (1 + weight is a
// constant expression the plugin folds).
func (b *decoderBuilder) rmsNorm(x port, weight string) port {
	g := b.g
	s := x.shape
	if b.layerOps() {
		w := g.weight(weight) // [H]
		if b.forms.norm == NormOnePlusWeight {
			w = b.add(w, g.scalarF32(1), w.shape) // [H]
		}
		return g.op("RMSNorm", "ovrun", []attr{{"eps", strconv.FormatFloat(b.cfg.RMSNormEps, 'g', -1, 32)}}, s, f32, x, w) // [.., H]
	}
	red := append(append([]int64{}, s[:len(s)-1]...), 1)
	sq := b.mul(x, x, s)                                                                                          // [.., H]
	mean := g.op("ReduceMean", "opset1", []attr{{"keep_dims", "true"}}, red, f32, sq, g.constI64([]int64{1}, -1)) // [.., 1]
	mean = b.add(mean, g.scalarF32(float32(b.cfg.RMSNormEps)), red)                                               // [.., 1]
	rms := g.op("Sqrt", "opset1", nil, red, f32, mean)                                                            // [.., 1]
	n := g.op("Divide", "opset1", []attr{{"auto_broadcast", "numpy"}, {"m_pythondiv", "true"}}, s, f32, x, rms)   // [.., H]
	w := g.weight(weight)                                                                                         // [H]
	if b.forms.norm == NormOnePlusWeight {
		w = b.add(w, g.scalarF32(1), w.shape) // [H]
	}
	return b.mul(n, w, s) // [.., H]
}

// proj is x @ W^T (+ bias) for the HF linear layer named prefix.
func (b *decoderBuilder) proj(x port, prefix string, out int64, bias bool) port {
	y := b.linear(x, prefix+".weight", out)
	if bias {
		y = b.add(y, b.g.weight(prefix+".bias"), y.shape)
	}
	return y
}

// projs are the HF linear layers named prefixes over the same input x, with
// outs outputs each: one matrix product and a split where the weights are
// stored as one matrix (Weights.Fused), else one product each.
func (b *decoderBuilder) projs(x port, prefixes []string, outs []int64, bias bool) []port {
	fused := b.g.w.Fused(weightNames(prefixes)...)
	if fused == "" {
		ys := make([]port, len(prefixes))
		for i, p := range prefixes {
			ys[i] = b.proj(x, p, outs[i], bias)
		}
		return ys
	}
	var total int64
	shapes := make([]port, len(outs))
	for i, o := range outs {
		total += o
		shapes[i] = port{shape: b.lastDim(x, o), et: f32}
	}
	y := b.linear(x, fused, total) // [.., sum of outs]
	if bias {
		// One bias add before the split, of the biases concatenated (a
		// constant the plugin folds): the plugin takes it into the fused
		// product as its bias, where one add per split part would stay
		// separate nodes, each a per-call cost in a shared graph.
		bs := make([]port, len(prefixes))
		for i, p := range prefixes {
			bs[i] = b.g.weight(p + ".bias")
		}
		cat := b.g.op("Concat", "opset1", []attr{{"axis", "0"}}, []int64{total}, f32, bs...) // [sum of outs]
		y = b.add(y, cat, y.shape)
	}
	return b.g.add("VariadicSplit", "opset1", "", nil, []port{y, b.g.scalarI64(-1), b.g.constI64([]int64{int64(len(outs))}, outs...)}, shapes...)
}

// linear is x @ W^T for the weight named (a checkpoint tensor or a Fused
// group) with out rows. A weight stored with a minimum per group of G
// inputs (w = q*scale + min) adds groupsums(x) @ min^T, the sums of x over
// each group, so both products read the file's values exactly; the CPU
// plugin runs q*scale without a zero point much faster than with a float
// one (scripts/weight_forms.py), in every graph: a batched one (SmolLM2
// Q4_1, a step of 8 sequences 29.6 -> 15.1 ms, of one 9.7 -> 9.3 ms;
// BenchmarkBatchedDecode) and a single sequence's shared one too, whose
// extra nodes cost less per call than the zero-point kernel (SmolLM2 Q4_1
// bf16, shared-c1024-t512: a step 12.1 -> 10.8 ms, a 16-token prompt
// 0.040 -> 0.020 s; docs/benchmarks.md "Ready").
func (b *decoderBuilder) linear(x port, name string, out int64) port {
	g := b.g
	s := b.lastDim(x, out)
	var real []port // the padded chunk's real tokens, which alone the kernel multiplies
	if b.kernelAttend() {
		real = append(real, b.count)
	}
	if y, ok := g.kernelLinear(x, name, s, real...); ok {
		return y
	}
	y := b.matmulT(x, g.weight(name), s) // [.., out]
	if m, G, ok := g.weightMin(name); ok {
		in := x.shape[len(x.shape)-1]
		keep := make([]int64, len(x.shape)+1) // 0: the input's dimension
		keep[len(x.shape)-1], keep[len(x.shape)] = in/G, G
		groups := g.op("Reshape", "opset1", []attr{{"special_zero", "true"}}, append(b.lastDim(x, in/G), G), x.et,
			x, g.constI64([]int64{int64(len(keep))}, keep...)) // [.., in/G, G]
		sums := g.op("ReduceSum", "opset1", []attr{{"keep_dims", "false"}}, b.lastDim(x, in/G), f32, groups, g.constI64([]int64{1}, -1)) // [.., in/G]
		y = b.add(y, b.matmulT(sums, m, s), s)                                                                                           // [.., out]
	}
	return y
}

// lastDim is x's shape with the last dimension n.
func (b *decoderBuilder) lastDim(x port, n int64) []int64 {
	return append(append([]int64{}, x.shape[:len(x.shape)-1]...), n)
}

func (b *decoderBuilder) matmulT(x, w port, shape []int64) port {
	return b.g.op("MatMul", "opset1", []attr{{"transpose_a", "false"}, {"transpose_b", "true"}}, shape, f32, x, w)
}

func (b *decoderBuilder) matmul(x, w port, shape []int64) port {
	return b.g.op("MatMul", "opset1", []attr{{"transpose_a", "false"}, {"transpose_b", "false"}}, shape, f32, x, w)
}

func (b *decoderBuilder) add(x, y port, shape []int64) port {
	return b.g.op("Add", "opset1", []attr{{"auto_broadcast", "numpy"}}, shape, x.et, x, y)
}

func (b *decoderBuilder) mul(x, y port, shape []int64) port {
	return b.g.op("Multiply", "opset1", []attr{{"auto_broadcast", "numpy"}}, shape, x.et, x, y)
}

func (b *decoderBuilder) reshape(x port, shape []int64) port {
	return b.g.op("Reshape", "opset1", []attr{{"special_zero", "false"}}, shape, x.et, x, b.g.constI64([]int64{int64(len(shape))}, shape...))
}

func (b *decoderBuilder) transpose(x port, order []int64) port {
	shape := make([]int64, len(order))
	for i, o := range order {
		shape[i] = x.shape[o]
	}
	return b.g.op("Transpose", "opset1", nil, shape, x.et, x, b.g.constI64([]int64{int64(len(order))}, order...))
}

func (b *decoderBuilder) unsqueeze(x port, axis int64) port {
	shape := append(append(append([]int64{}, x.shape[:axis]...), 1), x.shape[axis:]...)
	return b.g.op("Unsqueeze", "opset1", nil, shape, x.et, x, b.g.scalarI64(axis))
}
