package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ovtoolkit/ovrun/runtime"
)

// The scheduling loop. One goroutine owns the running sequences, the block
// pool and the graphs' steps; Generate only queues a request and waits for
// its outcome. Each iteration:
//
//  1. drops the sequences (and queued requests) whose context ended;
//  2. admits queued requests, first come first served, while fewer than
//     MaxSeqs run, each starting from its longest cached prefix;
//  3. plans the step: one token for every decoding sequence, then prompt
//     chunks of the prefilling ones in admission order with what is left
//     of MaxBatchTokens (a long prompt goes on next step: chunked
//     prefill). A sequence whose next tokens need a rung not compiled yet
//     sits out (a prompt chunk is cut to what the compiled rungs hold);
//  4. gives each carried sequence the blocks its new positions need;
//  5. runs the step on the smallest compiled rung that holds them all;
//  6. chooses a token for every sequence whose last pending token was in
//     the step, hands it to Emit, and ends the sequences that stop.
//
// With nothing to run it sleeps until a request, a cancellation or a
// compile wakes it.

// loop runs iterations until the engine stops.
func (b *Batched) loop() {
	defer b.wg.Done()
	defer b.shutdown()
	var sweep <-chan time.Time // idle variants are freed while nothing runs too
	if b.cfg.RungIdle > 0 {
		t := time.NewTicker(max(b.cfg.RungIdle/4, 10*time.Millisecond))
		defer t.Stop()
		sweep = t.C
	}
	for b.ctx.Err() == nil {
		if b.iterate() {
			continue
		}
		select {
		case <-b.ctx.Done():
		case <-b.wake:
		case <-sweep:
		}
	}
}

// counters are the loop's running totals, published in the snapshot.
type counters struct {
	steps, stepTokens, prefillTokens int64
}

// planned is a sequence's part of the step being built.
type planned struct {
	s *seq
	n int // its tokens in the step
}

// rungView is the loop's copy of the rungs' state for one iteration.
type rungView struct {
	exe      []runtime.BatchExecutable // nil: not ready
	state    []string
	err      []error
	maxReady int // capacity of the largest ready rung, 0: none
}

// iterate runs one iteration and reports whether a step ran.
func (b *Batched) iterate() bool {
	b.dropEnded()
	b.admit()
	if b.static != nil {
		ran := b.stepStatic()
		b.compact()
		b.publish()
		return ran
	}
	v := b.view()
	carry := b.plan(v)
	if len(carry) > 0 {
		b.run(v, carry)
	}
	b.compact()
	b.publish()
	return len(carry) > 0
}

// dropEnded ends the sequences and queued requests whose context ended.
func (b *Batched) dropEnded() {
	for _, s := range b.running {
		if err := s.ctx.Err(); err != nil && !s.over {
			b.end(s, "", fmt.Errorf("request %d ended after %d tokens: %w", s.id, s.made, err))
		}
	}
	b.compact()
	var gone []*seq
	b.mu.Lock()
	b.queue = slices.DeleteFunc(b.queue, func(s *seq) bool {
		if s.ctx.Err() != nil {
			gone = append(gone, s)
			return true
		}
		return false
	})
	b.mu.Unlock()
	for _, s := range gone {
		b.end(s, "", fmt.Errorf("request %d ended while queued: %w", s.id, s.ctx.Err()))
	}
}

// admit moves queued requests into free sequence slots. A prompt starts
// past the longest chain of cached full blocks it begins with, but always
// computes its last token: its logits choose the first answer token.
func (b *Batched) admit() {
	b.mu.Lock()
	n := min(len(b.queue), b.cfg.MaxSeqs-len(b.running))
	adm := slices.Clone(b.queue[:n])
	b.queue = slices.Delete(b.queue, 0, n)
	b.mu.Unlock()
	bs := b.cfg.Shape.Block
	for _, s := range adm {
		s.admitted = time.Now()
		b.running = append(b.running, s)
		if b.static != nil {
			k, _ := b.cfg.Ladder.RungFor(len(s.req.Prompt))
			b.static.place(s, k)
			continue
		}
		s.blocks, s.parent = b.pool.match(s.req.Prompt, (len(s.req.Prompt)-1)/bs)
		s.full = len(s.blocks)
		s.past = s.full * bs
		s.cached = s.past
	}
}

// view copies the rungs' state.
func (b *Batched) view() rungView {
	n := len(b.rungs)
	v := rungView{exe: make([]runtime.BatchExecutable, n), state: make([]string, n), err: make([]error, n)}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.rungs {
		r := &b.rungs[i]
		v.state[i], v.err[i] = r.state, r.err
		if r.state == RungReady {
			v.exe[i] = r.exe
			v.maxReady = r.spec.Capacity
		}
	}
	return v
}

// plan chooses the step's sequences and their token counts and gives them
// their blocks. It queues the compiles the sequences will need and ends
// those that need a rung that failed.
func (b *Batched) plan(v rungView) []planned {
	for _, s := range b.running {
		b.prefetch(s, v)
	}
	budget := b.cfg.MaxBatchTokens
	var carry []planned
	for _, decoding := range []bool{true, false} {
		for _, s := range b.running {
			if budget == 0 {
				return carry
			}
			if s.over || (s.made > 0) != decoding {
				continue
			}
			n := min(len(s.tokens)-s.past, budget, v.maxReady-s.past)
			if n <= 0 {
				k, _ := b.cfg.Ladder.RungFor(s.past + 1)
				if err := v.err[k]; err != nil {
					b.end(s, "", fmt.Errorf("request %d needs a context of %d tokens: %w", s.id, s.past+1, err))
				} else {
					b.wantIdle(v, k)
				}
				continue // sits out until its rung is compiled
			}
			if err := b.grow(s, s.past+n); err != nil {
				b.end(s, "", fmt.Errorf("request %d: %w", s.id, err))
				continue
			}
			carry = append(carry, planned{s, n})
			budget -= n
		}
	}
	return carry
}

// prefetch queues the compiles s will need: the rung of its whole pending
// context when no compiled rung holds it, and the next rung once it is
// past half of its current one.
func (b *Batched) prefetch(s *seq, v rungView) {
	if s.over {
		return
	}
	ctx := len(s.tokens)
	k, _ := b.cfg.Ladder.RungFor(ctx)
	if v.maxReady < ctx {
		b.wantIdle(v, k)
	}
	if k+1 < len(b.cfg.Ladder) && 2*ctx > b.cfg.Ladder[k] {
		b.wantIdle(v, k+1)
	}
}

// grow gives s the blocks that positions up to tokens need.
func (b *Batched) grow(s *seq, tokens int) error {
	for len(s.blocks)*b.cfg.Shape.Block < tokens {
		blk, err := b.pool.alloc()
		if err != nil {
			return err
		}
		s.blocks = append(s.blocks, blk)
	}
	return nil
}

// run builds and runs the step, then advances its sequences.
func (b *Batched) run(v rungView, carry []planned) {
	step := &b.step
	step.IDs, step.Seqs = step.IDs[:0], step.Seqs[:0]
	need, prefill := 0, 0
	for _, c := range carry {
		s := c.s
		step.IDs = append(step.IDs, s.tokens[s.past:s.past+c.n]...)
		step.Seqs = append(step.Seqs, runtime.BatchSeq{Tokens: c.n, Past: s.past, Blocks: s.blocks})
		need = max(need, s.past+c.n)
		if s.made == 0 {
			prefill += c.n
		}
	}
	k := 0
	for v.exe[k] == nil || b.cfg.Ladder[k] < need { // plan keeps need <= maxReady
		k++
	}
	logits, start, dur, err := infer(v.exe[k], step, len(carry))
	var seqs []*seq // what an OnStep reports (stepDone reads them only then)
	if b.cfg.OnStep != nil {
		seqs = make([]*seq, len(carry))
		for i, c := range carry {
			seqs[i] = c.s
		}
	}
	info := b.stepDone(start, dur, b.cfg.Ladder[k], seqs, len(step.IDs), prefill, err)
	if b.cfg.OnStep != nil {
		defer b.cfg.OnStep(info) // after the tokens are chosen and emitted
	}
	for i, c := range carry {
		if err != nil {
			b.end(c.s, "", fmt.Errorf("request %d: %w", c.s.id, err))
			continue
		}
		b.advance(c.s, c.n, logits[i])
	}
}

// infer runs step, which carries n sequences, on exe: a logits row per
// sequence, when the inference started and how long it took.
func infer(exe runtime.BatchExecutable, step *runtime.BatchStep, n int) ([][]float32, time.Time, time.Duration, error) {
	start := time.Now()
	logits, err := exe.StepBatch(step)
	dur := time.Since(start)
	if err == nil && len(logits) != n {
		err = fmt.Errorf("%d rows of logits for %d sequences", len(logits), n)
	}
	if err != nil {
		err = fmt.Errorf("batch step on graph %s (%d sequences, %d tokens): %w", exe.Spec().Name(), n, len(step.IDs), err)
	}
	return logits, start, dur, err
}

// stepDone counts a step and, when the engine has an OnStep, describes it.
func (b *Batched) stepDone(start time.Time, dur time.Duration, rung int, seqs []*seq, tokens, prefill int, err error) StepInfo {
	b.counts.steps++
	b.counts.stepTokens += int64(tokens)
	b.counts.prefillTokens += int64(prefill)
	if b.cfg.OnStep == nil {
		return StepInfo{}
	}
	info := StepInfo{Start: start, Dur: dur, Rung: rung, Seqs: len(seqs), Tokens: tokens,
		PrefillTokens: prefill, Err: err, SeqIDs: make([]uint64, len(seqs)), Contexts: make([]context.Context, len(seqs))}
	for i, s := range seqs {
		info.SeqIDs[i], info.Contexts[i] = s.id, s.ctx
	}
	return info
}

// advance records that s's next n tokens are in the pool, registers its
// newly full blocks in the prefix cache and, when nothing of it is pending
// any more, chooses its next token from logits and decides whether it
// stops.
func (b *Batched) advance(s *seq, n int, logits []float32) {
	s.past += n
	if bs := b.cfg.Shape.Block; b.pool != nil {
		for (s.full+1)*bs <= s.past {
			j := s.full
			s.parent = b.pool.register(s.blocks[j], s.parent, s.tokens[j*bs:(j+1)*bs])
			s.full++
		}
	}
	if s.past < len(s.tokens) {
		return // the prompt goes on next step
	}
	if err := finite(logits); err != nil {
		b.end(s, "", fmt.Errorf("request %d after %d tokens: %w", s.id, s.made, err))
		return
	}
	tok := s.sampler.Next(logits)
	s.tokens = append(s.tokens, tok)
	if s.made++; s.made == 1 {
		s.first = time.Now()
	}
	switch {
	case s.req.Emit != nil && !s.req.Emit(tok):
		b.end(s, ReasonStop, nil)
	case s.req.IsEOG != nil && s.req.IsEOG(tok):
		b.end(s, ReasonStop, nil)
	case s.made >= s.req.MaxTokens, len(s.tokens) >= b.MaxContext():
		b.end(s, ReasonLength, nil)
	}
}

// finite returns an error wrapping runtime.ErrNonFinite when logits hold a
// NaN or an infinity: every token after would be garbage.
func finite(logits []float32) error {
	for i, x := range logits {
		if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%w: logit %d is %v", runtime.ErrNonFinite, i, x)
		}
	}
	return nil
}

// end finishes s: its blocks go back to the pool (or the prefix cache) and
// its Generate returns.
func (b *Batched) end(s *seq, reason string, err error) {
	switch {
	case b.static != nil && s.rung >= 0:
		b.static.remove(s)
	case b.pool != nil:
		b.pool.release(s.blocks)
	}
	s.blocks, s.over = nil, true
	b.publish() // before Generate returns: its caller may look at Stats
	fin := Finish{Reason: reason, Tokens: s.made, Prompt: len(s.req.Prompt), Cached: s.cached}
	if s.admitted.IsZero() {
		fin.Queued = time.Since(s.enqueued)
	} else {
		fin.Queued = s.admitted.Sub(s.enqueued)
	}
	if !s.first.IsZero() {
		fin.TTFT = s.first.Sub(s.enqueued)
	}
	s.done <- outcome{fin, err}
}

// compact forgets the sequences that ended.
func (b *Batched) compact() {
	b.running = slices.DeleteFunc(b.running, func(s *seq) bool { return s.over })
}

// shutdown ends every sequence and queued request once the loop stops.
func (b *Batched) shutdown() {
	err := b.stopErr()
	b.mu.Lock()
	b.stopped = true
	q := b.queue
	b.queue = nil
	b.mu.Unlock()
	for _, s := range b.running {
		if !s.over {
			b.end(s, "", fmt.Errorf("request %d after %d tokens: %w", s.id, s.made, err))
		}
	}
	for _, s := range q {
		b.end(s, "", fmt.Errorf("request %d while queued: %w", s.id, err))
	}
	b.compact()
	b.publish()
}

// publish copies the loop's state into the snapshot Stats returns.
func (b *Batched) publish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := &b.snap
	st.Running = 0
	for _, s := range b.running {
		if !s.over {
			st.Running++
		}
	}
	if b.static != nil {
		b.static.publish(st)
	} else {
		p := b.pool
		st.BlocksTotal, st.BlocksUsed, st.BlocksCached, st.BlocksFree = p.total, p.used, p.lru.Len(), p.free.Len()
		st.BlockTokens, st.LiveTokens = p.size, p.used*p.size
		st.PrefixHitBlocks, st.PrefixMissBlocks = p.hitBlocks, p.missBlocks
		st.PrefixHitTokens, st.PrefixMissTokens = p.hitTokens, p.missTokens
		st.PrefixEvictions = p.evictions
	}
	st.Steps, st.StepTokens, st.PrefillTokens = b.counts.steps, b.counts.stepTokens, b.counts.prefillTokens
}
