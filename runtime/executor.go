// Package runtime decodes across a ladder of compiled context capacities:
// it owns the KV memory, schedules compiles (up front, one ahead, lazily),
// moves live state between rungs and measures what each policy costs.
//
// The decode loop and the scheduler see the compiler only through the small
// Compiler and Executable interfaces below, so they are tested with a
// pure-Go fake; ovexec.go implements them with OpenVINO.
package runtime

import (
	"context"
	"errors"

	"github.com/ovtoolkit/ovrun/model"
)

// ErrCapacity reports tokens that do not fit the capacity they were given.
var ErrCapacity = errors.New("context capacity exceeded")

// KVShape is the per-layer cache geometry: f32 [capacity, KVHeads, HeadDim]
// for each layer's K and V.
type KVShape struct {
	Layers  int
	KVHeads int
	HeadDim int
}

// ShapeOf derives the cache geometry of a model.
func ShapeOf(cfg *model.Config) KVShape {
	return KVShape{Layers: cfg.NumHiddenLayers, KVHeads: cfg.KVHeads(), HeadDim: cfg.HeadDim()}
}

// RowBytes is the size of one token's K (or V) in one layer.
func (s KVShape) RowBytes() int { return s.KVHeads * s.HeadDim * 4 }

// TokenBytes is the size of one token's K and V across all layers.
func (s KVShape) TokenBytes() int64 { return int64(2 * s.Layers * s.RowBytes()) }

// BufferBytes is the size of a cache of the given capacity.
func (s KVShape) BufferBytes(capacity int) int64 { return int64(capacity) * s.TokenBytes() }

// KV is a cache view of Capacity slots: per layer, K[l] and V[l] hold
// Capacity rows of RowBytes. The memory is not managed by Go's collector and
// stays put while an Executable has it bound.
type KV struct {
	Capacity int
	K, V     [][]byte
}

// Executable is one compiled graph with its infer request.
type Executable interface {
	// Spec is the graph's static shape.
	Spec() model.GraphSpec
	// Bind makes kv the graph's past K/V (kv.Capacity must equal the spec's).
	Bind(kv *KV) error
	// Step runs ids (at most Spec().Chunk of them) at positions
	// start..start+len(ids)-1, stores their K/V rows into the bound cache at
	// those slots, and returns the logits after the last id. The slice is
	// valid until the next Step.
	Step(ids []int64, start int) ([]float32, error)
	Close() error
}

// Compiler turns a graph spec into an Executable.
type Compiler interface {
	Compile(ctx context.Context, spec model.GraphSpec) (Executable, error)
}
