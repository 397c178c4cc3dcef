// Package runtime decodes sequences across a ladder of compiled context
// capacities. It is pure Go: it sees a compiler only through the Compiler
// and Executable interfaces below (and the optional capabilities after
// them); the OpenVINO implementation is runtime/ovexec, wired in by the
// commands, and the tests use a pure-Go fake.
//
// A CompiledLadder owns the compiled rungs, their compile schedule and
// budgets, and frees the rungs no sequence needs any more; a Sequence owns
// one generation's KV store, positions, tokens and boundary switches. One
// ladder serves many sequences; Run is one sequence on one ladder. See
// docs/design.md for the data flow of a token and of a compile.
package runtime

import (
	"context"
	"errors"
	goruntime "runtime"
	"strings"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/model"
)

// ErrCapacity reports tokens that do not fit the capacity they were given.
var ErrCapacity = errors.New("context capacity exceeded")

// KVShape is the per-layer cache geometry: [capacity, KVHeads, HeadDim]
// elements of ElemBytes (4: f32, 2: bf16 or f16; 0 means 4) for each
// layer's K and V, or with Block > 1 the paged layout [capacity/Block,
// KVHeads, Block, HeadDim] (model.AttentionPaged), the capacity rounded up
// to whole blocks. Either way the slot axis (rows, or blocks of them) is
// outermost, so a smaller capacity's cache is a prefix of a larger one's.
type KVShape struct {
	Layers    int
	KVHeads   int
	HeadDim   int
	ElemBytes int
	Block     int
}

// ShapeOf derives the f32 cache geometry of a model. A compiler may store
// the cache narrower (ovexec.Compiler.KVShape).
func ShapeOf(cfg *model.Config) KVShape {
	return KVShape{Layers: cfg.NumHiddenLayers, KVHeads: cfg.KVHeads(), HeadDim: cfg.HeadDim(), ElemBytes: 4}
}

// RowBytes is the size of one token's K (or V) in one layer.
func (s KVShape) RowBytes() int {
	e := s.ElemBytes
	if e == 0 {
		e = 4
	}
	return s.KVHeads * s.HeadDim * e
}

// TokenBytes is the size of one token's K and V across all layers.
func (s KVShape) TokenBytes() int64 { return int64(2 * s.Layers * s.RowBytes()) }

// Slots is tokens rounded up to whole blocks: the slots a cache holding
// tokens (or of that capacity) spans.
func (s KVShape) Slots(tokens int) int {
	if s.Block <= 1 {
		return tokens
	}
	return (tokens + s.Block - 1) / s.Block * s.Block
}

// LayerBytes is the size of one layer's K (or V) of a cache of capacity
// slots, or the prefix of a cache that holds its first capacity tokens.
func (s KVShape) LayerBytes(capacity int) int { return s.Slots(capacity) * s.RowBytes() }

// BufferBytes is the size of a cache of the given capacity.
func (s KVShape) BufferBytes(capacity int) int64 { return int64(s.Slots(capacity)) * s.TokenBytes() }

// KV is a cache view of Capacity slots: per layer, K[l] and V[l] hold
// Capacity rows of RowBytes. The memory is not managed by Go's collector and
// stays put while an Executable has it bound.
type KV struct {
	Capacity int
	K, V     [][]byte
}

// Executable is one compiled graph with its infer request. It is not safe
// for concurrent use: the ladder serializes the sequences that share it.
type Executable interface {
	// Spec is the graph's static shape.
	Spec() model.GraphSpec
	// Bind makes kv the graph's past K/V (kv.Capacity must equal the spec's).
	Bind(kv *KV) error
	// Step runs ids (at most Spec().Chunk of them) at positions
	// start..start+len(ids)-1, stores their K/V rows into the bound cache at
	// those slots, and returns the logits after the last id. The slice is
	// valid until the next Step.
	Step(ids []int64, start int) ([]float32, error)
	Close() error
}

// Compiler turns a graph spec into an Executable. Compile may be called from
// several goroutines at once (the background worker and a foreground
// compile).
type Compiler interface {
	Compile(ctx context.Context, spec model.GraphSpec) (Executable, error)
}

// Optional capabilities. The runtime asks for them with a type assertion
// through the helpers below; an implementation without one gets the default.

// HostViewer is a Compiler that says whether its graphs read KV inputs in
// place from host memory, which growth without copy (grow-remap) needs.
// Without it, a compiler is assumed to.
type HostViewer interface {
	HostViews() bool
}

// DynamicShapes reports whether an OpenVINO device accepts dynamic shapes
// inside a graph (CPU, GPU: bounded attention, shared graphs); NPU
// compiles static shapes only.
func DynamicShapes(device string) bool {
	switch strings.ToUpper(device) {
	case "", "CPU", "GPU":
		return true
	}
	return false
}

// SharedGrapher is a Compiler that says whether it compiles shared graphs
// (GraphSpec.Shared: a dynamic token axis), which prefill mode auto may
// then choose for a first rung. Without it, a compiler is assumed not to.
type SharedGrapher interface {
	SharedGraphs() bool
}

// WeightSharer is a Compiler whose graphs all read their weights in place
// from one copy (ovrun's kernel: the plugin lays out none of them), so a
// second graph of the same checkpoint costs its compile and its buffers,
// not a second copy of the weights. Where prefill mode auto would take a
// long prompt through a shared graph, Generate then compiles a prefill
// graph and a decode graph at once instead: the prompt goes through the
// one in chunks, the answer through the other's faster steps.
type WeightSharer interface {
	GraphsShareWeights() bool
}

// SharedCoster is a Compiler that estimates how much longer a decode step
// of its shared graphs is than one of its decode graphs, as a fraction of
// the step (compilecost.SharedStepPenalty for its model), which prefill
// mode auto weighs against the prompt. Without it, the estimate is
// compilecost.DefaultSharedStepPenalty.
type SharedCoster interface {
	SharedStepPenalty() float64
}

// IRSizer is an Executable that knows the size of the IR it was compiled
// from (recorded as a compile's ir_bytes).
type IRSizer interface {
	IRBytes() int
}

// WeightExplainer is a Compiler that can name the first non-finite weight
// of its checkpoint ("" when all are finite), to explain non-finite logits.
type WeightExplainer interface {
	NonFiniteWeight() string
}

// Origin says where a compiled graph came from and what moving it as a
// compiled blob cost: compiled here, compiled in a worker process and
// imported, or imported from the compiled-rung cache.
type Origin struct {
	Source  string  // OriginCompiled, OriginImported or OriginReused
	ImportS float64 // seconds importing a compiled blob; 0 when none was imported
	ExportS float64 // seconds exporting the compiled model (worker result, cache entry); 0 when none was
	// CompiledS is what compiling an imported graph cost when it was
	// compiled (the cache entry's record); 0 when unknown.
	CompiledS float64
}

// The sources of a compiled graph: a rung imported from a worker's result
// was still compiled for this run, so only a cache hit is "imported".
const (
	OriginCompiled = "compiled"
	OriginImported = "imported"
	// OriginReused is a graph that is a new infer request on the compiled
	// graph of an earlier rung, which covers this capacity too (paged
	// attention on the CPU): nothing was compiled or imported.
	OriginReused = "reused"
)

// Feeder is an Executable that takes tokens whose logits nobody reads
// (a prompt's before its last) more cheaply than Step: ovexec's kernel
// graphs skip their lm_head then. runtime.Feed uses it where there is one.
type Feeder interface {
	Feed(ids []int64, start int) error
}

// StepTokener is an Executable whose calls take more tokens than its
// spec's chunk: ovexec's kernel decode graphs, whose static token axis
// (model.KernelStepTokens: 8, or 16 for larger weights) is padded and
// counted, so a prompt goes through the decode graph that many tokens a
// call (each call reading the weights once). StepTokens without it is the
// spec's chunk.
type StepTokener interface {
	StepTokens() int
}

// StepTokens is the most tokens one call of exe takes.
func StepTokens(exe Executable) int {
	if s, ok := exe.(StepTokener); ok {
		return s.StepTokens()
	}
	return exe.Spec().Chunk
}

// SpecStepTokener is a Compiler that says how many tokens one call of a
// spec's graph will take (StepTokens of what it compiles), which auto
// mode weighs before the compile. Without it, the spec's chunk.
type SpecStepTokener interface {
	StepTokens(spec model.GraphSpec) int
}

// specStepTokens is the most tokens one call of comp's graph of spec takes.
func specStepTokens(comp Compiler, spec model.GraphSpec) int {
	if s, ok := comp.(SpecStepTokener); ok {
		return s.StepTokens(spec)
	}
	return spec.Chunk
}

// OriginReporter is an Executable that knows its Origin.
type OriginReporter interface {
	Origin() Origin
}

// CompileNoter is an Executable with notes on how it was made (a damaged
// compiled-rung cache entry discarded, an entry evicted); the ladder adds
// them to the run's notes.
type CompileNoter interface {
	CompileNotes() []string
}

// CacheChecker is a Compiler with a compiled-graph cache that can tell
// whether a graph is in it: compiling it would be an import. Budgets use
// the import cost for such graphs.
type CacheChecker interface {
	Cached(spec model.GraphSpec) bool
}

// Reuser is a Compiler that can tell when compiling spec would only make a
// new infer request on a graph it has compiled already (ovexec's paged
// graphs, which serve every capacity). The ladder does that at once, in the
// goroutine that asks, instead of queueing it for the background compile
// thread, which decoding starves at its low priority: a reused rung queued
// there started only at the boundary, 0.7 s late, in `make demo`.
type Reuser interface {
	Reuses(spec model.GraphSpec) bool
}

// reuses reports whether comp would compile spec by reusing a graph.
func reuses(comp Compiler, spec model.GraphSpec) bool {
	x, ok := comp.(Reuser)
	return ok && x.Reuses(spec)
}

// compileNotes are exe's notes, nil when it has none.
func compileNotes(exe Executable) []string {
	if x, ok := exe.(CompileNoter); ok {
		return x.CompileNotes()
	}
	return nil
}

// cached reports whether comp would import spec's graph from its cache.
func cached(comp Compiler, spec model.GraphSpec) bool {
	x, ok := comp.(CacheChecker)
	return ok && x.Cached(spec)
}

// originOf is exe's origin; an Executable that does not say was compiled.
func originOf(exe Executable) Origin {
	if x, ok := exe.(OriginReporter); ok {
		o := x.Origin()
		if o.Source == "" {
			o.Source = OriginCompiled
		}
		return o
	}
	return Origin{Source: OriginCompiled}
}

// hostViews reports whether comp's graphs read host memory in place.
func hostViews(comp Compiler) bool {
	v, ok := comp.(HostViewer)
	return !ok || v.HostViews()
}

// sharedGraphs reports whether comp compiles shared graphs.
func sharedGraphs(comp Compiler) bool {
	x, ok := comp.(SharedGrapher)
	return ok && x.SharedGraphs()
}

// sharesWeights reports whether comp's graphs share one copy of the
// weights (WeightSharer) and a second core can compile a second graph.
func sharesWeights(comp Compiler) bool {
	x, ok := comp.(WeightSharer)
	return ok && x.GraphsShareWeights() && goruntime.NumCPU() >= 2
}

// sharedPenalty is comp's SharedStepPenalty, or the default.
func sharedPenalty(comp Compiler) float64 {
	if x, ok := comp.(SharedCoster); ok {
		return x.SharedStepPenalty()
	}
	return compilecost.DefaultSharedStepPenalty
}

// irBytes is the IR size of exe, 0 when unknown.
func irBytes(exe Executable) int {
	if x, ok := exe.(IRSizer); ok {
		return x.IRBytes()
	}
	return 0
}

// nonFiniteWeight names comp's first non-finite weight, "" when unknown.
func nonFiniteWeight(comp Compiler) string {
	if e, ok := comp.(WeightExplainer); ok {
		return e.NonFiniteWeight()
	}
	return ""
}
