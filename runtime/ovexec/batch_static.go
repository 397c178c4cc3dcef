package ovexec

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/ov"
	"github.com/ovtoolkit/ovrun/runtime"
)

// This file is the static batched graph's side of an executable
// (model.GraphSpec.StaticBatch: Batch B, static attention, Chunk 1), the
// NPU's form of continuous batching. Every input and output has a static
// shape, so all of them are bound once: the token ids and positions
// [1, B], the past K/V over the bound cache of B*C slots (sequence b's
// slots b*C..b*C+C-1), the present rows [B, Hkv, D] and the logits
// [B, V]. A step writes each named sequence's token and position into its
// batch slot (BatchSeq.Blocks[0]), id 0 at position 0 into the others,
// runs, and copies each named sequence's present rows into its slot's
// cache at its position, as Step does for one sequence.

// staticBatch is a static batched graph's per-call scratch.
type staticBatch struct {
	taken []bool      // [B]: slots named in the current step
	rows  [][]float32 // the logits rows returned, in the step's order
}

// prepareStaticBatch allocates and binds every input and output but the
// past K/V (Bind binds those).
func (e *executable) prepareStaticBatch() error {
	B := int64(e.spec.Batch)
	Hkv, D := int64(e.shape.KVHeads), int64(e.shape.HeadDim)
	et := kvElement(e.spec.KVPrecision)
	e.sb = &staticBatch{taken: make([]bool, B)}
	type io struct {
		name  string
		et    ov.ElementType
		shape []int64
		buf   **ov.HostBuffer
	}
	ios := []io{
		{model.InputIDs, ov.I64, []int64{1, B}, &e.ids},
		{model.PositionIDs, ov.I64, []int64{1, B}, &e.pos},
		{model.OutputLogits, ov.F32, []int64{B, int64(e.vocab)}, &e.logits},
	}
	e.present = make([]*ov.HostBuffer, 2*e.shape.Layers)
	for l := range e.shape.Layers {
		ios = append(ios,
			io{model.PresentKey(l), et, []int64{B, Hkv, D}, &e.present[2*l]},
			io{model.PresentValue(l), et, []int64{B, Hkv, D}, &e.present[2*l+1]})
	}
	for _, x := range ios {
		n := x.et.Size()
		for _, d := range x.shape {
			n *= int(d)
		}
		buf, err := ov.AllocHost(n)
		if err != nil {
			return err
		}
		*x.buf = buf
		t, err := e.bind(x.name, x.et, x.shape, buf.Ptr())
		if err != nil {
			return fmt.Errorf("bind %s: %w", x.name, err)
		}
		e.tensors = append(e.tensors, t)
	}
	return nil
}

// stepStaticBatch runs one call over step's sequences, each one token in
// its batch slot, and returns their logits rows in step.Seqs' order.
func (e *executable) stepStaticBatch(step *runtime.BatchStep) ([][]float32, error) {
	if err := e.checkStaticBatch(step); err != nil {
		return nil, err
	}
	B, C, V := e.spec.Batch, e.spec.Capacity, e.vocab
	idb, pb := e.ids.Bytes(), e.pos.Bytes()
	clear(idb[:8*B]) // idle slots: id 0 at position 0
	clear(pb[:8*B])
	for i, s := range step.Seqs {
		b := int(s.Blocks[0])
		binary.LittleEndian.PutUint64(idb[8*b:], uint64(step.IDs[i]))
		binary.LittleEndian.PutUint64(pb[8*b:], uint64(s.Past))
	}
	if err := e.req.Infer(); err != nil {
		return nil, fmt.Errorf("infer graph %s (%d sequences): %w", e.spec.Name(), len(step.Seqs), err)
	}
	rb := e.shape.RowBytes()
	for l := range e.shape.Layers {
		pk, pv := e.present[2*l].Bytes(), e.present[2*l+1].Bytes()
		for _, s := range step.Seqs {
			b := int(s.Blocks[0])
			at := (b*C + s.Past) * rb
			copy(e.kv.K[l][at:at+rb], pk[b*rb:(b+1)*rb])
			copy(e.kv.V[l][at:at+rb], pv[b*rb:(b+1)*rb])
		}
	}
	all := unsafe.Slice((*float32)(e.logits.Ptr()), B*V)
	sb := e.sb
	sb.rows = sb.rows[:0]
	for _, s := range step.Seqs {
		b := int(s.Blocks[0])
		sb.rows = append(sb.rows, all[b*V:(b+1)*V:(b+1)*V])
	}
	return sb.rows, nil
}

// checkStaticBatch refuses a step a static batched graph cannot take, so
// a scheduling bug is an error naming it, never a write outside a slot's
// cache.
func (e *executable) checkStaticBatch(step *runtime.BatchStep) error {
	name := e.spec.Name()
	B := e.spec.Batch
	switch {
	case e.req == nil:
		return fmt.Errorf("graph %s: step after it was closed", name)
	case e.kv == nil:
		return fmt.Errorf("graph %s: step before a cache was bound", name)
	case len(step.Seqs) == 0 || len(step.Seqs) > B:
		return fmt.Errorf("graph %s takes 1 to %d sequences per step, got %d", name, B, len(step.Seqs))
	case len(step.IDs) != len(step.Seqs):
		return fmt.Errorf("graph %s takes one token per sequence: %d sequences, %d ids", name, len(step.Seqs), len(step.IDs))
	}
	taken := e.sb.taken
	clear(taken)
	for i, s := range step.Seqs {
		switch {
		case s.Tokens != 1:
			return fmt.Errorf("graph %s takes one token per sequence, sequence %d has %d", name, i, s.Tokens)
		case s.Past < 0:
			return fmt.Errorf("graph %s: sequence %d is at position %d", name, i, s.Past)
		case s.Past >= e.spec.Capacity:
			return fmt.Errorf("%w: sequence %d reaches position %d in graph %s", runtime.ErrCapacity, i, s.Past, name)
		case len(s.Blocks) < 1:
			return fmt.Errorf("graph %s: sequence %d names no batch slot (Blocks[0])", name, i)
		case s.Blocks[0] < 0 || int(s.Blocks[0]) >= B:
			return fmt.Errorf("graph %s: sequence %d names batch slot %d of %d", name, i, s.Blocks[0], B)
		case taken[s.Blocks[0]]:
			return fmt.Errorf("graph %s: two sequences in batch slot %d (sequence %d is the second)", name, s.Blocks[0], i)
		}
		taken[s.Blocks[0]] = true
	}
	return nil
}

// stepStaticAlone is Step on a static batched graph: the sequence of
// batch slot 0.
func (e *executable) stepStaticAlone(ids []int64, start int) ([]float32, error) {
	rows, err := e.stepStaticBatch(&runtime.BatchStep{IDs: ids, Seqs: []runtime.BatchSeq{{Tokens: len(ids), Past: start, Blocks: []int32{0}}}})
	if err != nil {
		return nil, err
	}
	return rows[0], nil
}
