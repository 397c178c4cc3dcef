package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// fakeCompiler makes fakeExes: a pure-Go stand-in for OpenVINO's batched
// paged graphs that keeps its state in the bound KV pool itself. The row a
// token leaves at a position mixes the token, the position and a hash of
// every row before it, read back through the sequence's block table, and
// the logits are a hash of all the sequence's rows: like a transformer's
// K/V, a row depends on the whole prefix, so a wrong, missing, stale or
// overwritten block, or a prefix block reused under another prefix,
// changes the predictions.
type fakeCompiler struct {
	shape runtime.KVShape
	vocab int

	compileDelay time.Duration // every compile
	stepDelay    time.Duration // every StepBatch
	notBatched   bool          // its executables have no StepBatch

	// checkWrite, when set (before the first request), vets every block a
	// step writes; its error fails the step.
	checkWrite func(block int32) error
	// failStep, when set, fails the StepBatch calls it returns true for
	// (1-based call count).
	failStep func(call int) bool

	mu    sync.Mutex
	fail  map[int]int           // capacity -> compiles left that fail
	gate  map[int]chan struct{} // capacity -> compile waits until closed
	specs []model.GraphSpec     // every compile asked for
	calls atomic.Int64          // StepBatch calls
	open  atomic.Int64          // executables not closed
}

var (
	errFakeCompile = errors.New("fake compiler: injected compile failure")
	errFakeStep    = errors.New("fake graph: injected step failure")
)

func newFakeCompiler(shape runtime.KVShape, vocab int) *fakeCompiler {
	return &fakeCompiler{shape: shape, vocab: vocab, fail: map[int]int{}, gate: map[int]chan struct{}{}}
}

func (f *fakeCompiler) Compile(ctx context.Context, spec model.GraphSpec) (runtime.Executable, error) {
	f.mu.Lock()
	f.specs = append(f.specs, spec)
	gate := f.gate[spec.Capacity]
	failing := f.fail[spec.Capacity] > 0
	if failing {
		f.fail[spec.Capacity]--
	}
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	select {
	case <-time.After(f.compileDelay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if failing {
		return nil, fmt.Errorf("graph %s: %w", spec.Name(), errFakeCompile)
	}
	f.open.Add(1)
	e := &fakeExe{f: f, spec: spec}
	if f.notBatched {
		return plainExe{e}, nil
	}
	return e, nil
}

// compiles is how many compiles of capacity were asked for.
func (f *fakeCompiler) compiles(capacity int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.specs {
		if s.Capacity == capacity {
			n++
		}
	}
	return n
}

// fakeExe is one fake graph.
type fakeExe struct {
	f      *fakeCompiler
	spec   model.GraphSpec
	kv     *runtime.KV
	blocks int // in the bound KV
	rows   [][]float32
	closed bool
}

var _ runtime.BatchExecutable = (*fakeExe)(nil)

// plainExe hides StepBatch: a compiler of ordinary graphs.
type plainExe struct{ e *fakeExe }

func (p plainExe) Spec() model.GraphSpec                          { return p.e.Spec() }
func (p plainExe) Bind(kv *runtime.KV) error                      { return p.e.Bind(kv) }
func (p plainExe) Step(ids []int64, start int) ([]float32, error) { return p.e.Step(ids, start) }
func (p plainExe) Close() error                                   { return p.e.Close() }

func (e *fakeExe) Spec() model.GraphSpec { return e.spec }

func (e *fakeExe) Bind(kv *runtime.KV) error {
	if e.spec.StaticBatch() {
		if kv.Capacity != e.spec.Batch*e.spec.Capacity {
			return fmt.Errorf("fake graph %s: a cache of %d slots, want %d caches of %d", e.spec.Name(), kv.Capacity, e.spec.Batch, e.spec.Capacity)
		}
		e.kv, e.blocks = kv, kv.Capacity
		return nil
	}
	bs := e.f.shape.Block
	if kv.Capacity < bs || kv.Capacity%bs != 0 {
		return fmt.Errorf("fake graph: a pool of %d slots is not a whole number of %d-token blocks", kv.Capacity, bs)
	}
	if e.spec.Batch == 0 && kv.Capacity != e.f.shape.Slots(e.spec.Capacity) {
		return fmt.Errorf("fake graph: kv of %d slots for a graph of capacity %d", kv.Capacity, e.spec.Capacity)
	}
	e.kv, e.blocks = kv, kv.Capacity/bs
	return nil
}

func (e *fakeExe) Close() error {
	if e.closed {
		return errors.New("fake graph: closed twice")
	}
	e.closed = true
	e.f.open.Add(-1)
	return nil
}

// Step is one sequence with the identity block table.
func (e *fakeExe) Step(ids []int64, start int) ([]float32, error) {
	if e.kv == nil {
		return nil, errors.New("fake graph: step before bind")
	}
	if len(ids) == 0 || start+len(ids) > e.spec.Capacity {
		return nil, fmt.Errorf("fake graph: %d tokens at %d in capacity %d", len(ids), start, e.spec.Capacity)
	}
	bs := e.f.shape.Block
	table := make([]int32, (start+len(ids)+bs-1)/bs)
	for i := range table {
		table[i] = int32(i)
	}
	e.rows = e.rows[:0]
	return e.seq(ids, start, table, false)
}

func (e *fakeExe) StepBatch(step *runtime.BatchStep) ([][]float32, error) {
	call := int(e.f.calls.Add(1))
	if e.f.stepDelay > 0 {
		time.Sleep(e.f.stepDelay)
	}
	if err := e.checkStep(step); err != nil {
		return nil, err
	}
	if e.f.failStep != nil && e.f.failStep(call) {
		return nil, errFakeStep
	}
	e.rows = e.rows[:0]
	if e.spec.StaticBatch() { // sequence i's cache is slots Blocks[0]*C..
		for i, s := range step.Seqs {
			table := make([]int32, s.Past+1)
			for p := range table {
				table[p] = s.Blocks[0]*int32(e.spec.Capacity) + int32(p)
			}
			if _, err := e.seq(step.IDs[i:i+1], s.Past, table, false); err != nil {
				return nil, err
			}
		}
		return e.rows, nil
	}
	off := 0
	for _, s := range step.Seqs {
		if _, err := e.seq(step.IDs[off:off+s.Tokens], s.Past, s.Blocks, true); err != nil {
			return nil, err
		}
		off += s.Tokens
	}
	return e.rows, nil
}

// checkStep refuses what the real graph could not run.
func (e *fakeExe) checkStep(step *runtime.BatchStep) error {
	sp := e.spec
	if e.kv == nil {
		return errors.New("fake graph: step before bind")
	}
	if sp.StaticBatch() {
		return e.checkStatic(step)
	}
	if len(step.Seqs) < 1 || len(step.Seqs) > sp.Batch {
		return fmt.Errorf("fake graph %s: %d sequences", sp.Name(), len(step.Seqs))
	}
	if len(step.IDs) < 1 || len(step.IDs) > sp.Chunk {
		return fmt.Errorf("fake graph %s: %d tokens", sp.Name(), len(step.IDs))
	}
	bs := e.f.shape.Block
	sum := 0
	written := map[int32]bool{}
	for i, s := range step.Seqs {
		sum += s.Tokens
		switch {
		case s.Tokens < 1 || s.Past < 0:
			return fmt.Errorf("fake graph %s: sequence %d: %d tokens at %d", sp.Name(), i, s.Tokens, s.Past)
		case s.Past+s.Tokens > sp.Capacity:
			return fmt.Errorf("fake graph %s: sequence %d: %d positions, capacity %d", sp.Name(), i, s.Past+s.Tokens, sp.Capacity)
		case len(s.Blocks)*bs < s.Past+s.Tokens:
			return fmt.Errorf("fake graph %s: sequence %d: %d blocks for %d positions", sp.Name(), i, len(s.Blocks), s.Past+s.Tokens)
		}
		for _, b := range s.Blocks {
			if b < 0 || int(b) >= e.blocks {
				return fmt.Errorf("fake graph %s: block %d outside the pool of %d", sp.Name(), b, e.blocks)
			}
		}
		for p := s.Past; p < s.Past+s.Tokens; p++ {
			b := s.Blocks[p/bs]
			if p%bs == 0 || p == s.Past {
				if written[b] {
					return fmt.Errorf("fake graph %s: block %d written by two sequences in one step", sp.Name(), b)
				}
				written[b] = true
			}
		}
	}
	if sum != len(step.IDs) {
		return fmt.Errorf("fake graph %s: sequences hold %d tokens of %d", sp.Name(), sum, len(step.IDs))
	}
	return nil
}

// checkStatic refuses what a static batched graph could not run: more
// sequences than its batch, a token count other than one, a position past
// its capacity, two sequences in one slot.
func (e *fakeExe) checkStatic(step *runtime.BatchStep) error {
	sp := e.spec
	if len(step.Seqs) < 1 || len(step.Seqs) > sp.Batch || len(step.IDs) != len(step.Seqs) {
		return fmt.Errorf("fake graph %s: %d sequences, %d ids", sp.Name(), len(step.Seqs), len(step.IDs))
	}
	taken := map[int32]bool{}
	for i, s := range step.Seqs {
		switch {
		case s.Tokens != 1 || s.Past < 0 || s.Past >= sp.Capacity:
			return fmt.Errorf("fake graph %s: sequence %d: %d tokens at %d", sp.Name(), i, s.Tokens, s.Past)
		case len(s.Blocks) != 1 || s.Blocks[0] < 0 || int(s.Blocks[0]) >= sp.Batch:
			return fmt.Errorf("fake graph %s: sequence %d: slots %v", sp.Name(), i, s.Blocks)
		case taken[s.Blocks[0]]:
			return fmt.Errorf("fake graph %s: two sequences in slot %d", sp.Name(), s.Blocks[0])
		}
		taken[s.Blocks[0]] = true
	}
	return nil
}

// seq reads a sequence's rows before past, writes ids' rows at past.. and
// appends its logits to e.rows.
func (e *fakeExe) seq(ids []int64, past int, table []int32, check bool) ([]float32, error) {
	bs := e.f.shape.Block
	h := uint64(0x6a09e667f3bcc909)
	for p := 0; p < past; p++ {
		h = mix(h, e.row(table[p/bs], p%bs))
	}
	for i, id := range ids {
		p := past + i
		b := table[p/bs]
		if check && e.f.checkWrite != nil {
			if err := e.f.checkWrite(b); err != nil {
				return nil, fmt.Errorf("fake graph: position %d: %w", p, err)
			}
		}
		r := e.row(b, p%bs)
		binary.LittleEndian.PutUint32(r[0:], uint32(id))
		binary.LittleEndian.PutUint32(r[4:], uint32(p))
		binary.LittleEndian.PutUint64(r[8:], h)
		h = mix(h, r)
	}
	logits := make([]float32, e.f.vocab)
	for i := range logits {
		logits[i] = float32(splitmix(h^uint64(i)*0x9e3779b97f4a7c15)>>40) / (1 << 24) * 8
	}
	e.rows = append(e.rows, logits)
	return logits, nil
}

// row is head 0 of layer 0's K at offset off of block b: HeadDim elements
// at ((b*KVHeads+0)*Block+off)*HeadDim.
func (e *fakeExe) row(b int32, off int) []byte {
	sh := e.f.shape
	n := sh.HeadDim * sh.ElemBytes
	at := (int(b)*sh.KVHeads*sh.Block + off) * n
	return e.kv.K[0][at : at+n]
}

func mix(h uint64, row []byte) uint64 {
	for i := 0; i+8 <= len(row); i += 8 {
		h = splitmix(h ^ binary.LittleEndian.Uint64(row[i:]))
	}
	return h
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// solo decodes r alone through the fake's Step (one sequence, identity
// block table, a KV of its own): the reference the engine's batches must
// match token for token. It stops where the engine does.
func solo(f *fakeCompiler, maxContext int, r Request) ([]int64, string, error) {
	smp, err := r.Sampling.Sampler()
	if err != nil {
		return nil, "", err
	}
	e := &fakeExe{f: &fakeCompiler{shape: f.shape, vocab: f.vocab}, spec: model.GraphSpec{Capacity: maxContext, Chunk: maxContext}}
	buf, kv, err := runtime.AllocFullView(f.shape, maxContext)
	if err != nil {
		return nil, "", err
	}
	defer buf.Free()
	if err := e.Bind(kv); err != nil {
		return nil, "", err
	}
	logits, err := e.Step(r.Prompt, 0)
	if err != nil {
		return nil, "", err
	}
	var out []int64
	for pos := len(r.Prompt); ; pos++ {
		tok := smp.Next(logits)
		out = append(out, tok)
		switch {
		case r.IsEOG != nil && r.IsEOG(tok):
			return out, ReasonStop, nil
		case len(out) == r.MaxTokens, pos+1 >= maxContext:
			return out, ReasonLength, nil
		}
		if logits, err = e.Step([]int64{tok}, pos); err != nil {
			return nil, "", err
		}
	}
}
