package ovexec

import (
	"context"
	"errors"
	"fmt"

	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/ov"
	"github.com/ovtoolkit/ovrun/runtime"
)

// This file lets one compiled paged graph serve every rung. A paged graph's
// capacity is only the declared bound of its caches' block count (the
// operation reads the blocks its sequence inputs name, and the plugin keeps
// no buffer of the bound's size), so the first rung compiles the graph for
// the model's whole context and each later rung takes a new infer request
// on it: no compile at a rung boundary, and one copy of the repacked
// weights for the whole ladder. Static and bounded graphs (NPU, GPU, the
// CPU without the extension) still compile per rung, as do a kernel
// graph's decode graphs (their caches are static:
// model.Weights.AttendsInKernel) and every graph with
// Options.GraphPerRung.

// reusedGraph is a compiled model that executables of several capacities
// share; the last one closed closes it.
type reusedGraph struct {
	bound int           // the largest capacity it serves
	ready chan struct{} // closed once cm or err is set
	cm    *ov.CompiledModel
	err   error
	refs  int
}

// reuseBound is the capacity a graph for spec is compiled for when later
// rungs may reuse it (the model's context length, or spec's capacity when
// that is larger), 0 when every capacity compiles its own graph.
func (c *Compiler) reuseBound(spec model.GraphSpec) int {
	if c.opts.GraphPerRung || spec.Attention != model.AttentionPaged || c.weights.AttendsInKernel(spec) {
		return 0
	}
	return max(spec.Capacity, c.ck.Config.MaxPositionEmbeddings)
}

// Reuses reports whether compiling spec would only make a new infer
// request on a graph compiled already (runtime.Reuser): one that covers
// its capacity and has finished compiling.
func (c *Compiler) Reuses(spec model.GraphSpec) bool {
	spec = c.withAttention(spec)
	if c.reuseBound(spec) == 0 {
		return false
	}
	c.mu.Lock()
	_, g := c.covering(spec)
	c.mu.Unlock()
	if g == nil {
		return false
	}
	select {
	case <-g.ready:
		return g.err == nil
	default:
		return false
	}
}

// covering is the key of spec's graph (spec without capacity) and the
// compiled graph under it when that one serves spec's capacity, else nil;
// c.mu is held.
func (c *Compiler) covering(spec model.GraphSpec) (key model.GraphSpec, g *reusedGraph) {
	key = spec
	key.Capacity = 0
	if g = c.reused[key]; g != nil && g.bound < spec.Capacity {
		g = nil
	}
	return key, g
}

// compileReused returns an executable of spec's capacity on the compiled
// graph that covers it, compiling that graph (for bound slots) when none
// does. Concurrent calls for the same graph wait for one compile.
func (c *Compiler) compileReused(ctx context.Context, spec model.GraphSpec, bound int) (runtime.Executable, error) {
	if err := c.injectedFailure(spec); err != nil {
		return nil, err
	}
	c.mu.Lock()
	key, g := c.covering(spec)
	if g != nil {
		g.refs++
		c.mu.Unlock()
		select {
		case <-g.ready:
		case <-ctx.Done():
			c.release(key, g)
			return nil, ctx.Err()
		}
		if g.err != nil {
			c.release(key, g)
			return nil, g.err
		}
		return c.reusedExecutable(spec, key, g)
	}
	g = &reusedGraph{bound: bound, ready: make(chan struct{}), refs: 1}
	if c.reused == nil {
		c.reused = map[model.GraphSpec]*reusedGraph{}
	}
	// A graph that covered less stays with the executables that use it.
	c.reused[key] = g
	c.mu.Unlock()

	full := spec
	full.Capacity = bound
	exe, err := c.compile(ctx, full)
	if err != nil {
		g.err = err
		close(g.ready)
		c.release(key, g)
		return nil, err
	}
	e := exe.(*executable)
	g.cm = e.compiled
	close(g.ready)
	e.spec = spec
	e.release = func() { c.release(key, g) }
	return e, nil
}

// reusedExecutable is a new infer request of spec's capacity on g, which
// the caller holds a reference to (released when the executable closes).
func (c *Compiler) reusedExecutable(spec, key model.GraphSpec, g *reusedGraph) (runtime.Executable, error) {
	// Its kernels were prepared by the first executable's warm-up.
	e := c.executableOn(spec, g.cm, 0, runtime.Origin{Source: runtime.OriginReused}, nil)
	e.release = func() { c.release(key, g) }
	if err := e.prepare(); err != nil {
		return nil, errors.Join(fmt.Errorf("prepare graph %s on the compiled graph of capacity %d: %w", spec.Name(), g.bound, err), e.Close())
	}
	return e, nil
}

// release drops one reference to g, closing its compiled model with the
// last one.
func (c *Compiler) release(key model.GraphSpec, g *reusedGraph) {
	c.mu.Lock()
	g.refs--
	last := g.refs == 0
	if last && c.reused[key] == g {
		delete(c.reused, key)
	}
	c.mu.Unlock()
	if last && g.cm != nil {
		g.cm.Close()
	}
}
