package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"sync"
)

// poolCap is the room reserved after the checkpoint data for the small
// constants graphs need (axes, shapes, rotary frequencies, scalars).
const poolCap = 1 << 20

// Weights lays out one weights blob that every graph of a checkpoint shares:
// the architecture's tensors (64-byte aligned, in name order) followed by an
// append-only, content-deduplicated pool of small constants. Bytes already
// placed never change, so graphs read earlier keep valid Const offsets while
// later graphs add constants of their own.
//
// The blob itself is memory the caller owns (for OpenVINO: C-allocated and
// alive as long as any model read from it): see Bind.
type Weights struct {
	ck      *Checkpoint
	offsets map[string]int64
	names   []string
	size    int64 // checkpoint part, aligned

	mu       sync.Mutex
	buf      []byte
	pool     map[string]int64
	poolUsed int64
	pending  [][2]int64 // pool entries added before Bind: offset, index into pendBytes
	pendData [][]byte
}

// NewWeights plans the blob for a loaded checkpoint.
func NewWeights(ck *Checkpoint) *Weights {
	w := &Weights{ck: ck, offsets: map[string]int64{}, pool: map[string]int64{}}
	for _, s := range RequiredTensors(ck.Config) {
		w.names = append(w.names, s.Name)
	}
	sort.Strings(w.names)
	var off int64
	for _, n := range w.names {
		off = align64(off)
		w.offsets[n] = off
		off += int64(len(ck.Tensors[n].Data))
	}
	w.size = align64(off)
	return w
}

// Size is the number of bytes Bind needs.
func (w *Weights) Size() int64 { return w.size + poolCap }

// Config is the checkpoint's configuration.
func (w *Weights) Config() *Config { return w.ck.Config }

// Bind copies the checkpoint tensors into buf (len(buf) >= Size()) and makes
// it the destination of later constants. buf must not move while in use.
func (w *Weights) Bind(buf []byte) error {
	if int64(len(buf)) < w.Size() {
		return fmt.Errorf("weights buffer holds %d bytes, need %d", len(buf), w.Size())
	}
	for _, n := range w.names {
		copy(buf[w.offsets[n]:], w.ck.Tensors[n].Data)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = buf
	for i, p := range w.pending {
		copy(buf[p[0]:], w.pendData[i])
	}
	w.pending, w.pendData = nil, nil
	return nil
}

// Bytes returns the bound blob (nil before Bind).
func (w *Weights) Bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf
}

func (w *Weights) tensor(name string) *Tensor {
	name = w.resolve(name)
	return w.ck.Tensors[name]
}

func (w *Weights) offset(name string) int64 { return w.offsets[w.resolve(name)] }

// resolve maps the one renamed tensor: a tied lm_head reads the embedding.
func (w *Weights) resolve(name string) string {
	if name == "lm_head.weight" {
		if _, ok := w.offsets[name]; !ok {
			return "model.embed_tokens.weight"
		}
	}
	return name
}

// poolAdd places data in the constant pool (once per distinct content) and
// returns its offset in the blob.
func (w *Weights) poolAdd(data []byte) (int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if off, ok := w.pool[string(data)]; ok {
		return off, nil
	}
	off := w.size + align8(w.poolUsed)
	if off+int64(len(data)) > w.Size() {
		// Graphs use a few kilobytes; running out means a builder bug.
		return 0, fmt.Errorf("model: constant pool exhausted (%d bytes)", poolCap)
	}
	w.poolUsed = off - w.size + int64(len(data))
	w.pool[string(data)] = off
	if w.buf != nil {
		copy(w.buf[off:], data)
	} else {
		w.pending = append(w.pending, [2]int64{off, int64(len(w.pendData))})
		w.pendData = append(w.pendData, append([]byte(nil), data...))
	}
	return off, nil
}

func align64(n int64) int64 { return (n + 63) &^ 63 }
func align8(n int64) int64  { return (n + 7) &^ 7 }

func le64(v []int64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return b
}

func le32(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}
