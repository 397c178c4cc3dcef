package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/ladder"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// Continuous batching. Batched keeps one pool of KV blocks, bound to the
// batched paged graph of every rung, and a goroutine that runs one
// inference per step over every admitted sequence (batchloop.go). A
// sequence's positions live in the blocks of its own block table, so a
// step may move to a larger rung without copying anything: the tables
// stay, only the graph that reads them changes. The graphs compile ahead
// in a background worker (batchrungs.go); the pool and the prefix cache
// are in blocks.go.

// ErrClosed is returned (wrapped) by Generate once the engine is closed.
var ErrClosed = errors.New("engine closed")

// BatchConfig configures a Batched engine.
type BatchConfig struct {
	// Ladder is the rung capacities: one sequence holds at most
	// Ladder.Max() tokens, and a step runs on the smallest compiled rung
	// that holds every sequence it carries.
	Ladder ladder.Ladder
	// MaxSeqs is the most sequences a step carries (the graphs' Batch);
	// further requests wait in a queue.
	MaxSeqs int
	// MaxBatchTokens is the most tokens a step carries (the graphs'
	// Chunk): one per decoding sequence first, then prompt chunks. At
	// least MaxSeqs, so that every decoding sequence advances every step.
	MaxBatchTokens int
	// Shape is the KV geometry; Block (tokens per block, model.PagedBlock
	// for the CPU plugin) must be more than 1 for paged graphs, 0 or 1 for
	// static ones.
	Shape runtime.KVShape
	// Attention is model.AttentionPaged (batched paged graphs, every rung
	// one graph over one block pool) or model.AttentionStatic (static
	// batched graphs, the NPU's form: a graph per rung and batch size,
	// one token per sequence a step, static.go; MaxBatchTokens and the
	// prefix cache do not apply). KVPrecision is the graphs'
	// (model.GraphSpec.KVPrecision).
	Attention   model.Attention
	KVPrecision string
	// PrefixCacheBlocks is how many blocks of finished sequences (prompts
	// and answers, whole blocks) are kept for later prompts that start
	// with the same tokens, least recently used out first; 0: no prefix
	// cache.
	PrefixCacheBlocks int
	// CompileCost, with static graphs, budgets the variants' compiles and
	// launches the next rung's by deadline (budget.go); nil keeps the
	// half-rung rule (static.go).
	CompileCost *compilecost.Profile
	// RungIdle, with static graphs, frees a variant (not the first rung's
	// for one sequence) that no step has run for this long while no
	// sequence is on its rung or the rung below; it is compiled again when
	// needed. 0 keeps every variant.
	RungIdle time.Duration
	// OnStep, when set, is called after every step on the engine's
	// goroutine (metrics, traces); like Request.Emit it must not block.
	OnStep func(StepInfo)
}

// Batched is an Engine that batches sequences continuously on batched
// paged graphs. Its pool holds MaxSeqs*ceil(Ladder.Max()/Block) blocks
// plus the prefix cache's, so every admitted sequence can always grow to
// the largest context: nothing is ever preempted or recomputed.
type Batched struct {
	cfg     BatchConfig
	comp    runtime.Compiler
	ctx     context.Context // ends with Close or NewBatched's ctx
	cancel  context.CancelCauseFunc
	wg      sync.WaitGroup
	wake    chan struct{} // the loop has work: a request, a cancel, a compile
	work    chan struct{} // the compile worker has work
	ids     atomic.Uint64
	kv      *runtime.KV  // the paged form's block pool
	static  *staticStore // the static form's caches; nil for paged graphs
	budgets *budgets     // with CompileCost; guarded by mu

	// bufMu guards bufs alone, so that measuring the committed pages (a
	// pagemap read per mapping, milliseconds for a large pool) in Stats
	// never holds mu, which the loop takes every step.
	bufMu sync.RWMutex
	bufs  []*runtime.KVBuffer // the reservations; nil after Close

	mu          sync.Mutex
	queue       []*seq // waiting for a slot, FIFO
	stopped     bool   // the loop has ended: no more requests
	rungs       []rung
	snap        BatchStats // the loop's part, published after each iteration
	released    int64      // variants freed after RungIdle
	releaseErrs []error    // their graphs' Close errors, for Close

	closeOnce sync.Once
	closeErr  error

	// The loop goroutine's own state.
	pool    *blockPool // the paged form's; nil for static graphs
	running []*seq     // admission order
	step    runtime.BatchStep
	counts  counters
}

var _ Engine = (*Batched)(nil)

// NewBatched checks cfg, reserves the block pool (address space only:
// pages are committed as blocks are first written) and starts the engine's
// goroutines. It compiles nothing: Warm compiles the first rung, or the
// first request does. ctx ending stops the engine as Close does, but only
// Close frees the pool and the graphs.
func NewBatched(ctx context.Context, comp runtime.Compiler, cfg BatchConfig) (*Batched, error) {
	if err := cfg.check(comp); err != nil {
		return nil, err
	}
	b := &Batched{cfg: cfg, comp: comp, wake: make(chan struct{}, 1), work: make(chan struct{}, 1)}
	b.cfg.Ladder = append(ladder.Ladder(nil), cfg.Ladder...)
	var specs []model.GraphSpec
	if cfg.Attention == model.AttentionStatic {
		st, err := newStaticStore(&b.cfg)
		if err != nil {
			return nil, err
		}
		b.static, b.bufs, specs = st, st.buffers(), st.variants(&b.cfg)
		st.used = make([]time.Time, len(specs))
	} else {
		bs := cfg.Shape.Block
		perSeq := (cfg.Ladder.Max() + bs - 1) / bs
		blocks := cfg.MaxSeqs*perSeq + cfg.PrefixCacheBlocks
		buf, err := runtime.AllocKV(cfg.Shape, blocks*bs, false)
		if err != nil {
			return nil, fmt.Errorf("reserve the kv block pool (%d blocks of %d tokens): %w", blocks, bs, err)
		}
		if b.kv, err = buf.View(blocks * bs); err != nil {
			return nil, errors.Join(err, buf.Free())
		}
		b.bufs, b.pool = []*runtime.KVBuffer{buf}, newBlockPool(blocks, bs, cfg.PrefixCacheBlocks)
		for _, c := range b.cfg.Ladder {
			specs = append(specs, model.GraphSpec{Capacity: c, Chunk: cfg.MaxBatchTokens, Attention: cfg.Attention,
				KVPrecision: cfg.KVPrecision, Shared: true, Batch: cfg.MaxSeqs})
		}
	}
	for _, spec := range specs {
		b.rungs = append(b.rungs, rung{state: RungIdle, done: make(chan struct{}), spec: spec})
	}
	if cfg.CompileCost != nil {
		b.budgets = newBudgets(cfg.CompileCost)
	}
	b.ctx, b.cancel = context.WithCancelCause(ctx)
	b.publish()
	b.wg.Add(2)
	go b.loop()
	go b.compileWorker()
	return b, nil
}

// check refuses a configuration the engine cannot run.
func (c *BatchConfig) check(comp runtime.Compiler) error {
	static := c.Attention == model.AttentionStatic
	switch {
	case comp == nil:
		return errors.New("batched engine: no compiler")
	case c.MaxSeqs < 1:
		return fmt.Errorf("batched engine: max sequences %d: want at least 1", c.MaxSeqs)
	case static && c.Shape.Block > 1:
		return fmt.Errorf("batched engine: static graphs keep each sequence's cache in single slots, not blocks of %d", c.Shape.Block)
	case static && c.PrefixCacheBlocks != 0:
		return fmt.Errorf("batched engine: static graphs share no prefix cache (%d blocks asked for): a sequence's cache is one slot of its rung", c.PrefixCacheBlocks)
	case c.Shape.Layers < 1 || c.Shape.KVHeads < 1 || c.Shape.HeadDim < 1:
		return fmt.Errorf("batched engine: kv shape %d layers, %d heads of %d: want all positive", c.Shape.Layers, c.Shape.KVHeads, c.Shape.HeadDim)
	case static:
	case c.MaxBatchTokens < c.MaxSeqs:
		return fmt.Errorf("batched engine: max batch tokens %d: want at least max sequences (%d), so that every decoding sequence advances every step", c.MaxBatchTokens, c.MaxSeqs)
	case c.Shape.Block <= 1:
		return fmt.Errorf("batched engine: kv block of %d tokens: a paged cache needs blocks of more than 1 (model.PagedBlock is %d)", c.Shape.Block, model.PagedBlock)
	case c.Attention != model.AttentionPaged:
		return fmt.Errorf("batched engine: attention %q: batched graphs need %q or %q", c.Attention, model.AttentionPaged, model.AttentionStatic)
	case (c.CompileCost != nil || c.RungIdle != 0) && !static:
		return errors.New("batched engine: compile budgets and idle release apply to static graphs (a variant per rung and batch size); paged graphs share one compiled graph")
	case c.RungIdle < 0:
		return fmt.Errorf("batched engine: rung idle %v: want 0 (keep every variant) or more", c.RungIdle)
	case c.PrefixCacheBlocks < 0:
		return fmt.Errorf("batched engine: prefix cache of %d blocks: want 0 (none) or more", c.PrefixCacheBlocks)
	}
	if err := ladder.Validate(c.Ladder); err != nil {
		return fmt.Errorf("batched engine: %w", err)
	}
	return nil
}

// seq is one request on its way through the engine. After Generate
// enqueues it, only the loop goroutine touches it.
type seq struct {
	id      uint64
	ctx     context.Context
	req     Request
	sampler *runtime.Sampler
	tokens  []int64 // the prompt, then every token chosen
	past    int     // tokens whose K/V the pool holds: tokens[past:] go into the next step
	blocks  []int32 // block table: blocks[j] holds positions j*Block..
	full    int     // leading blocks registered in (or found in) the prefix cache
	parent  uint64  // entry id of block full-1, the parent of the next one
	cached  int     // prompt tokens whose K/V came from the prefix cache
	made    int     // tokens generated
	// rung and slot place it in the static form's caches (static.go):
	// blocks is then {slot}. -1 before admission and after.
	rung, slot int

	enqueued, admitted, first time.Time

	over bool         // ended: its outcome is sent
	done chan outcome // buffered: the loop never waits on it
}

type outcome struct {
	fin Finish
	err error
}

// Generate queues r and waits for the engine goroutine to finish it. A
// request that does not fit the largest context, or whose sampling
// settings are wrong, fails at once.
func (b *Batched) Generate(ctx context.Context, r Request) (Finish, error) {
	start := time.Now()
	if err := r.check(b.MaxContext()); err != nil {
		return Finish{}, err
	}
	smp, err := r.Sampling.Sampler()
	if err != nil {
		return Finish{}, err
	}
	s := &seq{id: b.ids.Add(1), ctx: ctx, req: r, sampler: smp, enqueued: start, rung: -1, slot: -1,
		tokens: append(make([]int64, 0, len(r.Prompt)+min(r.MaxTokens, b.MaxContext())), r.Prompt...),
		done:   make(chan outcome, 1)}
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return Finish{Prompt: len(r.Prompt)}, b.stopErr()
	}
	b.queue = append(b.queue, s)
	b.mu.Unlock()
	b.poke()
	// A cancelled request must not wait for the next step that happens
	// to come: wake the loop, which drops it and answers.
	stop := context.AfterFunc(ctx, b.poke)
	defer stop()
	o := <-s.done
	return o.fin, o.err
}

// MaxContext is the largest rung.
func (b *Batched) MaxContext() int { return b.cfg.Ladder.Max() }

// Ready reports whether the first rung's graph (the static form: its
// variant for one sequence) is compiled.
func (b *Batched) Ready() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rungs[0].state == RungReady
}

// Warm compiles the first rung's graph and waits for it, so that the
// first request does not pay the compile.
func (b *Batched) Warm(ctx context.Context) error {
	b.want(0)
	r := &b.rungs[0]
	select {
	case <-r.done:
	case <-ctx.Done():
		return fmt.Errorf("warm the batched engine: %w", ctx.Err())
	case <-b.ctx.Done():
		return b.stopErr()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return r.err
}

// Stats is a snapshot of the engine, safe to take from any goroutine.
func (b *Batched) Stats() BatchStats {
	reserved, committed := int64(0), int64(-1)
	b.bufMu.RLock()
	if b.bufs != nil {
		committed = 0
	}
	for _, buf := range b.bufs {
		reserved += buf.Bytes()
		if n, err := buf.Committed(); err == nil && committed >= 0 {
			committed += n
		} else {
			committed = -1
		}
	}
	b.bufMu.RUnlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.snap
	st.Waiting = len(b.queue)
	st.Released = b.released
	st.KVReservedBytes, st.KVCommittedBytes = reserved, committed
	st.Rungs = make([]RungStats, len(b.rungs))
	for i, r := range b.rungs {
		st.Rungs[i] = RungStats{Capacity: r.spec.Capacity, Batch: r.spec.Batch, State: r.state, Compile: r.dur, Tries: r.tries,
			Compiles: r.compiles, CompileTotal: r.compileTotal}
		if r.err != nil {
			st.Rungs[i].Err = r.err.Error()
		}
	}
	return st
}

// Close stops the engine: requests in flight or queued return an error
// wrapping ErrClosed, a compile in progress is cancelled, the graphs are
// closed and the pool is unmapped. It waits for the engine's goroutines,
// which end between steps. Calling it again returns the first result.
func (b *Batched) Close() error {
	b.closeOnce.Do(func() {
		b.cancel(ErrClosed)
		b.wg.Wait()
		var errs []error
		b.mu.Lock()
		defer b.mu.Unlock()
		for i := range b.rungs {
			if exe := b.rungs[i].exe; exe != nil {
				if err := exe.Close(); err != nil {
					errs = append(errs, fmt.Errorf("close graph %s: %w", b.rungs[i].spec.Name(), err))
				}
				b.rungs[i].exe = nil
			}
		}
		errs = append(errs, b.releaseErrs...)
		b.bufMu.Lock()
		for _, buf := range b.bufs {
			errs = append(errs, buf.Free())
		}
		b.bufs = nil
		b.bufMu.Unlock()
		b.closeErr = errors.Join(errs...)
	})
	return b.closeErr
}

// stopErr is what requests get once the engine has stopped.
func (b *Batched) stopErr() error {
	return fmt.Errorf("batched engine stopped: %w", context.Cause(b.ctx))
}

// poke wakes the loop (it never blocks: one pending wake is enough).
func (b *Batched) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}
