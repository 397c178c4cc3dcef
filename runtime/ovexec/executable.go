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

	ids, pos, idx *ov.HostBuffer // i64 [1,T], [1,T], [1]
	logits        *ov.HostBuffer // f32 [1,V]
	present       []*ov.HostBuffer
	tensors       []*ov.Tensor // bound once, freed on Close
	kvTensors     []*ov.Tensor // bound per Bind
	kv            *runtime.KV
	irBytes       int
	origin        runtime.Origin // compiled here or in a worker, or imported from the compiled-rung cache
	notes         []string       // what the cache had to say (a damaged entry discarded, an eviction)
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

func (e *executable) prepare() error {
	var err error
	if e.req, err = e.compiled.NewInferRequest(); err != nil {
		return err
	}
	T := int64(e.spec.Chunk)
	bind := func(name string, et ov.ElementType, shape []int64) (*ov.HostBuffer, error) {
		n := et.Size()
		for _, d := range shape {
			n *= int(d)
		}
		buf, err := ov.AllocHost(n)
		if err != nil {
			return nil, err
		}
		t, err := ov.NewTensorFromPtr(et, shape, buf.Ptr())
		if err != nil {
			buf.Free()
			return nil, err
		}
		e.tensors = append(e.tensors, t)
		return buf, e.req.SetTensor(name, t)
	}
	if e.ids, err = bind(model.InputIDs, ov.I64, []int64{1, T}); err != nil {
		return err
	}
	if e.pos, err = bind(model.PositionIDs, ov.I64, []int64{1, T}); err != nil {
		return err
	}
	if e.idx, err = bind(model.LogitsIndex, ov.I64, []int64{1}); err != nil {
		return err
	}
	if e.logits, err = bind(model.OutputLogits, ov.F32, []int64{1, int64(e.vocab)}); err != nil {
		return err
	}
	row := []int64{T, int64(e.shape.KVHeads), int64(e.shape.HeadDim)}
	for l := 0; l < e.shape.Layers; l++ {
		for _, name := range []string{model.PresentKey(l), model.PresentValue(l)} {
			buf, err := bind(name, kvElement(e.spec.KVPrecision), row)
			if buf != nil {
				e.present = append(e.present, buf)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (e *executable) Bind(kv *runtime.KV) error {
	if kv.Capacity != e.spec.Capacity {
		return fmt.Errorf("bind a cache of %d slots to graph %s", kv.Capacity, e.spec.Name())
	}
	e.freeKV()
	shape := []int64{int64(kv.Capacity), int64(e.shape.KVHeads), int64(e.shape.HeadDim)}
	et := kvElement(e.spec.KVPrecision)
	for l := 0; l < e.shape.Layers; l++ {
		for i, mem := range [][]byte{kv.K[l], kv.V[l]} {
			if len(mem) < kv.Capacity*e.shape.RowBytes() {
				return fmt.Errorf("bind graph %s: layer %d's cache has %d bytes, %d slots of %s need %d (allocate it with the compiler's KVShape)",
					e.spec.Name(), l, len(mem), kv.Capacity, et, kv.Capacity*e.shape.RowBytes())
			}
			t, err := ov.NewTensorFromPtr(et, shape, unsafe.Pointer(&mem[0]))
			if err != nil {
				return err
			}
			e.kvTensors = append(e.kvTensors, t)
			name := model.PastKey(l)
			if i == 1 {
				name = model.PastValue(l)
			}
			if err := e.req.SetTensor(name, t); err != nil {
				return err
			}
		}
	}
	e.kv = kv
	return nil
}

func (e *executable) Step(ids []int64, start int) ([]float32, error) {
	n := len(ids)
	switch {
	case e.kv == nil:
		return nil, fmt.Errorf("graph %s: step before a cache was bound", e.spec.Name())
	case n == 0 || n > e.spec.Chunk:
		return nil, fmt.Errorf("graph %s takes 1 to %d tokens per step, got %d", e.spec.Name(), e.spec.Chunk, n)
	case start+n > e.spec.Capacity:
		return nil, fmt.Errorf("%w: tokens %d..%d in graph %s", runtime.ErrCapacity, start, start+n-1, e.spec.Name())
	}
	idb, pb := e.ids.Bytes(), e.pos.Bytes()
	for t := 0; t < e.spec.Chunk; t++ {
		var id int64
		if t < n {
			id = ids[t]
		}
		binary.LittleEndian.PutUint64(idb[8*t:], uint64(id))
		binary.LittleEndian.PutUint64(pb[8*t:], uint64(start+t))
	}
	binary.LittleEndian.PutUint64(e.idx.Bytes(), uint64(n-1))
	if err := e.req.Infer(); err != nil {
		return nil, fmt.Errorf("infer graph %s: %w", e.spec.Name(), err)
	}
	rb := e.shape.RowBytes()
	for l := 0; l < e.shape.Layers; l++ {
		copy(e.kv.K[l][start*rb:(start+n)*rb], e.present[2*l].Bytes()[:n*rb])
		copy(e.kv.V[l][start*rb:(start+n)*rb], e.present[2*l+1].Bytes()[:n*rb])
	}
	return unsafe.Slice((*float32)(e.logits.Ptr()), e.vocab), nil
}

func (e *executable) freeKV() {
	for _, t := range e.kvTensors {
		t.Close()
	}
	e.kvTensors, e.kv = nil, nil
}

func (e *executable) Close() error {
	e.freeKV()
	var errs []error
	for _, t := range e.tensors {
		t.Close()
	}
	e.tensors = nil
	if e.req != nil {
		e.req.Close()
	}
	if e.compiled != nil {
		e.compiled.Close()
	}
	for _, b := range append([]*ov.HostBuffer{e.ids, e.pos, e.idx, e.logits}, e.present...) {
		if b != nil {
			b.Free()
		}
	}
	e.req, e.compiled, e.present = nil, nil, nil
	e.ids, e.pos, e.idx, e.logits = nil, nil, nil, nil
	return errors.Join(errs...)
}
