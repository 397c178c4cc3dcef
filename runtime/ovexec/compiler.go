// Package ovexec compiles and runs a runtime rung with OpenVINO: it is the
// runtime.Compiler and runtime.Executable the commands wire in. It is the
// only part of the runtime that needs cgo (through ov/); everything above it
// sees the runtime package's interfaces and optional capabilities.
package ovexec

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/internal/every"
	"github.com/ovtoolkit/ovrun/internal/procfs"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/ov"
	"github.com/ovtoolkit/ovrun/rungcache"
	"github.com/ovtoolkit/ovrun/runtime"
)

// Options configures compilation on an OpenVINO device.
type Options struct {
	Device         string            // CPU, GPU, NPU
	Precision      string            // f32, bf16, f16; empty keeps the device default
	InferThreads   int               // INFERENCE_NUM_THREADS; 0 keeps the default
	CacheDir       string            // compiled-rung cache folder (rungcache); empty: none
	CacheMax       int64             // its size cap in bytes; 0: rungcache.DefaultMaxBytes
	Properties     map[string]string // any further key/value
	DisablePinning bool              // ENABLE_CPU_PINNING=NO (CPU only)
	// Weights is how checkpoint tensors enter the graphs: "" or
	// model.WeightsNative keeps GGUF blocks compressed and exact,
	// model.WeightsRounded compressed with integer zero points (GenAI's
	// form), model.WeightsF32 dequantizes everything to f32.
	Weights model.WeightFormat
	// Attention is the form of attention over the past KV slots: ""
	// or model.AttentionAuto resolves per graph, by device and capacity
	// (ResolveAttention).
	Attention model.Attention
	// KVPrecision is the element type the KV cache is stored in: f32,
	// bf16 or f16; "" or "auto" stores it in the inference precision on
	// the CPU (bf16 where the device runs bf16: attention reads it without
	// a per-step conversion) and in f32 elsewhere.
	KVPrecision string
	// GraphPerRung compiles a graph for every capacity even where one
	// compiled graph serves them all (paged attention: reuse.go).
	GraphPerRung bool `json:",omitempty"`
	// Worker, when set, compiles every graph in a child process (see
	// worker.go); nil compiles in this process.
	Worker *WorkerOptions `json:"-"`
}

// ParseKVPrecision reads auto, f32, bf16 or f16.
func ParseKVPrecision(s string) (string, error) {
	switch s {
	case "auto", "f32", "bf16", "f16":
		return s, nil
	}
	return "", fmt.Errorf("kv precision %q: want auto, f32, bf16 or f16", s)
}

// properties lists the compile properties in a stable order.
func (o Options) properties() []ov.Property {
	var ps []ov.Property
	if o.Precision != "" {
		ps = append(ps, ov.Property{Key: "INFERENCE_PRECISION_HINT", Value: o.Precision})
	}
	if o.InferThreads > 0 {
		ps = append(ps, ov.Property{Key: "INFERENCE_NUM_THREADS", Value: fmt.Sprint(o.InferThreads)})
	}
	if o.DisablePinning && strings.EqualFold(o.Device, "CPU") {
		ps = append(ps, ov.Property{Key: "ENABLE_CPU_PINNING", Value: "NO"})
	}
	for _, k := range slices.Sorted(maps.Keys(o.Properties)) {
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
// logits by about 0.5% of their range); and SnippetsDefault.
func (o Options) compileProperties(compressed bool) []ov.Property {
	ps := o.properties()
	if _, set := o.Properties[DynamicQuantizationKey]; compressed && !set && o.Precision == "f32" && strings.EqualFold(o.Device, "CPU") {
		ps = append(ps, ov.Property{Key: DynamicQuantizationKey, Value: "0"})
	}
	if p, ok := SnippetsDefault(o.Device, o.Properties); ok {
		ps = append(ps, p)
	}
	return ps
}

// SnippetsKey is the CPU plugin property that fuses chains of element-wise
// operations into generated kernels ("Subgraph" nodes).
const SnippetsKey = "SNIPPETS_MODE"

// SnippetsDefault is SNIPPETS_MODE=DISABLE on the CPU, unless set: the
// fused element-wise kernels cost compile time and memory and save no
// decode time. bin/ovrun generate with 16 + 128 tokens at capacity 1024
// (docs/design.md, "One graph for the prompt and decoding", its end): on
// an AVX2-only CPU (f32), three rounds, SmolLM2 compile 4.00-4.39 ->
// 3.65-4.12 s, peak RSS 403 -> 377 MiB, decode 45.1-48.3 against
// 44.0-50.1 tok/s; small compile 1.87-2.19 -> 1.66-1.67 s; the
// qwen2.5-0.5b shapes' decode graph 17.7 -> 12.5 s. On a CPU with AMX
// (bf16), three rounds, SmolLM2 peak RSS 424-425 -> 394-396 MiB, compile
// 3.60-4.54 -> 3.46-4.15 s, its decode step the same (scripts/step_time.py:
// 22.62 against 22.35 ms); shared graphs (no fused kernels there) the same
// either way. ovtrace's compile measurements use the same default.
func SnippetsDefault(device string, set map[string]string) (ov.Property, bool) {
	if _, ok := set[SnippetsKey]; ok || !strings.EqualFold(device, "CPU") {
		return ov.Property{}, false
	}
	return ov.Property{Key: SnippetsKey, Value: "DISABLE"}, true
}

// capabilities are the device's OPTIMIZATION_CAPABILITIES (BF16, FP16,
// ...): what it can compute in.
func capabilities(core *ov.Core, device string) ([]string, error) {
	caps, err := core.Property(device, "OPTIMIZATION_CAPABILITIES")
	return strings.Fields(caps), err
}

// FailCompileEnv names a fault-injection hook for testing recovery paths:
// OVRUN_FAIL_COMPILE=CAPACITY[xN] makes the first N (default 1) decode-graph
// (or batched-graph)
// compiles of that capacity fail as if OpenVINO had rejected them.
const FailCompileEnv = "OVRUN_FAIL_COMPILE"

// Compiler compiles decoder graphs of one checkpoint with OpenVINO. All its
// graphs share one weights blob in C memory.
type Compiler struct {
	Form
	ck      *model.Checkpoint
	core    *ov.Core
	weights *model.Weights
	// The weights blob and the tensor over it, read in when a graph is
	// first compiled rather than imported (weights.go); nil before, and
	// in a compiler whose graphs compile in workers.
	wmu    sync.Mutex
	blob   *ov.HostBuffer
	wt     *ov.Tensor
	region atomic.Pointer[runtime.Region] // the blob's, once read in (WeightsRegion)
	props  []ov.Property
	vocab  int
	faults *faultPlan
	cache  *rungCache // nil without a cache folder
	// workerCache is the cache folder of a compiler whose workers key and
	// store the graphs; nil otherwise.
	workerCache *rungcache.Cache

	mu        sync.Mutex
	effective string // INFERENCE_PRECISION_HINT the device reports after compiling
	// reused are the compiled paged graphs later rungs take new infer
	// requests on (reuse.go), by spec without capacity.
	reused map[model.GraphSpec]*reusedGraph
}

// StepTokens is the most tokens one call of spec's graph takes
// (runtime.SpecStepTokener): a kernel decode graph's padded axis, else
// the chunk.
func (c *Compiler) StepTokens(spec model.GraphSpec) int { return c.weights.StepTokens(c.Spec(spec)) }

// The capabilities the runtime looks for, checked at compile time.
var (
	_ runtime.Compiler        = (*Compiler)(nil)
	_ runtime.HostViewer      = (*Compiler)(nil)
	_ runtime.WeightExplainer = (*Compiler)(nil)
	_ runtime.CacheChecker    = (*Compiler)(nil)
	_ runtime.Reuser          = (*Compiler)(nil)
	_ runtime.Executable      = (*executable)(nil)
	_ runtime.IRSizer         = (*executable)(nil)
	_ runtime.OriginReporter  = (*executable)(nil)
	_ runtime.Feeder          = (*executable)(nil)
	_ runtime.CompileNoter    = (*executable)(nil)
)

// NewCompiler loads OpenVINO and reads the checkpoint's weights into the
// shared blob, unless the compiled-rung cache can key graphs without them
// (weights.go).
func NewCompiler(ck *model.Checkpoint, opts Options) (*Compiler, error) {
	core, err := ov.NewCore()
	if err != nil {
		return nil, err
	}
	form, err := NewForm(core, ck.Config, opts)
	if err != nil {
		return nil, errors.Join(err, core.Close())
	}
	faults, err := parseFaultPlan(os.Getenv(FailCompileEnv))
	if err != nil {
		return nil, errors.Join(err, core.Close())
	}
	opts = form.opts
	c := &Compiler{Form: form, ck: ck, core: core, vocab: ck.Config.VocabSize, faults: faults}
	c.weights = form.Weights(ck)
	c.props = form.CompileProperties(c.weights)
	if opts.Worker != nil || opts.CacheDir != "" {
		// Import takes no properties: graphs imported from workers or from
		// the compiled-rung cache get the compile properties from the core.
		if err := core.SetProperties(opts.Device, c.props...); err != nil {
			return nil, errors.Join(fmt.Errorf("properties for imported graphs: %w", err), c.Close())
		}
	}
	if opts.Worker != nil {
		// Workers read the weights themselves, and the graphs carry their
		// own copy. With a compiled-rung cache the workers key the graphs
		// (they hold the weights); this process only reads entries back.
		if opts.CacheDir != "" {
			if c.workerCache, err = rungcache.Open(opts.CacheDir, opts.CacheMax); err != nil {
				return nil, errors.Join(err, c.Close())
			}
		}
		return c, nil
	}
	if err := c.openWeights(opts); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// shmDir is where the kept weights' file goes: memory, not a disk.
const shmDir = "/dev/shm"

// AllocWeights allocates and binds the blob of w: tensors stored as is are
// read in place from the checkpoint files, which the blob maps read-only
// (w.Files); the rest (repacked, dequantized, reordered) is written into it,
// and the checkpoint's pages leave the resident set. Free it once nothing
// read from it is open.
func AllocWeights(w *model.Weights) (*ov.HostBuffer, error) {
	var files []ov.HostFile
	for _, f := range w.Files() {
		files = append(files, ov.HostFile{Path: f.Path, Offset: f.Offset, Size: f.Size})
	}
	blob, err := ov.MapHost(int(w.Size()), files)
	if err != nil {
		return nil, err
	}
	// The converted weights (dequantized, repacked: all of a GGUF's
	// quantized tensors) go to an unlinked file, so that like the
	// checkpoint's own pages they leave the resident set between compiles
	// (docs/design.md "The weights blob"): they are written into its
	// pages directly. Where no file can be made they stay in memory.
	// Where ovrun's kernel reads every matrix (KernelOnly) the file is
	// in memory (/dev/shm): its pages are the model, read on every step,
	// and writing them there costs no block device's dirty tracking and
	// write-back (SmolLM2 Q4_1: 0.15-0.16 -> 0.07-0.09 s on this VM's
	// ext4 /tmp).
	if !w.KernelOnly() || blob.Spill(shmDir) != nil {
		_ = blob.Spill(os.TempDir())
	}
	// The conversion reads the checkpoint's pages, each tensor's dropped
	// once converted (BindMapped), and writes the file's, which leave the
	// resident set as it goes (the compile does not read the kernel's
	// blocks; the graph's first calls fault them back in), or the
	// checkpoint and its converted copy would be resident together at the
	// start's peak (qwen2.5-0.5b Q8_0: 1066 -> 656 MiB).
	stop := releasing(func() { blob.ReleaseFiles() })
	err = w.BindMapped(blob.Bytes())
	stop()
	if err == nil {
		// The blob holds every weight now: the checkpoint's pages need
		// not stay resident (a later read faults them back in).
		err = w.ReleaseSource()
	}
	if err != nil {
		blob.Free()
		return nil, err
	}
	return blob, nil
}

// WeightsRegion is where the weights blob lies in memory (empty when the
// graphs compile in workers, which hold the weights): for
// runtime.Memory.
//
// It never waits: a decode step that asks while a background compile reads
// the weights in gets the region as it was before (empty).
func (c *Compiler) WeightsRegion() runtime.Region {
	if r := c.region.Load(); r != nil {
		return *r
	}
	return runtime.Region{}
}

// HostViews reports whether graphs on this device read their KV inputs in
// place from host memory, which growth without copy needs. Only the CPU
// plugin is known to; other devices take the copy-and-grow path.
func (c *Compiler) HostViews() bool { return strings.EqualFold(c.opts.Device, "CPU") }

// EffectivePrecision is the inference precision the device reported for the
// last compiled graph (CPUs without bf16 support run a bf16 request in f32).
func (c *Compiler) EffectivePrecision() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.effective
}

// NonFiniteWeight names the first NaN or infinite weight of the
// checkpoint, "" when every weight is finite.
func (c *Compiler) NonFiniteWeight() string {
	name, i, v, ok := c.ck.NonFinite()
	if !ok {
		return ""
	}
	return fmt.Sprintf("the checkpoint's first non-finite weight is %s[%d] = %v", name, i, v)
}

// SharedStepPenalty estimates how much longer a shared graph's decode step
// is than the decode graph's for this compiler's model
// (compilecost.SharedStepPenalty of its layers and weight bytes, or
// PagedSharedStepPenalty for paged graphs).
func (c *Compiler) SharedStepPenalty() float64 {
	layers, bytes := c.weights.Config().NumHiddenLayers, c.weights.StepBytes()
	if c.Paged() {
		return compilecost.PagedSharedStepPenalty(layers, bytes)
	}
	return compilecost.SharedStepPenalty(layers, bytes)
}

// SplitsMLP says whether graphs compiled for device with props (the last
// INFERENCE_PRECISION_HINT among them wins; none: the device's default)
// keep 16-bit gate and up weights apart (model.WeightOptions.SplitMLP): the
// CPU plugin fuses a layer's MLP into one LLMMLP node for bf16 inference on
// a CPU with AMX, and only from separate gate and up products.
func SplitsMLP(core *ov.Core, device string, props []ov.Property) bool {
	if !strings.EqualFold(device, "CPU") {
		return false
	}
	precision, _ := core.Property(device, "INFERENCE_PRECISION_HINT")
	for _, p := range props {
		if p.Key == "INFERENCE_PRECISION_HINT" {
			precision = p.Value
		}
	}
	return SplitsMLPAt(device, precision)
}

// SplitsMLPAt is SplitsMLP for graphs compiled at a known inference
// precision (export-ir, which has no core to ask for the default).
func SplitsMLPAt(device, precision string) bool {
	return strings.EqualFold(device, "CPU") && cpu.X86.HasAMXBF16 && strings.EqualFold(precision, "bf16")
}

// kvElement is the OpenVINO element type of a resolved KV precision.
func kvElement(p string) ov.ElementType {
	switch p {
	case "bf16":
		return ov.BF16
	case "f16":
		return ov.F16
	}
	return ov.F32
}

// KVElemBytes is the size of one cache element of a resolved KV precision
// (f32, bf16 or f16).
func KVElemBytes(p string) int { return kvElement(p).Size() }

// Options reports the compile options in use.
func (c *Compiler) Options() Options { return c.opts }

// Properties are the compile properties every graph gets.
func (c *Compiler) Properties() []ov.Property { return c.props }

// Weights is the shared weights blob (its format and size).
func (c *Compiler) Weights() *model.Weights { return c.weights }

// BuildIR emits the graph XML of a spec (for inspection and timing).
func (c *Compiler) BuildIR(spec model.GraphSpec) ([]byte, error) {
	return model.BuildIR(c.weights, c.withAttention(spec))
}

// Compile builds, reads and compiles the graph, then prepares its infer
// request with input and output tensors over C memory.
func (c *Compiler) Compile(ctx context.Context, spec model.GraphSpec) (runtime.Executable, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	spec = c.withAttention(spec)
	if spec.Shared && !c.SharedGraphs() {
		return nil, fmt.Errorf("graph %s: a shared graph has a dynamic token axis and bounded or paged attention; %s with attention %s compiles static graphs (use prefill mode graph or decode)", spec.Name(), c.opts.Device, c.opts.Attention)
	}
	if bound := c.reuseBound(spec); bound > 0 {
		return c.compileReused(ctx, spec, bound)
	}
	return c.compile(ctx, spec)
}

// compile compiles spec's graph in a worker or in this process.
func (c *Compiler) compile(ctx context.Context, spec model.GraphSpec) (runtime.Executable, error) {
	if c.opts.Worker != nil {
		return c.compileInWorker(ctx, spec)
	}
	xml, err := model.BuildIR(c.weights, spec)
	if err != nil {
		return nil, err
	}
	return c.CompileIR(ctx, spec, xml)
}

// CompileIR compiles an already-emitted graph, or imports it from the
// compiled-rung cache when it is there (and stores it there when not).
func (c *Compiler) CompileIR(ctx context.Context, spec model.GraphSpec, xml []byte) (runtime.Executable, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	spec = c.withAttention(spec)
	if c.opts.Worker != nil {
		return nil, fmt.Errorf("compile graph %s: this compiler compiles in worker processes and holds no weights", spec.Name())
	}
	if err := c.injectedFailure(spec); err != nil {
		return nil, err
	}
	var (
		cm     *ov.CompiledModel
		origin = runtime.Origin{Source: runtime.OriginCompiled}
		notes  []string
		key    rungcache.Key
		drop   = func() {}
	)
	// What the start and the graph's emission left in Go's heap goes back
	// to the system before the plugin lays out its own memory, so that
	// both are not at their peak at once (SmolLM2: 19 MiB of heap for 7
	// MiB live after reading the model and its tokenizer).
	debug.FreeOSMemory()
	if c.cache != nil {
		key = c.key(spec, xml)
		cm, origin, notes, drop = c.imported(spec, key)
	}
	if cm == nil {
		start := time.Now()
		var err error
		if cm, err = c.compileModel(spec, xml); err != nil {
			return nil, err
		}
		if c.cache != nil {
			var more []string
			origin, more = c.export(spec, key, cm, time.Since(start).Seconds())
			notes = append(notes, more...)
			c.releaseFiles() // the export read the weights the graph shares with the blob
		}
		drop = func() { c.releaseFiles() }
	}
	return c.newExecutable(spec, cm, len(xml), origin, drop, notes...)
}

// compileModel reads and compiles one graph with the compile properties and
// records the precision the device reports; the weights are read in first
// if they are not yet (weights.go).
func (c *Compiler) compileModel(spec model.GraphSpec, xml []byte) (*ov.CompiledModel, error) {
	if err := c.readWeights(); err != nil {
		return nil, fmt.Errorf("compile graph %s: %w", spec.Name(), err)
	}
	m, err := c.core.ReadModel(xml, c.wt)
	if err != nil {
		return nil, fmt.Errorf("read graph %s: %w", spec.Name(), err)
	}
	stop := c.releaseWhile()
	cm, err := c.core.CompileModel(m, c.opts.Device, c.props...)
	stop()
	m.Close()
	if err != nil {
		return nil, fmt.Errorf("compile graph %s on %s: %w", spec.Name(), c.opts.Device, err)
	}
	c.recordPrecision(cm)
	// The compile read the files' weights (the plugin keeps what it needs,
	// in its own layouts or, for a few constants, by reference to the
	// mapping, which faults back in on use): drop their pages from the
	// resident set, as the page cache holds them anyway.
	if err := c.releaseFiles(); err != nil {
		cm.Close()
		return nil, err
	}
	ov.TrimHeap() // what the compile's transformations freed leaves the resident set
	return cm, nil
}

// releaseInterval is how often the files' pages are dropped while a graph
// compiles.
const releaseInterval = 100 * time.Millisecond

// releaseWhile drops the pages of the files the blob maps every
// releaseInterval until the returned stop is called: the plugin reads each
// weight once to lay it out its own way, so without this the files' pages
// (the size of the weights) and the plugin's copies would be resident
// together at the compile's peak. A page read again faults back in from
// the page cache.
func (c *Compiler) releaseWhile() (stop func()) {
	return releasing(func() { c.releaseFiles() }) // best effort; the final release reports errors
}

// keepsWeights reports whether the graphs read all their weights in place
// on every call (model.Weights.KernelOnly: ovrun's kernel multiplies the
// blob's blocks, the plugin lays out no copy of them): those pages are the
// model, as a mapped GGUF file is llama.cpp's, and dropping them would only
// make the next calls fault them back in. Where the plugin lays out some
// matrices (a Q4_K file with --weights kernel), the pages are dropped as
// for the plugin's weights. The conversion (AllocWeights) and the digest
// (readWeights) drop them either way: the compile does not read them.
func (c *Compiler) keepsWeights() bool { return c.weights.KernelOnly() }

// releaseFiles drops the pages of the files the blob maps from the
// resident set, unless the graphs read them in place (keepsWeights).
func (c *Compiler) releaseFiles() error {
	if c.keepsWeights() {
		return nil
	}
	return c.blob.ReleaseFiles()
}

// releasing calls release every releaseInterval until the returned stop
// is called.
func releasing(release func()) (stop func()) { return every.Start(releaseInterval, release) }

// recordPrecision keeps the inference precision cm reports as the
// effective one.
func (c *Compiler) recordPrecision(cm *ov.CompiledModel) {
	if p, err := cm.Property("INFERENCE_PRECISION_HINT"); err == nil {
		c.mu.Lock()
		c.effective = p
		c.mu.Unlock()
	}
}

// newExecutable prepares the infer request of a compiled (or imported)
// graph; it owns cm from here on. notes are what the compiled-rung cache
// had to say about it. drop drops the pages of the weights the graph was
// read from (the blob's files, or the cache entry an import reads in
// place), during the warm-up and after: its first calls lay the weights
// out in the plugin's memory, reading every one from there once, and what
// they read would otherwise stay resident for the whole run (qwen2.5-0.5b
// Q8_0: 350 MiB of a 1070 MiB resident set).
func (c *Compiler) newExecutable(spec model.GraphSpec, cm *ov.CompiledModel, irBytes int, origin runtime.Origin, drop func(), notes ...string) (runtime.Executable, error) {
	e := c.executableOn(spec, cm, irBytes, origin, notes)
	if err := e.prepare(); err != nil {
		return nil, errors.Join(fmt.Errorf("prepare graph %s: %w", spec.Name(), err), e.Close())
	}
	// The compile ran code the graph's calls do not (the IR reader, the
	// plugin's passes): out of the resident set with it before the first
	// calls fault in theirs (SmolLM2 kernel-q8: code 68 -> 33-38 MiB,
	// peak 195 -> 164 MiB with the kernel's pages dropped after their
	// conversion, the decode rate the same within this VM's noise).
	procfs.ReleaseCode()
	stop := releasing(drop)
	err := e.warmUp()
	stop()
	if err != nil {
		return nil, errors.Join(err, e.Close())
	}
	drop()
	return e, nil
}

// executableOn is an executable of spec over cm, not yet prepared.
func (c *Compiler) executableOn(spec model.GraphSpec, cm *ov.CompiledModel, irBytes int, origin runtime.Origin, notes []string) *executable {
	shape := c.shape
	shape.ElemBytes = kvElement(spec.KVPrecision).Size()
	shape.Block = spec.Attention.CacheBlock()
	return &executable{spec: spec, compiled: cm, shape: shape, vocab: c.vocab, inPlace: c.keepsWeights(), fixedCache: c.weights.AttendsInKernel(spec), stepT: c.weights.StepTokens(spec), irBytes: irBytes, origin: origin, notes: notes}
}

// Close frees the core and the weights; every Executable must be closed first.
func (c *Compiler) Close() error {
	var err error
	c.wmu.Lock()
	defer c.wmu.Unlock()
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
	c.region.Store(nil)
	return err
}

// GraphsShareWeights reports whether every graph this compiler makes reads
// the one blob's weights in place (runtime.WeightSharer): ovrun's kernel,
// compiled in this process (a compile worker's graphs come back as copies)
// and not imported from the compiled-rung cache (each entry holds its own).
func (c *Compiler) GraphsShareWeights() bool {
	return c.opts.Worker == nil && c.cache == nil && c.keepsWeights()
}
