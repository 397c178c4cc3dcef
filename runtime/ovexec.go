package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/ov"
)

// OVOptions configures compilation on an OpenVINO device.
type OVOptions struct {
	Device         string            // CPU, GPU, NPU
	Precision      string            // f32, bf16, f16; empty keeps the device default
	InferThreads   int               // INFERENCE_NUM_THREADS; 0 keeps the default
	CacheDir       string            // CACHE_DIR; empty disables the model cache
	Properties     map[string]string // any further key/value
	DisablePinning bool              // ENABLE_CPU_PINNING=NO (CPU only)
	// Weights is how checkpoint tensors enter the graphs: "" or
	// model.WeightsNative keeps GGUF blocks compressed, model.WeightsF32
	// dequantizes everything to f32.
	Weights model.WeightFormat
}

// properties lists the compile properties in a stable order.
func (o OVOptions) properties() []ov.Property {
	var ps []ov.Property
	if o.Precision != "" {
		ps = append(ps, ov.Property{Key: "INFERENCE_PRECISION_HINT", Value: o.Precision})
	}
	if o.InferThreads > 0 {
		ps = append(ps, ov.Property{Key: "INFERENCE_NUM_THREADS", Value: fmt.Sprint(o.InferThreads)})
	}
	if o.CacheDir != "" {
		ps = append(ps, ov.Property{Key: "CACHE_DIR", Value: o.CacheDir})
	}
	if o.DisablePinning && strings.EqualFold(o.Device, "CPU") {
		ps = append(ps, ov.Property{Key: "ENABLE_CPU_PINNING", Value: "NO"})
	}
	for _, k := range sortedKeys(o.Properties) {
		ps = append(ps, ov.Property{Key: k, Value: o.Properties[k]})
	}
	return ps
}

// DynamicQuantizationKey is the CPU plugin property that quantizes the
// activations of matrix multiplications with compressed (integer) weights
// to 8 bits in groups of its value; 0 turns it off.
const DynamicQuantizationKey = "DYNAMIC_QUANTIZATION_GROUP_SIZE"

// compileProperties are o's properties plus, for an f32 run over compressed
// weights on the CPU, DYNAMIC_QUANTIZATION_GROUP_SIZE=0 unless set: a run
// asked for f32 stays f32 throughout (dynamic quantization otherwise moves
// logits by about 0.5% of their range).
func (o OVOptions) compileProperties(compressed bool) []ov.Property {
	ps := o.properties()
	if _, set := o.Properties[DynamicQuantizationKey]; compressed && !set && o.Precision == "f32" && strings.EqualFold(o.Device, "CPU") {
		ps = append(ps, ov.Property{Key: DynamicQuantizationKey, Value: "0"})
	}
	return ps
}

// FailCompileEnv names a fault-injection hook for testing recovery paths:
// OVRUN_FAIL_COMPILE=CAPACITY[xN] makes the first N (default 1) decode-graph
// compiles of that capacity fail as if OpenVINO had rejected them.
const FailCompileEnv = "OVRUN_FAIL_COMPILE"

// OVCompiler compiles decoder graphs of one checkpoint with OpenVINO. All its
// graphs share one weights blob in C memory.
type OVCompiler struct {
	ck      *model.Checkpoint
	core    *ov.Core
	weights *model.Weights
	blob    *ov.HostBuffer
	wt      *ov.Tensor
	opts    OVOptions
	props   []ov.Property
	shape   KVShape
	vocab   int
	faults  *faultPlan

	mu        sync.Mutex
	effective string // INFERENCE_PRECISION_HINT the device reports after compiling
}

var _ Compiler = (*OVCompiler)(nil)

// NewOVCompiler loads OpenVINO and copies the checkpoint's weights into the
// shared blob.
func NewOVCompiler(ck *model.Checkpoint, opts OVOptions) (*OVCompiler, error) {
	if opts.Device == "" {
		opts.Device = "CPU"
	}
	core, err := ov.NewCore()
	if err != nil {
		return nil, err
	}
	faults, err := parseFaultPlan(os.Getenv(FailCompileEnv))
	if err != nil {
		return nil, errors.Join(err, core.Close())
	}
	c := &OVCompiler{ck: ck, core: core, opts: opts, shape: ShapeOf(ck.Config), vocab: ck.Config.VocabSize, faults: faults}
	c.weights = model.NewWeightsWith(ck, model.WeightOptions{Format: opts.Weights})
	c.props = opts.compileProperties(c.weights.Compressed())
	if c.blob, err = ov.AllocHost(int(c.weights.Size())); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	if err := c.weights.Bind(c.blob.Bytes()); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	if c.wt, err = ov.NewTensorFromPtr(ov.U8, []int64{c.weights.Size()}, c.blob.Ptr()); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// HostViews reports whether graphs on this device read their KV inputs in
// place from host memory, which growth without copy needs. Only the CPU
// plugin is known to; other devices take the copy-and-grow path.
func (c *OVCompiler) HostViews() bool { return strings.EqualFold(c.opts.Device, "CPU") }

// EffectivePrecision is the inference precision the device reported for the
// last compiled graph (CPUs without bf16 support run a bf16 request in f32).
func (c *OVCompiler) EffectivePrecision() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.effective
}

// NonFiniteWeight names the first NaN or infinite weight of the
// checkpoint, "" when every weight is finite.
func (c *OVCompiler) NonFiniteWeight() string {
	name, i, v, ok := c.ck.NonFinite()
	if !ok {
		return ""
	}
	return fmt.Sprintf("the checkpoint's first non-finite weight is %s[%d] = %v", name, i, v)
}

// Options reports the compile options in use.
func (c *OVCompiler) Options() OVOptions { return c.opts }

// Properties are the compile properties every graph gets.
func (c *OVCompiler) Properties() []ov.Property { return c.props }

// Weights is the shared weights blob (its format and size).
func (c *OVCompiler) Weights() *model.Weights { return c.weights }

// BuildIR emits the graph XML of a spec (for inspection and timing).
func (c *OVCompiler) BuildIR(spec model.GraphSpec) ([]byte, error) {
	return model.BuildIR(c.weights, spec)
}

// Compile builds, reads and compiles the graph, then prepares its infer
// request with input and output tensors over C memory.
func (c *OVCompiler) Compile(ctx context.Context, spec model.GraphSpec) (Executable, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	xml, err := model.BuildIR(c.weights, spec)
	if err != nil {
		return nil, err
	}
	return c.CompileIR(ctx, spec, xml)
}

// CompileIR compiles an already-emitted graph.
func (c *OVCompiler) CompileIR(ctx context.Context, spec model.GraphSpec, xml []byte) (Executable, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.faults.fire(spec) {
		return nil, fmt.Errorf("compile graph %s on %s: injected failure (%s)", spec.Name(), c.opts.Device, FailCompileEnv)
	}
	m, err := c.core.ReadModel(xml, c.wt)
	if err != nil {
		return nil, fmt.Errorf("read graph %s: %w", spec.Name(), err)
	}
	cm, err := c.core.CompileModel(m, c.opts.Device, c.props...)
	m.Close()
	if err != nil {
		return nil, fmt.Errorf("compile graph %s on %s: %w", spec.Name(), c.opts.Device, err)
	}
	if p, err := cm.Property("INFERENCE_PRECISION_HINT"); err == nil {
		c.mu.Lock()
		c.effective = p
		c.mu.Unlock()
	}
	e := &ovExecutable{spec: spec, compiled: cm, shape: c.shape, vocab: c.vocab, irBytes: len(xml)}
	if err := e.prepare(); err != nil {
		return nil, errors.Join(fmt.Errorf("prepare graph %s: %w", spec.Name(), err), e.Close())
	}
	return e, nil
}

// Close frees the core and the weights; every Executable must be closed first.
func (c *OVCompiler) Close() error {
	var err error
	if c.wt != nil {
		c.wt.Close()
	}
	if c.core != nil {
		err = c.core.Close()
	}
	// The weights go last: nothing that read a model from them may outlive them.
	if c.blob != nil {
		c.blob.Free()
	}
	c.wt, c.blob, c.core = nil, nil, nil
	return err
}

// ovExecutable is a compiled graph with one infer request whose inputs and
// outputs all live in C memory bound once: a step writes token ids, runs, and
// copies the new K/V rows into the cache.
type ovExecutable struct {
	spec     model.GraphSpec
	compiled *ov.CompiledModel
	req      *ov.InferRequest
	shape    KVShape
	vocab    int

	ids, pos, idx *ov.HostBuffer // i64 [1,T], [1,T], [1]
	logits        *ov.HostBuffer // f32 [1,V]
	present       []*ov.HostBuffer
	tensors       []*ov.Tensor // bound once, freed on Close
	kvTensors     []*ov.Tensor // bound per Bind
	kv            *KV
	irBytes       int
}

// IRBytes is the size of the IR XML the graph was compiled from.
func (e *ovExecutable) IRBytes() int { return e.irBytes }

var _ Executable = (*ovExecutable)(nil)

func (e *ovExecutable) Spec() model.GraphSpec { return e.spec }

func (e *ovExecutable) prepare() error {
	var err error
	if e.req, err = e.compiled.NewInferRequest(); err != nil {
		return err
	}
	T := int64(e.spec.Chunk)
	bind := func(name string, et ov.ElementType, shape []int64) (*ov.HostBuffer, error) {
		n := et.Size()
		for _, d := range shape {
			n *= int(d)
		}
		buf, err := ov.AllocHost(n)
		if err != nil {
			return nil, err
		}
		t, err := ov.NewTensorFromPtr(et, shape, buf.Ptr())
		if err != nil {
			buf.Free()
			return nil, err
		}
		e.tensors = append(e.tensors, t)
		return buf, e.req.SetTensor(name, t)
	}
	if e.ids, err = bind(model.InputIDs, ov.I64, []int64{1, T}); err != nil {
		return err
	}
	if e.pos, err = bind(model.PositionIDs, ov.I64, []int64{1, T}); err != nil {
		return err
	}
	if e.idx, err = bind(model.LogitsIndex, ov.I64, []int64{1}); err != nil {
		return err
	}
	if e.logits, err = bind(model.OutputLogits, ov.F32, []int64{1, int64(e.vocab)}); err != nil {
		return err
	}
	row := []int64{T, int64(e.shape.KVHeads), int64(e.shape.HeadDim)}
	for l := 0; l < e.shape.Layers; l++ {
		for _, name := range []string{model.PresentKey(l), model.PresentValue(l)} {
			buf, err := bind(name, ov.F32, row)
			if buf != nil {
				e.present = append(e.present, buf)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (e *ovExecutable) Bind(kv *KV) error {
	if kv.Capacity != e.spec.Capacity {
		return fmt.Errorf("bind a cache of %d slots to graph %s", kv.Capacity, e.spec.Name())
	}
	e.freeKV()
	shape := []int64{int64(kv.Capacity), int64(e.shape.KVHeads), int64(e.shape.HeadDim)}
	for l := 0; l < e.shape.Layers; l++ {
		for i, mem := range [][]byte{kv.K[l], kv.V[l]} {
			t, err := ov.NewTensorFromPtr(ov.F32, shape, unsafe.Pointer(&mem[0]))
			if err != nil {
				return err
			}
			e.kvTensors = append(e.kvTensors, t)
			name := model.PastKey(l)
			if i == 1 {
				name = model.PastValue(l)
			}
			if err := e.req.SetTensor(name, t); err != nil {
				return err
			}
		}
	}
	e.kv = kv
	return nil
}

func (e *ovExecutable) Step(ids []int64, start int) ([]float32, error) {
	n := len(ids)
	switch {
	case e.kv == nil:
		return nil, fmt.Errorf("graph %s: step before a cache was bound", e.spec.Name())
	case n == 0 || n > e.spec.Chunk:
		return nil, fmt.Errorf("graph %s takes 1 to %d tokens per step, got %d", e.spec.Name(), e.spec.Chunk, n)
	case start+n > e.spec.Capacity:
		return nil, fmt.Errorf("%w: tokens %d..%d in graph %s", ErrCapacity, start, start+n-1, e.spec.Name())
	}
	idb, pb := e.ids.Bytes(), e.pos.Bytes()
	for t := 0; t < e.spec.Chunk; t++ {
		var id int64
		if t < n {
			id = ids[t]
		}
		binary.LittleEndian.PutUint64(idb[8*t:], uint64(id))
		binary.LittleEndian.PutUint64(pb[8*t:], uint64(start+t))
	}
	binary.LittleEndian.PutUint64(e.idx.Bytes(), uint64(n-1))
	if err := e.req.Infer(); err != nil {
		return nil, fmt.Errorf("infer graph %s: %w", e.spec.Name(), err)
	}
	rb := e.shape.RowBytes()
	for l := 0; l < e.shape.Layers; l++ {
		copy(e.kv.K[l][start*rb:(start+n)*rb], e.present[2*l].Bytes()[:n*rb])
		copy(e.kv.V[l][start*rb:(start+n)*rb], e.present[2*l+1].Bytes()[:n*rb])
	}
	return unsafe.Slice((*float32)(e.logits.Ptr()), e.vocab), nil
}

func (e *ovExecutable) freeKV() {
	for _, t := range e.kvTensors {
		t.Close()
	}
	e.kvTensors, e.kv = nil, nil
}

func (e *ovExecutable) Close() error {
	e.freeKV()
	var errs []error
	for _, t := range e.tensors {
		t.Close()
	}
	e.tensors = nil
	if e.req != nil {
		e.req.Close()
	}
	if e.compiled != nil {
		e.compiled.Close()
	}
	for _, b := range append([]*ov.HostBuffer{e.ids, e.pos, e.idx, e.logits}, e.present...) {
		if b != nil {
			b.Free()
		}
	}
	e.req, e.compiled, e.present = nil, nil, nil
	e.ids, e.pos, e.idx, e.logits = nil, nil, nil, nil
	return errors.Join(errs...)
}
