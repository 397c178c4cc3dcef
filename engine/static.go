package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ovtoolkit/ovrun/ladder"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// Continuous batching on static graphs, the NPU's form: every shape of a
// graph is fixed, so a graph steps a fixed number B of sequences by one
// token each (model.GraphSpec.StaticBatch), over B caches of the rung's
// capacity C that lie back to back. The ladder becomes capacity x batch:
// a variant is a rung's capacity and a B from 1, 2, 4, ... up to MaxSeqs.
//
// Each rung owns one reservation of MaxSeqs caches of its capacity
// (pages committed as positions are written). A sequence lives in one
// slot of one rung; the sequences of a rung always hold its lowest slots
// (one that leaves is replaced by the rung's last, whose rows are copied
// down), so the B-variant binds the first B caches of the same
// reservation and every variant of a rung reads the same memory. A step
// runs, for each rung that holds sequences, the smallest compiled variant
// that takes them all, one token of each: a prompt token while it
// prefills, a decode token after. A sequence whose next position is past
// its rung's capacity moves into the next rung's batch: its rows are
// copied into a free slot there (a memcpy of the live prefix), as the
// sequential ladder migrates a sequence's cache.
//
// Variants compile ahead in the same worker as the paged rungs, on both
// axes: the variant a rung's sequences need now; the next batch size of a
// rung once its batch is full (the next request to land there needs it);
// and the next rung's variant for one more sequence once any sequence is
// past half of its rung. See docs/design.md §9.

// staticStore is the static form's caches and the sequences in them.
type staticStore struct {
	shape   runtime.KVShape
	batches []int // variant batch sizes: 1, 2, 4, ... MaxSeqs
	rungs   []staticRung
	// iterS is the last iteration's duration: the time between two
	// positions of every running sequence (budget.go's live rate).
	iterS float64
	// used is when each variant last ran (or was first seen ready), and
	// sweep when idle variants are looked for next (BatchConfig.RungIdle).
	used  []time.Time
	sweep time.Time
}

// staticRung is one capacity's caches: MaxSeqs caches of capacity slots
// back to back, seqs[i] in cache i.
type staticRung struct {
	capacity int
	buf      *runtime.KVBuffer
	seqs     []*seq
}

// staticBatches are the batch sizes of the variants of maxSeqs: the powers
// of two below it, then maxSeqs.
func staticBatches(maxSeqs int) []int {
	var out []int
	for b := 1; b < maxSeqs; b *= 2 {
		out = append(out, b)
	}
	return append(out, maxSeqs)
}

// newStaticStore reserves every rung's caches.
func newStaticStore(cfg *BatchConfig) (*staticStore, error) {
	st := &staticStore{shape: cfg.Shape, batches: staticBatches(cfg.MaxSeqs)}
	for _, c := range cfg.Ladder {
		buf, err := runtime.AllocKV(cfg.Shape, cfg.MaxSeqs*c, false)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("reserve %d caches of %d slots for rung %d: %w", cfg.MaxSeqs, c, c, err), st.free())
		}
		st.rungs = append(st.rungs, staticRung{capacity: c, buf: buf})
	}
	return st, nil
}

// variants are the graphs of the static form, rung-major: variant
// k*len(batches)+j is rung k's capacity with batches[j] sequences.
func (st *staticStore) variants(cfg *BatchConfig) []model.GraphSpec {
	var out []model.GraphSpec
	for _, c := range cfg.Ladder {
		for _, n := range st.batches {
			out = append(out, model.GraphSpec{Capacity: c, Chunk: 1, Attention: model.AttentionStatic,
				KVPrecision: cfg.KVPrecision, Batch: n})
		}
	}
	return out
}

// variant is the index of rung k's variant of batch index j.
func (st *staticStore) variant(k, j int) int { return k*len(st.batches) + j }

// batchFor is the index of the smallest batch size that holds n sequences.
func (st *staticStore) batchFor(n int) int {
	j, _ := slices.BinarySearch(st.batches, n)
	return min(j, len(st.batches)-1)
}

// view is the cache a variant's graph binds: the first spec.Batch caches
// of its rung's reservation.
func (st *staticStore) view(k int, spec model.GraphSpec) (*runtime.KV, error) {
	return st.rungs[k].buf.View(spec.Batch * spec.Capacity)
}

// buffers are the reservations, for Stats and Close.
func (st *staticStore) buffers() []*runtime.KVBuffer {
	out := make([]*runtime.KVBuffer, len(st.rungs))
	for k := range st.rungs {
		out[k] = st.rungs[k].buf
	}
	return out
}

// free unmaps every reservation.
func (st *staticStore) free() error {
	var errs []error
	for k := range st.rungs {
		errs = append(errs, st.rungs[k].buf.Free())
	}
	return errors.Join(errs...)
}

// place puts a newly admitted sequence into the smallest rung that holds
// its prompt, in that rung's lowest free slot.
func (st *staticStore) place(s *seq, k int) {
	r := &st.rungs[k]
	s.rung, s.slot = k, len(r.seqs)
	s.blocks = []int32{int32(s.slot)}
	r.seqs = append(r.seqs, s)
}

// remove takes s out of its rung; the rung's last sequence takes its slot.
func (st *staticStore) remove(s *seq) {
	r := &st.rungs[s.rung]
	last := r.seqs[len(r.seqs)-1]
	if last != s {
		// One row more than last holds: when s ends inside a step's
		// results, the step has written last's row at last.past before
		// advance counts it.
		st.copyRows(s.rung, last.slot, s.rung, s.slot, min(last.past+1, r.capacity))
		last.slot = s.slot
		last.blocks[0] = int32(s.slot)
		r.seqs[s.slot] = last
	}
	r.seqs = r.seqs[:len(r.seqs)-1]
	s.rung, s.slot = -1, -1
}

// move takes s into rung k's batch, its rows with it.
func (st *staticStore) move(s *seq, k int) {
	from, slot := s.rung, s.slot
	to := len(st.rungs[k].seqs)
	st.copyRows(from, slot, k, to, s.past)
	st.remove(s) // after the copy: remove may fill s's old slot
	st.place(s, k)
}

// copyRows copies the first n positions of every layer's K and V from slot
// a of rung ka to slot b of rung kb.
func (st *staticStore) copyRows(ka, a, kb, b, n int) {
	if n == 0 {
		return
	}
	rb := st.shape.RowBytes()
	src, dst := st.rungs[ka].buf, st.rungs[kb].buf
	sv, _ := src.View(src.Capacity())
	dv, _ := dst.View(dst.Capacity())
	so, do := a*st.rungs[ka].capacity*rb, b*st.rungs[kb].capacity*rb
	for l := range sv.K {
		copy(dv.K[l][do:do+n*rb], sv.K[l][so:so+n*rb])
		copy(dv.V[l][do:do+n*rb], sv.V[l][so:so+n*rb])
	}
}

// stepStatic runs one step of the static form: for each rung holding
// sequences, one inference of one token each on the smallest compiled
// variant that takes them. It reports whether any ran.
func (b *Batched) stepStatic() bool {
	st := b.static
	t0 := time.Now()
	v := b.view()
	for _, s := range b.running {
		if !s.over && s.past >= st.rungs[s.rung].capacity {
			st.move(s, s.rung+1) // advance ends a sequence at the largest rung
		}
	}
	ran := false
	for k := range st.rungs {
		if b.stepRung(v, k) {
			ran = true
		}
	}
	if ran {
		st.iterS = time.Since(t0).Seconds()
	}
	b.releaseIdle(v, time.Now())
	return ran
}

// stepRung runs rung k's sequences, queueing the compiles they will need.
func (b *Batched) stepRung(v rungView, k int) bool {
	st := b.static
	r := &st.rungs[k]
	n := len(r.seqs)
	if n == 0 {
		return false
	}
	need := st.batchFor(n)
	why := ladder.ReasonBoundary // its sequences came from the rung below ...
	if slices.ContainsFunc(r.seqs, func(s *seq) bool { return s.made == 0 }) {
		why = ladder.ReasonAdmission // ... or some were placed here with their prompt
	}
	b.launch(v, st.variant(k, need), why, 0, -1)    // needed now, beside the other rungs' steps
	if n < b.cfg.MaxSeqs && n == st.batches[need] { // full: the next to land here needs the next size
		b.launch(v, st.variant(k, st.batchFor(n+1)), ladder.ReasonBatch, 0, -1)
	}
	if k+1 < len(st.rungs) {
		next := st.variant(k+1, st.batchFor(len(st.rungs[k+1].seqs)+1))
		if b.budgets != nil {
			b.dueNext(v, k, next)
		} else if slices.ContainsFunc(r.seqs, func(s *seq) bool { return 2*len(s.tokens) > r.capacity }) {
			b.wantIdle(v, next)
		}
	}
	j := -1 // the smallest ready variant that takes all n, else the largest ready
	for i := range st.batches {
		if v.exe[st.variant(k, i)] != nil {
			j = i
			if i >= need {
				break
			}
		}
	}
	if j < need {
		b.blockedOn(st.variant(k, need)) // some or all of them wait for it
	}
	if j < 0 {
		if err := v.err[st.variant(k, need)]; err != nil {
			for _, s := range slices.Clone(r.seqs) {
				b.end(s, "", fmt.Errorf("request %d needs a context of %d tokens: %w", s.id, s.past+1, err))
			}
		}
		return false // waits for its compile
	}
	carry := slices.Clone(r.seqs[:min(n, st.batches[j])])
	step := &b.step
	step.IDs, step.Seqs = step.IDs[:0], step.Seqs[:0]
	prefill := 0
	for _, s := range carry {
		step.IDs = append(step.IDs, s.tokens[s.past])
		step.Seqs = append(step.Seqs, runtime.BatchSeq{Tokens: 1, Past: s.past, Blocks: s.blocks})
		if s.made == 0 {
			prefill++
		}
	}
	st.used[st.variant(k, j)] = time.Now()
	logits, start, dur, err := infer(v.exe[st.variant(k, j)], step, len(carry))
	info := b.stepDone(start, dur, r.capacity, carry, len(carry), prefill, err)
	for i, s := range carry {
		if err != nil {
			b.end(s, "", fmt.Errorf("request %d: %w", s.id, err))
			continue
		}
		b.advance(s, 1, logits[i])
	}
	if b.cfg.OnStep != nil {
		b.cfg.OnStep(info) // after the tokens are chosen and emitted
	}
	return true
}

// releaseIdle frees the variants no step has run for RungIdle (a variant
// compiled and never run is idle from when the loop first sees it ready)
// while no sequence is on their rung or the rung below, which may move up
// any step. The first rung's variant for one sequence stays: it is what
// the engine compiled before the server said it was ready. It looks at
// most every RungIdle/4.
func (b *Batched) releaseIdle(v rungView, now time.Time) {
	st, idle := b.static, b.cfg.RungIdle
	if idle <= 0 || now.Before(st.sweep) {
		return
	}
	st.sweep = now.Add(max(idle/4, 10*time.Millisecond))
	for i := 1; i < len(b.rungs); i++ {
		if v.state[i] != RungReady {
			continue
		}
		if st.used[i].IsZero() {
			st.used[i] = now
		}
		k := i / len(st.batches)
		if now.Sub(st.used[i]) < idle || len(st.rungs[k].seqs) > 0 || (k > 0 && len(st.rungs[k-1].seqs) > 0) {
			continue
		}
		b.mu.Lock()
		r := &b.rungs[i]
		if err := r.exe.Close(); err != nil { // reported by Close: the engine goes on
			b.releaseErrs = append(b.releaseErrs, fmt.Errorf("free idle graph %s: %w", r.spec.Name(), err))
		}
		r.exe, r.state, r.done = nil, RungIdle, make(chan struct{})
		b.released++
		b.mu.Unlock()
		v.exe[i], v.state[i] = nil, RungIdle
		st.used[i] = time.Time{}
	}
}

// publish fills the static form's part of a snapshot: a sequence's cache
// is one block of its rung's capacity.
func (st *staticStore) publish(s *BatchStats) {
	s.BlocksTotal, s.BlocksUsed, s.LiveTokens = 0, 0, 0
	for k := range st.rungs {
		r := &st.rungs[k]
		s.BlocksTotal += st.batches[len(st.batches)-1]
		s.BlocksUsed += len(r.seqs)
		s.LiveTokens += len(r.seqs) * r.capacity
	}
	s.BlocksFree = s.BlocksTotal - s.BlocksUsed
}
