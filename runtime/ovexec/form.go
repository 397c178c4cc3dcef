package ovexec

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/ov"
	"github.com/ovtoolkit/ovrun/runtime"
)

// Form is what graphs look like on a device for a model and Options: the
// attention form of each capacity, the KV cache's element type and
// geometry, and the properties that go with them. NewCompiler resolves one,
// and so does whatever compiles graphs by other means and must compile the
// same ones (ovtrace's compile measurements).
type Form struct {
	opts  Options
	shape runtime.KVShape
	// paged is nil when these graphs may use paged attention, else why
	// not (PagedAttentionAvailable, or a cache not in the inference
	// precision).
	paged error
	// splitMLP keeps 16-bit gate and up weights apart (SplitsMLP).
	splitMLP bool
}

// NewForm checks opts and resolves them on core for a model of cfg:
// Device defaults to CPU, Attention and KVPrecision auto are resolved (the
// options NewForm keeps), and --attention paged is an error where the core
// or the device cannot run it.
func NewForm(core *ov.Core, cfg *model.Config, opts Options) (Form, error) {
	if opts.Device == "" {
		opts.Device = "CPU"
	}
	if opts.Attention != "" {
		if _, err := model.ParseAttention(string(opts.Attention)); err != nil {
			return Form{}, err
		}
	}
	if opts.Attention == model.AttentionBounded && !runtime.DynamicShapes(opts.Device) {
		return Form{}, fmt.Errorf("attention bounded: device %s compiles static shapes only; use --attention static or auto", opts.Device)
	}
	if opts.Attention == "" {
		opts.Attention = model.AttentionAuto
	}
	if opts.KVPrecision != "" {
		if _, err := ParseKVPrecision(opts.KVPrecision); err != nil {
			return Form{}, err
		}
	}
	paged := PagedAttentionAvailable(core, opts.Device)
	infer := inferenceCachePrecision(core, opts)
	if opts.KVPrecision == "" || opts.KVPrecision == "auto" {
		opts.KVPrecision = infer
	}
	if paged == nil && opts.KVPrecision != infer {
		// The CPU plugin's PagedAttention reads a cache only in the
		// inference precision ("expect kvcache type bf16, current: f32").
		paged = fmt.Errorf("%w: the CPU plugin's paged attention keeps the cache in the inference precision (%s), not %s as asked",
			ov.ErrNoPagedAttention, infer, opts.KVPrecision)
	}
	if opts.Attention == model.AttentionPaged && paged != nil {
		others := "auto, bounded or static"
		if !runtime.DynamicShapes(opts.Device) {
			others = "auto or static"
		}
		return Form{}, fmt.Errorf("attention paged: %w; use --attention %s", paged, others)
	}
	if opts.Weights.Kernel() {
		if !strings.EqualFold(opts.Device, "CPU") {
			return Form{}, fmt.Errorf("weights %s: ovrun's kernel runs on the CPU only, not %s; use --weights native", opts.Weights, opts.Device)
		}
		if err := core.GGUFLinear(); err != nil {
			return Form{}, fmt.Errorf("weights %s: %w; use --weights native", opts.Weights, err)
		}
	}
	f := Form{opts: opts, shape: runtime.ShapeOf(cfg), paged: paged, splitMLP: SplitsMLP(core, opts.Device, opts.properties())}
	f.shape.ElemBytes = KVElemBytes(opts.KVPrecision)
	// Paged graphs are every graph (auto resolves to paged at every
	// capacity), so the caches are allocated in blocks.
	f.shape.Block = f.AttentionFor(0).CacheBlock()
	return f, nil
}

// PagedUnavailable is nil when these graphs may attend paged, else why
// not (wrapping ov.ErrNoPagedAttention).
func (f *Form) PagedUnavailable() error { return f.paged }

// Spec is spec as these graphs compile it: the attention form of its
// capacity and the KV precision, unless it names them.
func (f *Form) Spec(spec model.GraphSpec) model.GraphSpec { return f.withAttention(spec) }

// StaticCacheMax is the largest past cache (every layer's K and V over the
// graph's capacity, in the cache's element type) for which auto picks the
// static form on the CPU. A static decode step reads the whole cache; a
// bounded one reads the live prefix but pays for the dynamic shapes inside
// the graph (shape inference of every attention node on every call, about
// 1 ms a step for SmolLM2's 30 layers). Measured on an AMD EPYC with 2
// cores (docs/design.md, "Graph forms on the CPU"): SmolLM2 decode with a bf16 cache
// is faster static up to capacity 1024 (22.5 MiB), with an f32 cache up to
// 512 (22.5 MiB); bounded wins from 2048 (bf16) and 1024 (f32) on.
const StaticCacheMax = 24 << 20

// ResolveAttention turns auto (or "") into the form a graph whose past
// cache takes cacheBytes runs: static on devices that compile static shapes
// only (NPU); on the CPU paged where the core can read the operation
// (paged: PagedAttentionAvailable), else static up to StaticCacheMax and
// bounded above; bounded on the GPU (not measured there). Explicit forms
// are kept.
func ResolveAttention(a model.Attention, device string, cacheBytes int64, paged bool) model.Attention {
	if a != "" && a != model.AttentionAuto {
		return a
	}
	switch {
	case !runtime.DynamicShapes(device):
		return model.AttentionStatic
	case paged && strings.EqualFold(device, "CPU"):
		return model.AttentionPaged
	case strings.EqualFold(device, "GPU"):
		return model.AttentionBounded
	case cacheBytes <= StaticCacheMax:
		return model.AttentionStatic
	}
	return model.AttentionBounded
}

// PagedAttentionAvailable says whether graphs for device read by core may
// use paged attention: nil on the CPU when core has ovrun's extension
// (ov.PagedAttentionLibrary), else why not.
func PagedAttentionAvailable(core *ov.Core, device string) error {
	if !strings.EqualFold(device, "CPU") {
		return fmt.Errorf("%w: ovrun runs paged attention on the CPU only, not %s", ov.ErrNoPagedAttention, device)
	}
	return core.PagedAttention()
}

// Weights lays out ck's weights as these graphs read them: in the options'
// weight format, 16-bit gate and up weights apart where the device fuses
// the MLP itself (SplitsMLP).
func (f *Form) Weights(ck *model.Checkpoint) *model.Weights {
	return model.NewWeightsWith(ck, model.WeightOptions{Format: f.opts.Weights, SplitMLP: f.splitMLP})
}

// CompileProperties are the properties every graph over w is compiled
// with: the options' properties (Options.compileProperties) and, for paged
// graphs, the cache's KV_CACHE_PRECISION (Properties). The compiler and
// ovtrace's compile measurements both use it, so they compile alike.
func (f *Form) CompileProperties(w *model.Weights) []ov.Property {
	return f.Properties(f.opts.compileProperties(w.Compressed()))
}

// KVCacheKey is the CPU plugin property that sets the element type of the
// caches PagedAttention reads (u8 by default on CPUs with AMX).
const KVCacheKey = "KV_CACHE_PRECISION"

// Properties are ps plus, for paged graphs, KV_CACHE_PRECISION set to the
// cache's element type unless set: the plugin would otherwise pick its own
// (u8 with scales on CPUs with AMX), and the caches the runtime binds would
// not match.
func (f *Form) Properties(ps []ov.Property) []ov.Property {
	if _, set := f.opts.Properties[KVCacheKey]; set || !f.Paged() {
		return ps
	}
	return append(ps, ov.Property{Key: KVCacheKey, Value: f.opts.KVPrecision})
}

// Attention is the form of attention asked for: static, bounded, or auto,
// which each graph resolves by its capacity (AttentionFor).
func (f *Form) Attention() model.Attention { return f.opts.Attention }

// AttentionFor is the form of attention a graph of this capacity gets.
func (f *Form) AttentionFor(capacity int) model.Attention {
	return ResolveAttention(f.opts.Attention, f.opts.Device, f.shape.BufferBytes(capacity), f.paged == nil)
}

// Paged reports whether this compiler's graphs attend through paged
// attention (every capacity alike).
func (f *Form) Paged() bool {
	return ResolveAttention(f.opts.Attention, f.opts.Device, 0, f.paged == nil) == model.AttentionPaged
}

// DescribeAttention says which form these graphs get: one form, or each
// form with its capacities ("static 256-1024, bounded 2048-4096") when
// auto splits them or a shared graph (always bounded) is among them.
func (f *Form) DescribeAttention(specs ...model.GraphSpec) string {
	if len(specs) == 0 {
		return string(f.opts.Attention)
	}
	form := func(s model.GraphSpec) model.Attention { return f.withAttention(s).Attention }
	var parts []string
	first := 0
	for i, s := range specs {
		f := form(s)
		if i+1 < len(specs) && form(specs[i+1]) == f {
			continue
		}
		part := fmt.Sprintf("%s %d", f, specs[first].Capacity)
		if i > first {
			part += fmt.Sprintf("-%d", s.Capacity)
		}
		parts, first = append(parts, part), i+1
	}
	if len(parts) < 2 {
		return string(form(specs[0]))
	}
	return strings.Join(parts, ", ")
}

// SharedGraphs reports whether this compiler compiles shared graphs (a
// dynamic token axis): on devices that take dynamic shapes, unless static
// attention was asked for.
func (f *Form) SharedGraphs() bool {
	return runtime.DynamicShapes(f.opts.Device) && f.opts.Attention != model.AttentionStatic
}

// KVPrecision is the element type of the KV cache of every graph (auto
// resolved): f32, bf16 or f16.
func (f *Form) KVPrecision() string { return f.opts.KVPrecision }

// KVShape is the cache geometry of this compiler's graphs, in the element
// size of KVPrecision: what the runtime allocates and binds.
func (f *Form) KVShape() runtime.KVShape { return f.shape }

// withAttention gives spec the compiler's attention form and KV precision
// unless it names them. A shared graph's attention is bounded (its token
// axis is dynamic anyway).
func (f *Form) withAttention(spec model.GraphSpec) model.GraphSpec {
	if spec.Attention == "" || spec.Attention == model.AttentionAuto {
		spec.Attention = f.AttentionFor(spec.Capacity)
		if spec.Shared && spec.Attention != model.AttentionPaged {
			spec.Attention = model.AttentionBounded
		}
	}
	if spec.KVPrecision == "" {
		spec.KVPrecision = f.opts.KVPrecision
	}
	return spec
}

// inferencePrecision is the INFERENCE_PRECISION_HINT asked for: the
// property when set (it comes last, so it wins), else Precision ("" when
// neither: the device's default).
func (o Options) inferencePrecision() string {
	if p, ok := o.Properties["INFERENCE_PRECISION_HINT"]; ok {
		return p
	}
	return o.Precision
}

// inferenceCachePrecision is what --kv-precision auto resolves to: f32,
// bf16 or f16, on the CPU the inference precision asked for, or else the
// device's default (INFERENCE_PRECISION_HINT, bf16 on CPUs with bf16
// instructions), where the device can compute in it
// (OPTIMIZATION_CAPABILITIES: a CPU without bf16 runs a bf16 request in
// f32, and its cache stays f32); f32 on other devices and whenever the
// precision is unknown.
func inferenceCachePrecision(core *ov.Core, o Options) string {
	if !strings.EqualFold(o.Device, "CPU") {
		return "f32"
	}
	p := o.inferencePrecision()
	if p == "" {
		p, _ = core.Property(o.Device, "INFERENCE_PRECISION_HINT")
	}
	caps, _ := capabilities(core, o.Device)
	switch p = strings.ToLower(p); {
	case p == "bf16" && !slices.Contains(caps, "BF16"), p == "f16" && !slices.Contains(caps, "FP16"):
		p = "f32"
	}
	return CachePrecisionAt(o.Device, p)
}

// CachePrecisionAt is the KV precision auto resolves to for graphs
// compiled at an inference precision the device can run: that precision
// (bf16, f16) on the CPU, f32 elsewhere or for none. export-ir, which has
// no core to ask, uses it for its --precision.
func CachePrecisionAt(device, precision string) string {
	if p := strings.ToLower(precision); strings.EqualFold(device, "CPU") && (p == "bf16" || p == "f16") {
		return p
	}
	return "f32"
}
