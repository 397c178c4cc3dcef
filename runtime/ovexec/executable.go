package ovexec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/ov"
	"github.com/ovtoolkit/ovrun/runtime"
)

// executable is a compiled graph with one infer request whose inputs and
// outputs all live in C memory bound once: a step writes token ids, runs, and
// copies the new K/V rows into the cache.
type executable struct {
	spec     model.GraphSpec
	compiled *ov.CompiledModel
	req      *ov.InferRequest
	shape    runtime.KVShape
	vocab    int
	// inPlace: the graph reads all its weights where they are (ovrun's
	// kernel), so its first calls lay none out (warmUp).
	inPlace bool
	// fixedCache: the graph takes its caches' addresses (model.KVTable,
	// model.Weights.AttendsInKernel), each of the capacity's blocks, and
	// binds them whole; table holds them. It is not warmed (warmUp).
	fixedCache bool
	table      *ov.HostBuffer
	// stepT is the most tokens a call takes (model.Weights.StepTokens):
	// the spec's chunk, or a fixedCache graph's padded token axis, whose
	// real tokens count holds (model.TokenCount).
	stepT int
	count *ov.HostBuffer

	ids, pos, idx *ov.HostBuffer // i64 [1,T], [1,T], [1]
	logits        *ov.HostBuffer // f32 [1,V]
	present       []*ov.HostBuffer
	tensors       []*ov.Tensor // bound once, freed on Close
	tokenTensors  []*ov.Tensor // ids, positions and present rows, bound for boundT tokens
	boundT        int
	kvTensors     []*ov.Tensor // the past inputs, over pastSlots slots of kv
	pastSlots     int
	kv            *runtime.KV
	irBytes       int
	bb            *batchBuffers  // a batched graph's per-call inputs (batch.go); nil otherwise
	sb            *staticBatch   // a static batched graph's per-call scratch (batch_static.go); nil otherwise
	origin        runtime.Origin // compiled here or in a worker, imported from the compiled-rung cache, or reused
	notes         []string       // what the cache had to say (a damaged entry discarded, an eviction)
	// release, when set, drops this executable's reference to a compiled
	// model it shares with other capacities (reuse.go) instead of closing it.
	release func()
}

// Origin says whether the graph was compiled (here or in a worker process)
// or imported from the compiled-rung cache, and what exporting and
// importing it cost.
func (e *executable) Origin() runtime.Origin { return e.origin }

// CompileNotes are the cache's notes on this graph.
func (e *executable) CompileNotes() []string { return e.notes }

// IRBytes is the size of the IR XML the graph was compiled from.
func (e *executable) IRBytes() int { return e.irBytes }

func (e *executable) Spec() model.GraphSpec { return e.spec }

// StepTokens is the most tokens a call takes (runtime.StepTokener).
func (e *executable) StepTokens() int { return e.stepT }

func (e *executable) prepare() error {
	var err error
	if e.req, err = e.compiled.NewInferRequest(); err != nil {
		return err
	}
	if e.spec.StaticBatch() { // every input and output bound once (batch_static.go)
		return e.prepareStaticBatch()
	}
	alloc := func(et ov.ElementType, shape ...int64) (*ov.HostBuffer, error) {
		n := et.Size()
		for _, d := range shape {
			n *= int(d)
		}
		return ov.AllocHost(n)
	}
	T := int64(e.stepT)
	if e.ids, err = alloc(ov.I64, 1, T); err != nil {
		return err
	}
	if e.pos, err = alloc(ov.I64, 1, T); err != nil {
		return err
	}
	if e.idx, err = alloc(ov.I64, 1); err != nil {
		return err
	}
	if e.batched() { // every other input is bound per call (batch.go)
		return e.prepareBatch()
	}
	if e.logits, err = alloc(ov.F32, 1, int64(e.vocab)); err != nil {
		return err
	}
	presents := 2 * e.shape.Layers
	if e.paged() {
		presents = 0 // the graph writes its K/V rows into the cache itself
	}
	for range presents {
		buf, err := alloc(kvElement(e.spec.KVPrecision), T, int64(e.shape.KVHeads), int64(e.shape.HeadDim))
		if err != nil {
			return err
		}
		e.present = append(e.present, buf)
	}
	type binding struct {
		name  string
		et    ov.ElementType
		shape []int64
		buf   *ov.HostBuffer
	}
	binds := []binding{{model.LogitsIndex, ov.I64, []int64{1}, e.idx}, {model.OutputLogits, ov.F32, []int64{1, int64(e.vocab)}, e.logits}}
	if e.fixedCache { // the caches' addresses, written when a cache is bound (writeTable)
		n := 16 * int64(e.shape.Layers)
		if e.table, err = alloc(ov.U8, n); err != nil {
			return err
		}
		binds = append(binds, binding{model.KVTable, ov.U8, []int64{n}, e.table})
		if e.count, err = alloc(ov.I64, 1); err != nil {
			return err
		}
		binds = append(binds, binding{model.TokenCount, ov.I64, []int64{1}, e.count})
	}
	for _, b := range binds {
		t, err := e.bind(b.name, b.et, b.shape, b.buf.Ptr())
		if err != nil {
			return err
		}
		e.tensors = append(e.tensors, t)
	}
	// A shared or paged graph takes 1 to Chunk tokens: Step binds the
	// count each call has; a static graph takes Chunk (padded) on every
	// call, a fixedCache one stepT (padded, and counted).
	n := e.stepT
	if e.spec.DynamicTokens() {
		n = 1
	}
	return e.bindTokens(n)
}

// paged reports whether the graph attends through paged attention: its
// cache is bound in blocks once, and it writes its K/V rows there itself.
func (e *executable) paged() bool { return e.spec.Attention == model.AttentionPaged }

// bind makes a tensor of shape over the memory at ptr the request's tensor
// name.
func (e *executable) bind(name string, et ov.ElementType, shape []int64, ptr unsafe.Pointer) (*ov.Tensor, error) {
	t, err := ov.NewTensorFromPtr(et, shape, ptr)
	if err != nil {
		return nil, err
	}
	if err := e.req.SetTensor(name, t); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// bindTokens binds the token ids, positions and present K/V rows as n
// tokens' worth of their buffers (which hold stepT).
func (e *executable) bindTokens(n int) error {
	for _, t := range e.tokenTensors {
		t.Close()
	}
	e.tokenTensors, e.boundT = nil, 0
	T := int64(n)
	bind := func(name string, et ov.ElementType, shape []int64, buf *ov.HostBuffer) error {
		t, err := e.bind(name, et, shape, buf.Ptr())
		if err != nil {
			return fmt.Errorf("bind %s for %d tokens: %w", name, n, err)
		}
		e.tokenTensors = append(e.tokenTensors, t)
		return nil
	}
	if err := bind(model.InputIDs, ov.I64, []int64{1, T}, e.ids); err != nil {
		return err
	}
	if err := bind(model.PositionIDs, ov.I64, []int64{1, T}, e.pos); err != nil {
		return err
	}
	row := []int64{T, int64(e.shape.KVHeads), int64(e.shape.HeadDim)}
	for l := range len(e.present) / 2 { // none for a paged graph
		for i, name := range []string{model.PresentKey(l), model.PresentValue(l)} {
			if err := bind(name, kvElement(e.spec.KVPrecision), row, e.present[2*l+i]); err != nil {
				return err
			}
		}
	}
	e.boundT = n
	return nil
}

// Bind makes kv the graph's past K/V. A static or paged graph gets every
// slot bound here; a bounded one gets the live prefix of each call in Step.
func (e *executable) Bind(kv *runtime.KV) error {
	if e.spec.StaticBatch() {
		if kv.Capacity != e.spec.Batch*e.spec.Capacity {
			return fmt.Errorf("bind a cache of %d slots to graph %s: want %d sequences' %d slots back to back (%d)", kv.Capacity, e.spec.Name(), e.spec.Batch, e.spec.Capacity, e.spec.Batch*e.spec.Capacity)
		}
	} else if e.batched() {
		if kv.Capacity < e.shape.Block || kv.Capacity%e.shape.Block != 0 {
			return fmt.Errorf("bind a pool of %d slots to graph %s: want a whole number of %d-slot blocks", kv.Capacity, e.spec.Name(), e.shape.Block)
		}
	} else if kv.Capacity != e.spec.Capacity {
		return fmt.Errorf("bind a cache of %d slots to graph %s", kv.Capacity, e.spec.Name())
	}
	e.freeKV()
	need := e.shape.LayerBytes(kv.Capacity)
	for l := 0; l < e.shape.Layers; l++ {
		for _, mem := range [][]byte{kv.K[l], kv.V[l]} {
			if len(mem) < need {
				return fmt.Errorf("bind graph %s: layer %d's cache has %d bytes, %d slots of %s need %d (allocate it with the compiler's KVShape)",
					e.spec.Name(), l, len(mem), kv.Capacity, kvElement(e.spec.KVPrecision), need)
			}
		}
	}
	e.kv = kv
	if e.spec.Attention == model.AttentionBounded {
		return nil
	}
	return e.bindPast(kv.Capacity)
}

// warmUp runs a decode step of a graph with dynamic shapes on a scratch
// cache, and for one whose token axis is dynamic a call of warmTokens
// tokens as well. The CPU plugin prepares such a graph's kernels (weights
// repacked for the matrix products included) on its first call of each
// kind, not at compile time as for a static graph: SmolLM2's shared graph
// took 0.2-0.35 s longer on its first call than on the next, and its
// first call of 8 or more tokens 0.43 s longer again at f32. Done here,
// that cost is part of the compile, which the ladder may run in the
// background, instead of the first token or a rung boundary.
//
// A graph that attends through Attend (fixedCache) has static shapes and
// reads its weights in place: its first call costs what the next ones do,
// and it is not warmed (SmolLM2 kernel-q8, 16-token prompt, AVX2, warm
// start from the rung cache, four interleaved pairs: compile 0.12-0.17 ->
// 0.10-0.12 s, the prompt the same 0.03-0.05 s; cold, three pairs: the
// prompt 5-10 ms longer, the first token 0-0.12 s sooner). Nor is any
// other graph whose weights are all read in place (inPlace) and whose
// token axis is dynamic (a shared or paged prefill graph of the kernel):
// a one-token call lays out nothing a prompt's call of hundreds of tokens
// could use (that call sets up its own shapes either way), and cost the
// first token a decode step (SmolLM2 kernel-q8, 512-token prompt, shared
// graph imported from the rung cache, AVX2, four interleaved pairs:
// compile 0.33-0.34 -> 0.27-0.29 s, the prompt 1.55-1.71 against
// 1.63-1.67 s, the first token 2.17-2.28 -> 2.08-2.17 s, the decode steps
// the same).
func (e *executable) warmUp() error {
	var slots int
	switch {
	case e.fixedCache, e.inPlace && e.spec.DynamicTokens():
		return nil
	case e.paged():
		slots = e.shape.Slots(min(warmTokens, e.spec.Capacity))
	case e.spec.Attention == model.AttentionBounded:
		slots = model.LiveSlots(0, e.spec.Capacity)
	default:
		return nil
	}
	// Reserved, not committed: the call writes and reads the first slot's
	// pages alone (the rest read as the zero page).
	scratch, err := runtime.AllocKV(e.shape, slots, false)
	if err != nil {
		return err
	}
	defer scratch.Free()
	kv, err := scratch.View(slots)
	if err != nil {
		return err
	}
	e.kv = kv
	defer e.freeKV()
	if err := e.bindPast(slots); err != nil {
		return err
	}
	calls := []int{1}
	if n := min(e.spec.Chunk, warmTokens, e.spec.Capacity); e.spec.DynamicTokens() && n > 1 {
		calls = append(calls, n)
	}
	for _, n := range calls {
		if _, err := e.Step(make([]int64, n), 0); err != nil {
			return fmt.Errorf("first call of graph %s: %w", e.spec.Name(), err)
		}
	}
	return nil
}

// warmTokens is the length of warmUp's second call: on the CPU a product
// with compressed weights runs another kernel from a few rows on (at f32
// from somewhere between 5 and 8), laid out on its first call. A graph
// whose weights are all read in place by ovrun's kernel has no such
// layout and skips the call (SmolLM2 kernel-q8, 512-token prompt through
// a shared graph: ready 0.66-0.69 -> 0.58-0.63 s, the prompt's time the
// same, three interleaved runs), and since then the first call too.
const warmTokens = 16

// bindPast binds the first slots of every layer's K/V cache (a prefix view
// of the bound cache, whose capacity axis is outermost) as the past inputs:
// [slots, Hkv, D], or a paged graph's [slots/B, Hkv, B, D] (slots rounded
// up to whole blocks B).
func (e *executable) bindPast(slots int) error {
	for _, t := range e.kvTensors {
		t.Close()
	}
	e.kvTensors, e.pastSlots = nil, 0
	if e.fixedCache {
		return e.writeTable(slots)
	}
	shape := []int64{int64(slots), int64(e.shape.KVHeads), int64(e.shape.HeadDim)}
	if e.paged() {
		B := e.shape.Block
		shape = []int64{int64(e.shape.Slots(slots) / B), int64(e.shape.KVHeads), int64(B), int64(e.shape.HeadDim)}
	}
	et := kvElement(e.spec.KVPrecision)
	for l := 0; l < e.shape.Layers; l++ {
		for i, mem := range [][]byte{e.kv.K[l], e.kv.V[l]} {
			name := model.PastKey(l)
			if i == 1 {
				name = model.PastValue(l)
			}
			t, err := e.bind(name, et, shape, unsafe.Pointer(&mem[0]))
			if err != nil {
				return fmt.Errorf("bind %d past slots to graph %s: %w", slots, e.spec.Name(), err)
			}
			e.kvTensors = append(e.kvTensors, t)
		}
	}
	e.pastSlots = slots
	return nil
}

func (e *executable) Step(ids []int64, start int) ([]float32, error) {
	return e.step(ids, start, true)
}

// Feed is Step for tokens whose logits nobody reads: a kernel graph skips
// its lm_head (model.LogitsIndex negative), a batched one's are dropped.
func (e *executable) Feed(ids []int64, start int) error {
	_, err := e.step(ids, start, false)
	return err
}

func (e *executable) step(ids []int64, start int, logits bool) ([]float32, error) {
	n := len(ids)
	switch {
	case e.req == nil:
		return nil, fmt.Errorf("graph %s: step after it was closed", e.spec.Name())
	case e.kv == nil:
		return nil, fmt.Errorf("graph %s: step before a cache was bound", e.spec.Name())
	case n == 0 || n > e.stepT:
		return nil, fmt.Errorf("graph %s takes 1 to %d tokens per step, got %d", e.spec.Name(), e.stepT, n)
	case start+n > e.spec.Capacity:
		return nil, fmt.Errorf("%w: tokens %d..%d in graph %s", runtime.ErrCapacity, start, start+n-1, e.spec.Name())
	}
	if e.batched() {
		return e.stepAlone(ids, start)
	}
	if live := model.LiveSlots(start, e.spec.Capacity); e.spec.Attention == model.AttentionBounded && live != e.pastSlots {
		if err := e.bindPast(live); err != nil {
			return nil, err
		}
	}
	if e.spec.DynamicTokens() && n != e.boundT {
		if err := e.bindTokens(n); err != nil {
			return nil, fmt.Errorf("graph %s: %w", e.spec.Name(), err)
		}
	}
	idb, pb := e.ids.Bytes(), e.pos.Bytes()
	for t := 0; t < e.boundT; t++ {
		var id int64
		if t < n {
			id = ids[t]
		}
		binary.LittleEndian.PutUint64(idb[8*t:], uint64(id))
		binary.LittleEndian.PutUint64(pb[8*t:], uint64(start+t))
	}
	row := int64(n - 1)
	if !logits {
		row = -1
	}
	binary.LittleEndian.PutUint64(e.idx.Bytes(), uint64(row))
	if e.count != nil {
		binary.LittleEndian.PutUint64(e.count.Bytes(), uint64(n))
	}
	if err := e.req.Infer(); err != nil {
		return nil, fmt.Errorf("infer graph %s: %w", e.spec.Name(), err)
	}
	rb := e.shape.RowBytes()
	for l := 0; l < e.shape.Layers && !e.paged(); l++ {
		copy(e.kv.K[l][start*rb:(start+n)*rb], e.present[2*l].Bytes()[:n*rb])
		copy(e.kv.V[l][start*rb:(start+n)*rb], e.present[2*l+1].Bytes()[:n*rb])
	}
	return unsafe.Slice((*float32)(e.logits.Ptr()), e.vocab), nil
}

func (e *executable) freeKV() {
	for _, t := range e.kvTensors {
		t.Close()
	}
	e.kvTensors, e.kv, e.pastSlots = nil, nil, 0
	if e.table != nil { // a call now fails (Attend finds no cache) rather than reads memory no longer bound
		clear(e.table.Bytes())
	}
}

// writeTable writes the addresses of every layer's K and V cache into the
// table of a graph that takes them so (model.KVTable): slots must be the
// graph's capacity, which its Attend operations take the caches to hold.
func (e *executable) writeTable(slots int) error {
	if slots != e.spec.Capacity {
		return fmt.Errorf("bind %d past slots to graph %s: it attends over its whole capacity, %d", slots, e.spec.Name(), e.spec.Capacity)
	}
	need := e.shape.LayerBytes(slots)
	tb := e.table.Bytes()
	for l := 0; l < e.shape.Layers; l++ {
		for i, mem := range [][]byte{e.kv.K[l], e.kv.V[l]} {
			if len(mem) < need {
				return fmt.Errorf("bind graph %s: layer %d's cache has %d bytes, want %d", e.spec.Name(), l, len(mem), need)
			}
			binary.LittleEndian.PutUint64(tb[16*l+8*i:], uint64(uintptr(unsafe.Pointer(&mem[0]))))
		}
	}
	e.pastSlots = slots
	return nil
}

func (e *executable) Close() error {
	e.freeKV()
	if e.bb != nil {
		e.bb.free()
		e.bb = nil
	}
	var errs []error
	for _, t := range append(e.tensors, e.tokenTensors...) {
		t.Close()
	}
	e.tensors, e.tokenTensors = nil, nil
	if e.req != nil {
		e.req.Close()
	}
	switch {
	case e.release != nil:
		e.release()
		e.release = nil
	case e.compiled != nil:
		e.compiled.Close()
	}
	for _, b := range append([]*ov.HostBuffer{e.ids, e.pos, e.idx, e.logits, e.table, e.count}, e.present...) {
		if b != nil {
			b.Free()
		}
	}
	e.req, e.compiled, e.present = nil, nil, nil
	e.ids, e.pos, e.idx, e.logits, e.table, e.count = nil, nil, nil, nil, nil, nil
	return errors.Join(errs...)
}
