package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// noLeaks fails t when goroutines are left once it and its cleanups
// (a ladder's Close) are done.
func noLeaks(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) })
}

// seqShape is the KV geometry of the fake: room in each row for a
// token, its position and a layer mark.
var seqShape = runtime.KVShape{Layers: 2, KVHeads: 1, HeadDim: 4, ElemBytes: 4}

// seqVocab is larger than DefaultTopK, so that top-k changes what a
// sampler may draw.
const seqVocab = 97

// seqCompiler is a pure-Go runtime.Compiler for one sequence per graph
// (no batch, no paging): its executables store each token's (id,
// position) in the bound cache and score the vocabulary from every row up
// to the last position, so a lost, stale or misplaced KV row changes the
// predictions.
type seqCompiler struct {
	mu    sync.Mutex
	calls map[model.GraphSpec]int // compiles by spec
	open  atomic.Int64            // executables not yet closed
}

func newSeqCompiler() *seqCompiler { return &seqCompiler{calls: map[model.GraphSpec]int{}} }

func (f *seqCompiler) Compile(ctx context.Context, spec model.GraphSpec) (runtime.Executable, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.calls[spec]++
	f.mu.Unlock()
	f.open.Add(1)
	return &seqExecutable{f: f, spec: spec}, nil
}

// compiles is the number of compiles of the decode graph of a capacity.
func (f *seqCompiler) compiles(capacity int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for s, c := range f.calls {
		if s.Capacity == capacity && s.Chunk == 1 {
			n += c
		}
	}
	return n
}

type seqExecutable struct {
	f      *seqCompiler
	spec   model.GraphSpec
	kv     *runtime.KV
	logits []float32
	closed atomic.Bool
}

func (e *seqExecutable) Spec() model.GraphSpec { return e.spec }

func (e *seqExecutable) Bind(kv *runtime.KV) error {
	if kv.Capacity != e.spec.Capacity {
		return fmt.Errorf("seqfake: bind %d slots to %s", kv.Capacity, e.spec.Name())
	}
	e.kv = kv
	return nil
}

func (e *seqExecutable) Step(ids []int64, start int) ([]float32, error) {
	switch {
	case e.closed.Load():
		return nil, errors.New("seqfake: step on a closed executable")
	case e.kv == nil:
		return nil, errors.New("seqfake: step before bind")
	case len(ids) == 0 || len(ids) > e.spec.Chunk:
		return nil, fmt.Errorf("seqfake: %d tokens to %s", len(ids), e.spec.Name())
	case start+len(ids) > e.spec.Capacity:
		return nil, fmt.Errorf("%w: seqfake step at %d", runtime.ErrCapacity, start)
	}
	rb := seqShape.RowBytes()
	put := func(b []byte, v float32) { binary.LittleEndian.PutUint32(b, math.Float32bits(v)) }
	get := func(b []byte) uint64 { return uint64(math.Float32frombits(binary.LittleEndian.Uint32(b))) }
	for t, id := range ids {
		p := start + t
		for l := range e.kv.K {
			put(e.kv.K[l][p*rb:], float32(id))
			put(e.kv.K[l][p*rb+4:], float32(p+1))
			put(e.kv.V[l][p*rb:], float32(id*7+int64(l)))
		}
	}
	var h uint64 = 1469598103934665603 // FNV-1a over every row up to the last position
	for j := 0; j <= start+len(ids)-1; j++ {
		for l := range e.kv.K {
			h = (h ^ get(e.kv.K[l][j*rb:])*31 ^ get(e.kv.K[l][j*rb+4:])*131 ^ get(e.kv.V[l][j*rb:])*7) * 1099511628211
		}
	}
	if e.logits == nil {
		e.logits = make([]float32, seqVocab)
	}
	for v := range e.logits {
		e.logits[v] = float32((h>>uint(v%32))&0xff)/16 + float32(v)/1000
	}
	return e.logits, nil
}

func (e *seqExecutable) Close() error {
	if !e.closed.Swap(true) {
		e.f.open.Add(-1)
	}
	return nil
}

var (
	_ runtime.Compiler   = (*seqCompiler)(nil)
	_ runtime.Executable = (*seqExecutable)(nil)
)
