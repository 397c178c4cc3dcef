package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
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
	// WeightsKernel is WeightsNative with the Q4_1, Q4_0 and Q8_0
	// matrices and embedding multiplied and gathered by ovrun's own kernel
	// (the GGUFLinear and GGUFGather operations of ov/ext/gguf_linear.cc,
	// laid out by kernel.go) instead of the plugin: exact, the weights read
	// in place from the blob rather than laid out again by the plugin (less
	// memory, no first-call reorders), and on a CPU without VNNI as fast as
	// the plugin's f32 kernel.
	WeightsKernel WeightFormat = "kernel"
	// WeightsKernelQ8 is WeightsKernel with the activations quantized to
	// int8 per 32 elements, as llama.cpp multiplies Q4 blocks: products in
	// integer instructions, much faster without VNNI, and no longer the
	// file's model (the error against the float64 reference is in
	// docs/benchmarks.md).
	WeightsKernelQ8 WeightFormat = "kernel-q8"
)

// Kernel reports whether f multiplies with ovrun's kernel.
func (f WeightFormat) Kernel() bool { return f == WeightsKernel || f == WeightsKernelQ8 }

// ParseWeightFormat accepts "native" (or ""), "rounded", "f32", "kernel"
// and "kernel-q8".
func ParseWeightFormat(s string) (WeightFormat, error) {
	switch f := WeightFormat(s); f {
	case "":
		return WeightsNative, nil
	case WeightsNative, WeightsRounded, WeightsF32, WeightsKernel, WeightsKernelQ8:
		return f, nil
	}
	return "", fmt.Errorf("unknown weight format %q (want native, rounded, f32, kernel or kernel-q8)", s)
}

// WeightOptions configures a Weights blob.
type WeightOptions struct {
	Format WeightFormat // "" is WeightsNative
	// SplitMLP keeps 16-bit gate and up weights read in place apart
	// instead of fused (fusesMLP): for a device that fuses the MLP itself.
	SplitMLP bool
}

// slotKind says how a tensor is placed in the blob.
type slotKind int

const (
	slotRaw    slotKind = iota // the stored bytes (F32, F16, BF16)
	slotF32                    // dequantized to f32
	slotPacked                 // OpenVINO compressed weights: planes of packing
	slotMapped                 // the stored bytes, read in place from the checkpoint file mapped into the blob (Files)
)

// stored reports whether a slot of kind k holds the checkpoint's bytes as
// they are (copied or read in place), so members of either kind can be
// concatenated by the graph.
func (k slotKind) stored() bool { return k == slotRaw || k == slotMapped }

// mappedAlign is the alignment a tensor's bytes need in its file to be read
// in place (GGUF's default alignment; others are copied).
const mappedAlign = 32

// FileRegion is a checkpoint file that the blob maps read-only at Offset:
// its tensors are read in place, not copied (see Weights.Files).
type FileRegion struct {
	Path   string
	Offset int64 // in the blob; a multiple of the page size
	Size   int64 // the file's bytes
	data   []byte
}

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
	shape     []int64 // of the tensor, or of a fused group's matrix
	// parts, for a fused group whose members stay where they are (read in
	// place, or copied apart): the members' names, which the graph
	// concatenates (Weights.fuse).
	parts []string
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
	fused  map[string]*slot // by Fused name: groups of slots stored as one matrix
	files  []FileRegion
	names  []string
	size   int64 // checkpoint part, aligned

	mu       sync.Mutex
	buf      []byte
	pool     map[string]int64
	poolAt   map[int64][]byte // the pool's constants by offset (PoolConst; Bind writes those added before it)
	poolUsed int64
}

// NewWeights plans the blob for a loaded checkpoint in the native format.
func NewWeights(ck *Checkpoint) *Weights { return NewWeightsWith(ck, WeightOptions{}) }

// NewWeightsWith plans the blob for a loaded checkpoint with options.
func NewWeightsWith(ck *Checkpoint, opts WeightOptions) *Weights {
	format := opts.Format
	if format == "" {
		format = WeightsNative
	}
	w := &Weights{ck: ck, format: format, slots: map[string]*slot{}, fused: map[string]*slot{},
		pool: map[string]int64{}, poolAt: map[int64][]byte{}}
	for _, s := range RequiredTensors(ck.Config) {
		w.names = append(w.names, s.Name)
	}
	sort.Strings(w.names)
	for _, n := range w.names {
		w.slots[n] = planSlot(n, ck.Tensors[n], format)
	}
	off := w.mapFiles()
	place := func(n int64) int64 {
		off = align64(off)
		at := off
		off += n
		return at
	}
	placed := map[string]bool{}
	groups, mlp := fusedProjections(ck.Config)
	for i, group := range groups {
		if mlp[i] && opts.SplitMLP && !fusesMLP(w.slots[group[0]]) {
			continue
		}
		if f := w.fuse(group, place); f != nil {
			w.fused[strings.Join(group, "+")] = f
			for _, n := range group {
				placed[n] = f.parts == nil
			}
		}
	}
	for _, n := range w.names {
		if s := w.slots[n]; !placed[n] && s.kind != slotMapped {
			s.off = place(s.size)
			if s.kind == slotPacked {
				s.scaleOff, s.zpOff = place(s.scaleSize), place(s.zpSize)
			}
		}
	}
	w.size = align64(off)
	return w
}

// mapFiles makes every tensor stored as is (no row order, aligned) a
// slotMapped slot read in place from its file, which the blob maps from
// offset 0 on, one page-aligned region per file, and returns where the
// copied part of the blob begins (a page boundary). A file is mapped only
// when such tensors fill at least half of it: a quantized file whose
// matrices are repacked keeps its few vectors as copies rather than put
// the whole file in the blob (an exported IR's .bin holds the blob).
func (w *Weights) mapFiles() int64 {
	page := int64(os.Getpagesize())
	maps := w.ck.mappings()
	type inPlace struct {
		s    *slot
		file int
		off  int64
	}
	var cands []inPlace
	covered := make([]int64, len(maps))
	for _, n := range w.names {
		s, t := w.slots[n], w.ck.Tensors[n]
		if s.kind != slotRaw || t.RowOrder != nil {
			continue
		}
		if i, off, ok := within(maps, t.Data); ok && off%mappedAlign == 0 {
			cands = append(cands, inPlace{s, i, off})
			covered[i] += s.size
		}
	}
	at := make([]int64, len(maps)) // blob offset of each mapped file
	var end int64
	for i, m := range maps {
		at[i] = -1
		if 2*covered[i] >= int64(len(m.data)) {
			at[i] = end
			w.files = append(w.files, FileRegion{Path: m.path, Offset: end, Size: int64(len(m.data)), data: m.data})
			end += (int64(len(m.data)) + page - 1) / page * page
		}
	}
	for _, c := range cands {
		if at[c.file] >= 0 {
			c.s.kind, c.s.off = slotMapped, at[c.file]+c.off
		}
	}
	return end
}

// Plan describes the checkpoint part of the blob as planned: the format
// and every tensor's and fused group's place and form, in a fixed order.
// With the checkpoint files' bytes (Sources) and the code that converts
// them it determines that part's bytes (see ovexec's digest memo).
func (w *Weights) Plan() string {
	var b strings.Builder
	fmt.Fprintf(&b, "format=%s size=%d\n", w.format, w.size)
	for _, f := range w.files {
		fmt.Fprintf(&b, "file %s at=%d size=%d\n", f.Path, f.Offset, f.Size)
	}
	for _, n := range w.names {
		fmt.Fprintf(&b, "%s %+v\n", n, *w.slots[n])
	}
	fused := make([]string, 0, len(w.fused))
	for n := range w.fused {
		fused = append(fused, n)
	}
	sort.Strings(fused)
	for _, n := range fused {
		fmt.Fprintf(&b, "%s %+v\n", n, *w.fused[n])
	}
	return b.String()
}

// ReleaseSource drops the pages of the checkpoint files the weights are
// read from from the resident set (Checkpoint.ReleasePages).
func (w *Weights) ReleaseSource() error { return w.ck.ReleasePages() }

// Sources are the paths of the checkpoint files the weights are read from.
func (w *Weights) Sources() []string {
	var paths []string
	for _, m := range w.ck.mappings() {
		paths = append(paths, m.path)
	}
	return paths
}

// Files are the checkpoint files the blob maps (from offset 0 on): a
// buffer for BindMapped maps each read-only at its offset (ov.MapHost);
// Bind copies them instead.
func (w *Weights) Files() []FileRegion { return w.files }

// planSlot decides how tensor n is stored (kind, element type, plane
// sizes); offsets come later.
func planSlot(n string, t *Tensor, format WeightFormat) *slot {
	s := &slot{kind: slotRaw, et: elem(strings.ToLower(string(t.DType))), shape: t.Shape}
	switch {
	case format.Kernel() && kernelFits(n, t.DType, t.Shape):
		s.kind, s.pack, s.et = slotPacked, packing{group: 32, wt: u8, kernel: t.DType}, u8
		s.size, s.scaleSize, s.zpSize = s.pack.planeBytes(t.Shape[0], t.Shape[1])
	case t.DType.IsQuantized() && format != WeightsF32 && len(t.Shape) == 2:
		s.kind, s.pack = slotPacked, packingOf(t.DType)
		if s.pack.zp == zpPlane {
			switch {
			case format == WeightsRounded:
				s.pack.zp = zpRounded
			case linearOnly(n):
				s.pack.zp = zpMin
			}
		}
		s.et = s.pack.wt
		s.size, s.scaleSize, s.zpSize = s.pack.planeBytes(t.Shape[0], t.Shape[1])
	case t.DType.IsQuantized() || (format == WeightsF32 && t.DType != DTypeF32):
		s.kind, s.et, s.size = slotF32, f32, 4*t.NumElements()
	default:
		s.size = int64(len(t.Data))
	}
	return s
}

// linearOnly reports whether tensor n is only ever the right-hand side of a
// matrix product (never gathered), so its block minimum may stay a plane of
// its own (zpMin).
func linearOnly(n string) bool {
	return strings.HasSuffix(n, "_proj.weight") || n == "lm_head.weight"
}

// layerProjections are layer i's linear layers that read the same input:
// q, k and v, and the MLP's gate and up (HF names without ".weight"), each
// group in the order its matrix product's outputs are split.
func layerProjections(i int) (qkv, gateUp []string) {
	pre := fmt.Sprintf("model.layers.%d.", i)
	return []string{pre + "self_attn.q_proj", pre + "self_attn.k_proj", pre + "self_attn.v_proj"},
		[]string{pre + "mlp.gate_proj", pre + "mlp.up_proj"}
}

// fusedProjections are the weights of every layer's layerProjections.
// Stored back to back (rows after rows), each group is one [sum of rows,
// in] matrix, one matrix product in the graph instead of three or two
// (fewer, larger kernels; one group sum for the minima). mlp marks the
// gate and up group.
func fusedProjections(cfg *Config) (groups [][]string, mlp []bool) {
	for i := range cfg.NumHiddenLayers {
		qkv, gateUp := layerProjections(i)
		groups, mlp = append(groups, weightNames(qkv), weightNames(gateUp)), append(mlp, false, true)
	}
	return groups, mlp
}

// fusesMLP says whether a layer's gate and up weights, stored as first
// (gate's slot), are fused where WeightOptions.SplitMLP asks for them
// apart. 16-bit weights read in place are not: on a CPU with AMX the
// plugin runs a bf16 inference's gate, up, SiLU, product and down as one
// LLMMLP node, which it recognises only with gate and up apart (the
// qwen2.5-0.5b shapes, F16, bf16: a decode step 89.7 -> 78.8 ms, a
// 128-token chunk of the shared graph 335 -> 314 ms). Where the node is
// not used it costs: `small` at f32, a 16-token prompt 21-22 -> 38-45 ms.
func fusesMLP(first *slot) bool {
	return first == nil || first.kind != slotMapped || (first.et != f16 && first.et != bf16)
}

// weightNames are the weight tensors of the linear layers named prefixes.
func weightNames(prefixes []string) []string {
	names := make([]string, len(prefixes))
	for i, p := range prefixes {
		names[i] = p + ".weight"
	}
	return names
}

// fuse places the slots of group back to back, each plane of the group in
// one run, and returns the slot of the whole [sum of rows, in] matrix, or
// nil when the members are not stored alike (different types or widths:
// mixed GGUF quantizations), which are then placed one by one.
//
// Members read in place stay where the file has them: where the file has
// them back to back already, the group's slot spans them; else (and for
// stored bytes some of which are copied: llama's permuted q and k next to
// a v read in place) the group's slot lists its parts, which the graph
// concatenates (irGraph.weightAs) and the compiler folds into one constant
// while it compiles. Copying them here would cost the memory and load time
// that reading in place saves, and the fused product is faster than three
// (qwen2.5-0.5b's q, k and v at bf16: a decode step 0-4% faster, docs/design.md).
func (w *Weights) fuse(group []string, place func(int64) int64) *slot {
	first := w.slots[group[0]]
	if first == nil || len(first.shape) != 2 {
		return nil
	}
	f := *first
	f.shape = []int64{0, first.shape[1]}
	f.size, f.scaleSize, f.zpSize = 0, 0, 0
	apart := false // stored bytes that cannot lie back to back without a copy
	for _, n := range group {
		s := w.slots[n]
		if s == nil || len(s.shape) != 2 || s.shape[1] != first.shape[1] || s.et != first.et || s.pack != first.pack {
			return nil
		}
		switch {
		case s.kind == first.kind:
			apart = apart || s.kind == slotMapped && s.off != first.off+f.size
		case s.kind.stored() && first.kind.stored():
			apart = true
		default:
			return nil
		}
		f.shape[0] += s.shape[0]
		f.size, f.scaleSize, f.zpSize = f.size+s.size, f.scaleSize+s.scaleSize, f.zpSize+s.zpSize
	}
	if apart {
		f.parts = group
		return &f
	}
	if f.kind == slotMapped {
		return &f
	}
	f.off = place(f.size)
	if f.kind == slotPacked {
		f.scaleOff, f.zpOff = place(f.scaleSize), place(f.zpSize)
	}
	at := [3]int64{f.off, f.scaleOff, f.zpOff}
	for _, n := range group {
		s := w.slots[n]
		s.off, s.scaleOff, s.zpOff = at[0], at[1], at[2]
		at = [3]int64{at[0] + s.size, at[1] + s.scaleSize, at[2] + s.zpSize}
	}
	return &f
}

// Fused is the name of the weight that holds group (names of checkpoint
// tensors) as one matrix, rows in group order, or "" when they are stored
// apart.
func (w *Weights) Fused(group ...string) string {
	n := strings.Join(group, "+")
	if _, ok := w.fused[n]; ok {
		return n
	}
	return ""
}

// Size is the number of bytes Bind needs.
func (w *Weights) Size() int64 { return w.size + poolCap }

// TensorBytes is the size of the checkpoint part of the blob: the weights
// as the graphs read them, before the constant pool.
func (w *Weights) TensorBytes() int64 { return w.size }

// StepBytes is how many bytes of weights a decode step reads: every tensor,
// but of an embedding that is not also the lm_head only the one row it
// gathers (taken as none).
func (w *Weights) StepBytes() int64 {
	n := w.size
	if _, untied := w.slots["lm_head.weight"]; untied {
		if e, ok := w.slots["model.embed_tokens.weight"]; ok {
			n -= e.size + e.scaleSize + e.zpSize
		}
	}
	return n
}

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
// repacking or dequantizing GGUF blocks and copying the Files, and makes it
// the destination of later constants. buf must not move while in use.
func (w *Weights) Bind(buf []byte) error { return w.bind(buf, false) }

// BindMapped is Bind for a buffer that maps the Files already (ov.MapHost):
// it checks that each file's region holds the file and writes the rest,
// dropping each converted tensor's pages of the checkpoint's mapping from
// the resident set as it goes (the conversion's peak holds one copy of the
// weights, not two).
func (w *Weights) BindMapped(buf []byte) error { return w.bind(buf, true) }

func (w *Weights) bind(buf []byte, mapped bool) error {
	if int64(len(buf)) < w.Size() {
		return fmt.Errorf("weights buffer holds %d bytes, need %d", len(buf), w.Size())
	}
	for _, f := range w.files {
		region := buf[f.Offset : f.Offset+f.Size]
		if !mapped {
			copy(region, f.data)
			continue
		}
		if n := min(len(region), 4096); string(region[:n]) != string(f.data[:n]) {
			return fmt.Errorf("weights buffer does not map %s at offset %d", f.Path, f.Offset)
		}
	}
	// Tensors fill disjoint ranges: spread them over the CPUs.
	next := make(chan string)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(w.names)) {
		wg.Go(func() {
			for n := range next {
				t, s := w.ck.Tensors[n], w.slots[n]
				w.fill(buf, t, s)
				if mapped && s.kind != slotMapped { // converted: the checkpoint's copy is read
					w.ck.releaseTensor(t)
				}
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
	for off, data := range w.poolAt {
		copy(buf[off:], data)
	}
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
	if s.kind == slotMapped {
		return // in the blob already (Files)
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
		if s.pack.kernel != "" {
			packRowKernel(t.DType, src[r*srcRow:(r+1)*srcRow], row, buf[s.off:s.off+s.size])
			continue
		}
		packRow(t.DType, s.pack, src[r*srcRow:(r+1)*srcRow], int(in),
			buf[s.off+row*wRow:s.off+(row+1)*wRow],
			buf[s.scaleOff+row*scRow:s.scaleOff+(row+1)*scRow],
			buf[s.zpOff+row*zpRow:s.zpOff+(row+1)*zpRow])
	}
}

// PoolConst is the constant the pool holds at off, size bytes of it
// (poolAdd's offsets), bound or not yet: false when no constant starts
// there or it is shorter.
func (w *Weights) PoolConst(off, size int64) ([]byte, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b, ok := w.poolAt[off]
	if !ok || int64(len(b)) < size {
		return nil, false
	}
	return b[:size], true
}

// Bytes returns the bound blob (nil before Bind).
func (w *Weights) Bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf
}

// slot is the slot of a checkpoint tensor or of a Fused group.
func (w *Weights) slot(name string) *slot {
	if f, ok := w.fused[name]; ok {
		return f
	}
	return w.slots[w.resolve(name)]
}

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
	w.poolAt[off] = append([]byte(nil), data...)
	if w.buf != nil {
		copy(w.buf[off:], data)
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
