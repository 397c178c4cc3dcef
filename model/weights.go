package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sort"
	"strings"
	"sync"
)

// poolCap is the room reserved after the checkpoint data for the small
// constants graphs need (axes, shapes, rotary frequencies, scalars).
const poolCap = 1 << 20

// WeightFormat selects how checkpoint tensors are stored in the blob.
type WeightFormat string

const (
	// WeightsNative keeps weights as stored: F16 and BF16 stay 16-bit
	// (Const -> Convert), GGUF block types become OpenVINO compressed weights
	// (u4/i8 planes with a scale per group and, for Q4_1 and Q4_K, a zero
	// point) that the CPU plugin decompresses inside its matrix
	// multiplications and Gather. Block-typed vectors become f32.
	WeightsNative WeightFormat = "native"
	// WeightsRounded is WeightsNative with the float minimum of Q4_1 and
	// Q4_K blocks rounded to an integer zero point per group (u8), the form
	// OpenVINO GenAI's GGUF reader builds: the CPU plugin runs integer zero
	// points in a faster kernel, and every weight of a group moves by the
	// same amount, at most half a quantization step, so the weights are no
	// longer those of the file. The other block types are as in native.
	WeightsRounded WeightFormat = "rounded"
	// WeightsF32 dequantizes every tensor to f32 constants.
	WeightsF32 WeightFormat = "f32"
)

// ParseWeightFormat accepts "native" (or ""), "rounded" and "f32".
func ParseWeightFormat(s string) (WeightFormat, error) {
	switch f := WeightFormat(s); f {
	case "":
		return WeightsNative, nil
	case WeightsNative, WeightsRounded, WeightsF32:
		return f, nil
	}
	return "", fmt.Errorf("unknown weight format %q (want native, rounded or f32)", s)
}

// WeightOptions configures a Weights blob.
type WeightOptions struct {
	Format WeightFormat // "" is WeightsNative
}

// slotKind says how a tensor is placed in the blob.
type slotKind int

const (
	slotRaw    slotKind = iota // the stored bytes (F32, F16, BF16)
	slotF32                    // dequantized to f32
	slotPacked                 // OpenVINO compressed weights: planes of packing
)

// slot is one tensor's place in the blob.
type slot struct {
	kind      slotKind
	et        elem // raw: storage type; f32; packed: weight plane type
	off, size int64
	pack      packing
	scaleOff  int64
	scaleSize int64
	zpOff     int64
	zpSize    int64
}

// Weights lays out one weights blob that every graph of a checkpoint shares:
// the architecture's tensors (each plane 64-byte aligned, in name order)
// followed by an append-only, content-deduplicated pool of small constants.
// Bytes already placed never change, so graphs read earlier keep valid Const
// offsets while later graphs add constants of their own. GGUF block tensors
// are repacked (or dequantized) once, by Bind.
//
// The blob itself is memory the caller owns (for OpenVINO: C-allocated and
// alive as long as any model read from it): see Bind.
type Weights struct {
	ck     *Checkpoint
	format WeightFormat
	slots  map[string]*slot
	names  []string
	size   int64 // checkpoint part, aligned

	mu       sync.Mutex
	buf      []byte
	pool     map[string]int64
	poolUsed int64
	pending  [][2]int64 // pool entries added before Bind: offset, index into pendBytes
	pendData [][]byte
}

// NewWeights plans the blob for a loaded checkpoint in the native format.
func NewWeights(ck *Checkpoint) *Weights { return NewWeightsWith(ck, WeightOptions{}) }

// NewWeightsWith plans the blob for a loaded checkpoint with options.
func NewWeightsWith(ck *Checkpoint, opts WeightOptions) *Weights {
	format := opts.Format
	if format == "" {
		format = WeightsNative
	}
	w := &Weights{ck: ck, format: format, slots: map[string]*slot{}, pool: map[string]int64{}}
	for _, s := range RequiredTensors(ck.Config) {
		w.names = append(w.names, s.Name)
	}
	sort.Strings(w.names)
	var off int64
	place := func(n int64) int64 {
		off = align64(off)
		at := off
		off += n
		return at
	}
	for _, n := range w.names {
		t := ck.Tensors[n]
		s := &slot{kind: slotRaw, et: elem(strings.ToLower(string(t.DType)))}
		switch {
		case t.DType.IsQuantized() && format != WeightsF32 && len(t.Shape) == 2:
			s.kind, s.pack = slotPacked, packingOf(t.DType)
			if format == WeightsRounded && s.pack.zp == zpPlane {
				s.pack.zp = zpRounded
			}
			s.et = s.pack.wt
			s.size, s.scaleSize, s.zpSize = s.pack.planeBytes(t.Shape[0], t.Shape[1])
			s.off, s.scaleOff, s.zpOff = place(s.size), place(s.scaleSize), place(s.zpSize)
			w.slots[n] = s
			continue
		case t.DType.IsQuantized() || (format == WeightsF32 && t.DType != DTypeF32):
			s.kind, s.et, s.size = slotF32, f32, 4*t.NumElements()
		default:
			s.size = int64(len(t.Data))
		}
		s.off = place(s.size)
		w.slots[n] = s
	}
	w.size = align64(off)
	return w
}

// Size is the number of bytes Bind needs.
func (w *Weights) Size() int64 { return w.size + poolCap }

// TensorBytes is the size of the checkpoint part of the blob: the weights
// as the graphs read them, before the constant pool.
func (w *Weights) TensorBytes() int64 { return w.size }

// Format is the blob's weight format.
func (w *Weights) Format() WeightFormat { return w.format }

// Compressed reports whether any tensor is stored as OpenVINO compressed
// (integer) weights, whose matrix multiplications the CPU plugin may run
// with dynamically quantized activations (DYNAMIC_QUANTIZATION_GROUP_SIZE).
func (w *Weights) Compressed() bool {
	for _, s := range w.slots {
		if s.kind == slotPacked {
			return true
		}
	}
	return false
}

// Config is the checkpoint's configuration.
func (w *Weights) Config() *Config { return w.ck.Config }

// Bind writes the checkpoint tensors into buf (len(buf) >= Size()),
// repacking or dequantizing GGUF blocks, and makes it the destination of
// later constants. buf must not move while in use.
func (w *Weights) Bind(buf []byte) error {
	if int64(len(buf)) < w.Size() {
		return fmt.Errorf("weights buffer holds %d bytes, need %d", len(buf), w.Size())
	}
	// Tensors fill disjoint ranges: spread them over the CPUs.
	next := make(chan string)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(w.names)) {
		wg.Go(func() {
			for n := range next {
				w.fill(buf, w.ck.Tensors[n], w.slots[n])
			}
		})
	}
	for _, n := range w.names {
		next <- n
	}
	close(next)
	wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = buf
	for i, p := range w.pending {
		copy(buf[p[0]:], w.pendData[i])
	}
	w.pending, w.pendData = nil, nil
	return nil
}

// fill writes one tensor's slot, row by row so RowOrder applies.
func (w *Weights) fill(buf []byte, t *Tensor, s *slot) {
	rows := t.rows()
	per := int(t.NumElements()) / rows // elements per row
	var tmp []float32
	if s.kind == slotF32 {
		tmp = make([]float32, per)
	}
	for i := range rows {
		src := t.row(i)
		switch s.kind {
		case slotRaw:
			copy(buf[s.off+int64(i*len(src)):], src)
		case slotF32:
			dequantize(t.DType, src, tmp)
			dst := buf[s.off+int64(4*i*per):]
			for k, v := range tmp {
				putF32(dst[4*k:], v)
			}
		case slotPacked:
			w.fillPacked(buf, t, s, i, src)
		}
	}
}

// fillPacked repacks row i (or, with no RowOrder, the whole tensor row by
// row) into the slot's planes.
func (w *Weights) fillPacked(buf []byte, t *Tensor, s *slot, i int, src []byte) {
	out, in := t.Shape[0], t.Shape[1]
	wRow, scRow, zpRow := s.pack.planeBytes(1, in)
	be, bb := t.DType.block()
	srcRow := in / int64(be) * int64(bb)
	first, count := int64(i), int64(1)
	if t.RowOrder == nil {
		first, count = 0, out
	}
	for r := range count {
		row := first + r
		packRow(t.DType, s.pack, src[r*srcRow:(r+1)*srcRow], int(in),
			buf[s.off+row*wRow:s.off+(row+1)*wRow],
			buf[s.scaleOff+row*scRow:s.scaleOff+(row+1)*scRow],
			buf[s.zpOff+row*zpRow:s.zpOff+(row+1)*zpRow])
	}
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

func (w *Weights) slot(name string) *slot { return w.slots[w.resolve(name)] }

// resolve maps the one renamed tensor: a tied lm_head reads the embedding.
func (w *Weights) resolve(name string) string {
	if name == "lm_head.weight" {
		if _, ok := w.slots[name]; !ok {
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
