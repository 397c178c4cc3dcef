package ovexec

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/ov"
	"github.com/ovtoolkit/ovrun/runtime"
)

// This file is the batched paged graph's side of an executable
// (model.GraphSpec.Batch > 0, runtime.BatchExecutable): one call carries
// the tokens of several sequences, each with its own block table in the
// bound pool. Every input but the pool changes size from call to call, so
// each call binds tensors of its own sizes over buffers allocated once for
// the largest call.

// batchBuffers are a batched graph's per-call inputs and its logits, sized
// for Batch sequences, Chunk tokens and every sequence's whole block table.
type batchBuffers struct {
	pastLens, begins, blocks, blockBegins, maxLen *ov.HostBuffer // i32
	logitsIdx                                     *ov.HostBuffer // i64 [S]
	logits                                        *ov.HostBuffer // f32 [S, V]
	call                                          []*ov.Tensor   // bound for the last call
	rows                                          [][]float32
}

func (e *executable) batched() bool { return e.spec.Batch > 0 }

// prepareBatch allocates the per-call buffers (ids and positions are the
// executable's own, Chunk long).
func (e *executable) prepareBatch() error {
	S := e.spec.Batch
	tables := S * (e.shape.Slots(e.spec.Capacity) / e.shape.Block)
	b := &batchBuffers{}
	e.bb = b
	for _, x := range []struct {
		buf   **ov.HostBuffer
		bytes int
	}{
		{&b.pastLens, 4 * S}, {&b.begins, 4 * (S + 1)}, {&b.blocks, 4 * tables}, {&b.blockBegins, 4 * (S + 1)},
		{&b.maxLen, 4}, {&b.logitsIdx, 8 * S}, {&b.logits, 4 * S * e.vocab},
	} {
		buf, err := ov.AllocHost(x.bytes)
		if err != nil {
			return err
		}
		*x.buf = buf
	}
	return nil
}

func (b *batchBuffers) free() {
	b.unbind()
	for _, buf := range []*ov.HostBuffer{b.pastLens, b.begins, b.blocks, b.blockBegins, b.maxLen, b.logitsIdx, b.logits} {
		if buf != nil {
			buf.Free()
		}
	}
}

func (b *batchBuffers) unbind() {
	for _, t := range b.call {
		t.Close()
	}
	b.call = nil
}

// StepBatch runs one call over step's sequences and returns each one's
// logits after its last token.
func (e *executable) StepBatch(step *runtime.BatchStep) ([][]float32, error) {
	if e.spec.StaticBatch() {
		return e.stepStaticBatch(step)
	}
	if err := e.checkBatch(step); err != nil {
		return nil, err
	}
	b := e.bb
	S, T := len(step.Seqs), len(step.IDs)
	put32 := func(buf *ov.HostBuffer, i, v int) { binary.LittleEndian.PutUint32(buf.Bytes()[4*i:], uint32(int32(v))) }
	idb, pb := e.ids.Bytes(), e.pos.Bytes()
	t, n, longest := 0, 0, 0
	for i, s := range step.Seqs {
		put32(b.pastLens, i, s.Past)
		put32(b.begins, i, t)
		put32(b.blockBegins, i, n)
		for j := range s.Tokens {
			binary.LittleEndian.PutUint64(idb[8*(t+j):], uint64(step.IDs[t+j]))
			binary.LittleEndian.PutUint64(pb[8*(t+j):], uint64(s.Past+j))
		}
		t += s.Tokens
		binary.LittleEndian.PutUint64(b.logitsIdx.Bytes()[8*i:], uint64(t-1))
		used := e.shape.Slots(s.Past+s.Tokens) / e.shape.Block // the blocks this call reads or writes
		for _, blk := range s.Blocks[:used] {
			put32(b.blocks, n, int(blk))
			n++
		}
		longest = max(longest, s.Past+s.Tokens)
	}
	put32(b.begins, S, t)
	put32(b.blockBegins, S, n)
	put32(b.maxLen, 0, longest)
	b.unbind()
	for _, x := range []struct {
		name  string
		et    ov.ElementType
		shape []int64
		ptr   unsafe.Pointer
	}{
		{model.InputIDs, ov.I64, []int64{1, int64(T)}, e.ids.Ptr()},
		{model.PositionIDs, ov.I64, []int64{1, int64(T)}, e.pos.Ptr()},
		{model.PastLens, ov.I32, []int64{int64(S)}, b.pastLens.Ptr()},
		{model.SubsequenceBegins, ov.I32, []int64{int64(S + 1)}, b.begins.Ptr()},
		{model.BlockIndices, ov.I32, []int64{int64(n)}, b.blocks.Ptr()},
		{model.BlockIndicesBegins, ov.I32, []int64{int64(S + 1)}, b.blockBegins.Ptr()},
		{model.MaxContextLen, ov.I32, []int64{}, b.maxLen.Ptr()},
		{model.LogitsIndex, ov.I64, []int64{int64(S)}, b.logitsIdx.Ptr()},
		{model.OutputLogits, ov.F32, []int64{int64(S), int64(e.vocab)}, b.logits.Ptr()},
	} {
		tn, err := e.bind(x.name, x.et, x.shape, x.ptr)
		if err != nil {
			return nil, fmt.Errorf("graph %s: bind %s for %d sequences, %d tokens: %w", e.spec.Name(), x.name, S, T, err)
		}
		b.call = append(b.call, tn)
	}
	if err := e.req.Infer(); err != nil {
		return nil, fmt.Errorf("infer graph %s (%d sequences, %d tokens): %w", e.spec.Name(), S, T, err)
	}
	all := unsafe.Slice((*float32)(b.logits.Ptr()), S*e.vocab)
	b.rows = b.rows[:0]
	for i := range S {
		b.rows = append(b.rows, all[i*e.vocab:(i+1)*e.vocab:(i+1)*e.vocab])
	}
	return b.rows, nil
}

// checkBatch refuses a step the graph or the bound pool cannot take, so a
// scheduling bug is an error naming it, never a write outside the pool.
func (e *executable) checkBatch(step *runtime.BatchStep) error {
	name := e.spec.Name()
	switch {
	case e.req == nil:
		return fmt.Errorf("graph %s: step after it was closed", name)
	case !e.batched():
		return fmt.Errorf("graph %s is not a batched graph", name)
	case e.kv == nil:
		return fmt.Errorf("graph %s: step before a block pool was bound", name)
	case len(step.Seqs) == 0 || len(step.Seqs) > e.spec.Batch:
		return fmt.Errorf("graph %s takes 1 to %d sequences per step, got %d", name, e.spec.Batch, len(step.Seqs))
	case len(step.IDs) == 0 || len(step.IDs) > e.spec.Chunk:
		return fmt.Errorf("graph %s takes 1 to %d tokens per step, got %d", name, e.spec.Chunk, len(step.IDs))
	}
	pool := e.kv.Capacity / e.shape.Block
	total := 0
	for i, s := range step.Seqs {
		need := e.shape.Slots(s.Past+s.Tokens) / e.shape.Block
		switch {
		case s.Tokens < 1 || s.Past < 0:
			return fmt.Errorf("graph %s: sequence %d has %d tokens after %d", name, i, s.Tokens, s.Past)
		case s.Past+s.Tokens > e.spec.Capacity:
			return fmt.Errorf("%w: sequence %d reaches position %d in graph %s", runtime.ErrCapacity, i, s.Past+s.Tokens-1, name)
		case len(s.Blocks) < need:
			return fmt.Errorf("graph %s: sequence %d needs %d blocks for %d positions, its table has %d", name, i, need, s.Past+s.Tokens, len(s.Blocks))
		}
		for _, blk := range s.Blocks[:need] {
			if blk < 0 || int(blk) >= pool {
				return fmt.Errorf("graph %s: sequence %d names block %d of a pool of %d", name, i, blk, pool)
			}
		}
		total += s.Tokens
	}
	if total != len(step.IDs) || total > math.MaxInt32 {
		return fmt.Errorf("graph %s: the sequences have %d tokens, the step %d ids", name, total, len(step.IDs))
	}
	return nil
}

// stepAlone is Step on a batched graph: one sequence whose blocks are the
// pool's first ones, in order (a paged graph's own block table).
func (e *executable) stepAlone(ids []int64, start int) ([]float32, error) {
	if e.spec.StaticBatch() {
		return e.stepStaticAlone(ids, start)
	}
	n := e.shape.Slots(start+len(ids)) / e.shape.Block
	blocks := make([]int32, n)
	for i := range blocks {
		blocks[i] = int32(i)
	}
	rows, err := e.StepBatch(&runtime.BatchStep{IDs: ids, Seqs: []runtime.BatchSeq{{Tokens: len(ids), Past: start, Blocks: blocks}}})
	if err != nil {
		return nil, err
	}
	return rows[0], nil
}
