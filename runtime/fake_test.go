package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/model"
)

// fakeClock is a goroutine-safe simulated clock.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// fakeCompiler builds fakeExecutables: a pure-Go stand-in for OpenVINO whose
// logits depend on every token stored in the cache, so a lost or misplaced
// KV row changes the predictions.
type fakeCompiler struct {
	shape KVShape
	vocab int
	clock *fakeClock

	mu       sync.Mutex
	calls    []model.GraphSpec
	fail     map[int]int           // capacity -> compiles left that fail
	gate     map[int]chan struct{} // capacity -> compile blocks until closed
	started  map[int]chan struct{} // capacity -> closed when its compile starts
	compileT time.Duration         // simulated compile time
	prefillT time.Duration         // simulated compile time of prefill graphs, when set
	failPre  bool                  // every prefill graph's compile fails
	stepT    time.Duration         // simulated time per step
	open     atomic.Int64          // executables not yet closed
	poison   map[int]bool          // last positions whose logits are NaN
	shared   bool                  // compiles shared graphs (SharedGrapher)
	penalty  float64               // SharedStepPenalty (SharedCoster); 0: the default
	oneCopy  bool                  // its graphs share one copy of the weights (WeightSharer)
	perCall  int                   // tokens a decode graph's call takes (StepTokener, SpecStepTokener); 0: 1
	sizes    []int                 // the tokens of every decode graph's call, in order
	exes     []*fakeExecutable     // every executable made, in order
}

func newFakeCompiler(shape KVShape, vocab int, clock *fakeClock) *fakeCompiler {
	return &fakeCompiler{shape: shape, vocab: vocab, clock: clock, fail: map[int]int{},
		gate: map[int]chan struct{}{}, started: map[int]chan struct{}{}}
}

var errFakeCompile = errors.New("fake compiler: injected failure")

func (f *fakeCompiler) Compile(ctx context.Context, spec model.GraphSpec) (Executable, error) {
	f.mu.Lock()
	f.calls = append(f.calls, spec)
	gate, started := f.gate[spec.Capacity], f.started[spec.Capacity]
	failing := decodes(spec) && f.fail[spec.Capacity] > 0
	if failing {
		f.fail[spec.Capacity]--
	}
	failing = failing || (!decodes(spec) && f.failPre)
	f.mu.Unlock()
	if started != nil && decodes(spec) {
		closeOnce(started)
	}
	if gate != nil && decodes(spec) {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.clock != nil {
		if d := f.prefillT; d > 0 && !decodes(spec) {
			f.clock.Advance(d)
		} else {
			f.clock.Advance(f.compileT)
		}
	}
	if failing {
		return nil, fmt.Errorf("compile %s: %w", spec.Name(), errFakeCompile)
	}
	f.open.Add(1)
	e := &fakeExecutable{f: f, spec: spec}
	f.mu.Lock()
	f.exes = append(f.exes, e)
	f.mu.Unlock()
	return e, nil
}

// StepTokens makes the fake a SpecStepTokener: a decode graph takes
// f.perCall tokens a call, as ovexec's kernel decode graphs take 8.
func (f *fakeCompiler) StepTokens(spec model.GraphSpec) int {
	if f.perCall > 0 && spec.Chunk == 1 && !spec.Shared {
		return f.perCall
	}
	return spec.Chunk
}

// SharedGraphs makes the fake a SharedGrapher that answers f.shared.
func (f *fakeCompiler) SharedGraphs() bool { return f.shared }

// GraphsShareWeights makes the fake a WeightSharer that answers f.oneCopy.
func (f *fakeCompiler) GraphsShareWeights() bool { return f.oneCopy }

// SharedStepPenalty makes the fake a SharedCoster that answers f.penalty,
// or the default where that is 0.
func (f *fakeCompiler) SharedStepPenalty() float64 {
	if f.penalty > 0 {
		return f.penalty
	}
	return compilecost.DefaultSharedStepPenalty
}

// decodes reports whether spec is a rung's graph: a decode graph or a
// shared one.
func decodes(spec model.GraphSpec) bool { return spec.Chunk == 1 || spec.Shared }

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

func (f *fakeCompiler) compiled(capacity int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.calls {
		if s.Capacity == capacity && decodes(s) {
			n++
		}
	}
	return n
}

// liveGraphs counts the decode graphs of a capacity not yet closed.
func (f *fakeCompiler) liveGraphs(capacity int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range f.exes {
		if e.spec.Capacity == capacity && decodes(e.spec) && !e.closed.Load() {
			n++
		}
	}
	return n
}

type fakeExecutable struct {
	f      *fakeCompiler
	spec   model.GraphSpec
	kv     *KV
	logits []float32
	closed atomic.Bool
}

func (e *fakeExecutable) Spec() model.GraphSpec { return e.spec }

// StepTokens makes the fake a StepTokener (fakeCompiler.StepTokens).
func (e *fakeExecutable) StepTokens() int { return e.f.StepTokens(e.spec) }

func (e *fakeExecutable) Bind(kv *KV) error {
	if kv.Capacity != e.spec.Capacity {
		return fmt.Errorf("fake: bind %d slots to %s", kv.Capacity, e.spec.Name())
	}
	e.kv = kv
	return nil
}

// Step stores (token, position) as the first two floats of each K row and
// scores vocabulary entries from every row up to the last position.
func (e *fakeExecutable) Step(ids []int64, start int) ([]float32, error) {
	if e.closed.Load() {
		return nil, errors.New("fake: step on a closed executable")
	}
	if len(ids) == 0 || len(ids) > e.StepTokens() {
		return nil, fmt.Errorf("fake: %d tokens to %s", len(ids), e.spec.Name())
	}
	if e.spec.Chunk == 1 && !e.spec.Shared {
		e.f.mu.Lock()
		e.f.sizes = append(e.f.sizes, len(ids))
		e.f.mu.Unlock()
	}
	if start+len(ids) > e.spec.Capacity {
		return nil, fmt.Errorf("%w: fake step at %d", ErrCapacity, start)
	}
	for t, id := range ids {
		p := start + t
		for l := range e.kv.K {
			row := e.kv.K[l][p*e.f.shape.RowBytes():]
			binary.LittleEndian.PutUint32(row, math.Float32bits(float32(id)))
			binary.LittleEndian.PutUint32(row[4:], math.Float32bits(float32(p+1)))
			binary.LittleEndian.PutUint32(e.kv.V[l][p*e.f.shape.RowBytes():], math.Float32bits(float32(id*7+int64(l))))
		}
	}
	last := start + len(ids) - 1
	var h uint64 = 1469598103934665603
	for j := 0; j <= last; j++ {
		for l := range e.kv.K {
			row := e.kv.K[l][j*e.f.shape.RowBytes():]
			id := math.Float32frombits(binary.LittleEndian.Uint32(row))
			pos := math.Float32frombits(binary.LittleEndian.Uint32(row[4:]))
			v := math.Float32frombits(binary.LittleEndian.Uint32(e.kv.V[l][j*e.f.shape.RowBytes():]))
			h = (h ^ uint64(id)*31 ^ uint64(pos)*131 ^ uint64(v)*7) * 1099511628211
		}
	}
	if e.logits == nil {
		e.logits = make([]float32, e.f.vocab)
	}
	for v := range e.logits {
		e.logits[v] = float32((h>>uint(v%32))&0xff) + float32(v)/1000
	}
	if e.f.poison[last] {
		e.logits[3] = float32(math.NaN())
	}
	if e.f.clock != nil {
		e.f.clock.Advance(e.f.stepT)
	}
	return e.logits, nil
}

func (e *fakeExecutable) Close() error {
	if !e.closed.Swap(true) {
		e.f.open.Add(-1)
	}
	return nil
}

var _ Compiler = (*fakeCompiler)(nil)
var _ Executable = (*fakeExecutable)(nil)
