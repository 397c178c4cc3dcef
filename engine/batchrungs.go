package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// The rungs' graphs compile in one background worker, smallest queued rung
// first, so that a compile never stalls the steps of the sequences that do
// not need it. The loop queues a rung when a sequence needs it, and the
// next one up as soon as a sequence passes half of a rung, so that the
// larger graph is usually ready before anyone reaches it. Compiles run one
// at a time: on a real device parallel compiles compete for the cores the
// steps run on.
//
// A compile that fails is tried once more at once (a transient failure,
// e.g. memory pressure, should not cost requests). A rung that fails twice
// stays failed: the sequences that need it fail with its error, the
// smaller rungs go on serving the others, and restarting the engine is
// what tries again. Repeating a deterministic failure for every long
// request would only add a compile's latency to each error.

// rung is one capacity's graph. Its fields are guarded by Batched.mu, except
// done and spec, which never change.
type rung struct {
	spec  model.GraphSpec
	state string                  // RungIdle ... RungFailed
	exe   runtime.BatchExecutable // bound to the pool, once ready
	err   error                   // once failed
	dur   time.Duration
	tries int
	done  chan struct{} // closed when the rung is ready or failed; made anew when a freed variant is queued again
	// started is when its latest compile began (budgets' queue estimate).
	started time.Time
	// compiles and compileTotal count every compile since the start, a
	// variant freed and compiled again included.
	compiles     int
	compileTotal time.Duration
}

// want queues rung k for the compile worker unless it is queued, compiled
// or failed already.
func (b *Batched) want(k int) {
	b.mu.Lock()
	r := &b.rungs[k]
	queue := r.state == RungIdle
	if queue {
		r.state = RungQueued
	}
	b.mu.Unlock()
	if queue {
		select {
		case b.work <- struct{}{}:
		default:
		}
	}
}

// wantIdle queues rung (or static variant) k when the loop's view of
// this iteration has it idle, and marks it queued in that view.
func (b *Batched) wantIdle(v rungView, k int) {
	if v.state[k] == RungIdle {
		b.want(k)
		v.state[k] = RungQueued
	}
}

// compileWorker compiles queued rungs until the engine stops.
func (b *Batched) compileWorker() {
	defer b.wg.Done()
	for {
		k := b.nextQueued()
		if k < 0 {
			select {
			case <-b.ctx.Done():
				return
			case <-b.work:
				continue
			}
		}
		exe, dur, tries, err := b.compile(k, b.rungs[k].spec)
		b.mu.Lock()
		r := &b.rungs[k]
		r.dur, r.tries = dur, tries
		r.compiles += tries
		r.compileTotal += dur
		if err != nil {
			r.state, r.err = RungFailed, err
		} else {
			r.state, r.exe = RungReady, exe
		}
		b.compiled(k, dur, err != nil)
		close(r.done)
		b.mu.Unlock()
		b.poke()
		if b.ctx.Err() != nil {
			return
		}
	}
}

// nextQueued marks the smallest queued rung compiling and returns it; -1
// when none is queued.
func (b *Batched) nextQueued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.rungs {
		if b.rungs[k].state == RungQueued {
			b.rungs[k].state, b.rungs[k].started = RungCompiling, time.Now()
			return k
		}
	}
	return -1
}

// compile makes spec's graph and binds it to the pool, trying twice.
func (b *Batched) compile(k int, spec model.GraphSpec) (exe runtime.BatchExecutable, dur time.Duration, tries int, err error) {
	for tries < 2 {
		tries++
		t := time.Now()
		exe, err = b.compileOnce(k, spec)
		dur += time.Since(t)
		if err == nil {
			return exe, dur, tries, nil
		}
		if b.ctx.Err() != nil || errors.Is(err, errNotBatched) {
			break // a retry cannot help
		}
	}
	return nil, dur, tries, fmt.Errorf("compile graph %s (%d tries): %w", spec.Name(), tries, err)
}

// errNotBatched marks a compiler whose graphs cannot run batches.
var errNotBatched = errors.New("does not compile batched graphs")

func (b *Batched) compileOnce(k int, spec model.GraphSpec) (runtime.BatchExecutable, error) {
	exe, err := b.comp.Compile(b.ctx, spec)
	if err != nil {
		return nil, err
	}
	bx, ok := exe.(runtime.BatchExecutable)
	if !ok {
		return nil, errors.Join(fmt.Errorf("compiler %T %w (its executable %T has no StepBatch)", b.comp, errNotBatched, exe), exe.Close())
	}
	kv := b.kv
	if b.static != nil { // the first Batch caches of its rung's reservation
		if kv, err = b.static.view(k/len(b.static.batches), spec); err != nil {
			return nil, errors.Join(err, bx.Close())
		}
	}
	if err := bx.Bind(kv); err != nil {
		return nil, errors.Join(fmt.Errorf("bind the kv cache (%d slots): %w", kv.Capacity, err), bx.Close())
	}
	return bx, nil
}
