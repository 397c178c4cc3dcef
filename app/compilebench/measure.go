package compilebench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/ovtoolkit/ovrun/internal/hugepages"
	"github.com/ovtoolkit/ovrun/internal/npy"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/ov"
	"github.com/ovtoolkit/ovrun/runtime"
	"github.com/ovtoolkit/ovrun/runtime/ovexec"
)

// OnceConfig is one compile to measure.
type OnceConfig struct {
	// Model is the checkpoint folder.
	Model string
	// Capacity and Chunk select the graph (Chunk 1: the decode graph).
	Capacity, Chunk int
	// Device is the OpenVINO device (default CPU).
	Device string
	// Precision, when set, is INFERENCE_PRECISION_HINT unless Props sets it.
	Precision string
	// Attention, when set, is the graphs' form of attention (else auto:
	// what ovrun compiles on the device).
	Attention model.Attention
	// UnderDecode measures the compile as the runtime makes a background
	// one (runtime.MeasureCompileUnderDecode): After is then one decode
	// graph, which decodes while the measured graph compiles on the
	// runtime's compile thread at nice CompileNice.
	UnderDecode bool
	// Batch, with UnderDecode and static graphs, measures a batched
	// server's compile: the graph is the static batched variant for Batch
	// sequences, and the After graph's variant for Batch sequences decodes
	// beside it (0 or 1: one sequence).
	Batch       int
	CompileNice int
	// Props are further compile properties.
	Props map[string]string
	// DumpLogits, when set, names a .npy file that receives, after the
	// measurement, the logits of a greedy run on the graph's capacity:
	// row 0 after a seeded prompt of PromptTokens tokens (default 8),
	// row 1 after one decode step — the equivalence evidence of `ovtrace ab`.
	DumpLogits   string
	PromptTokens int
	Seed         uint64
	// After are graphs compiled (untimed, and kept until the measurement
	// is done) before the measured one: the measured compile is then a
	// successor, as the runtime compiles its later graphs.
	After []model.GraphSpec
	// ExportHash, when set, exports the compiled model after the
	// measurement (ov_compiled_model_export_model, outside the timed
	// window) and records the SHA-256 and size of its bytes: what the
	// compiler produced, for `ovtrace ab`'s equivalence check.
	ExportHash bool
	// Import, when set, exports the compiled model after the measurement
	// and imports it back in the same process (ov_core_import_model, the
	// compile properties set on the core for the device first, as the
	// compiled-rung cache does), timing both: ExportS and ImportS.
	Import bool
}

// Measurement is what one compile cost. Fields ending in _s are seconds.
type Measurement struct {
	Model    string `json:"model"`
	Device   string `json:"device"`
	Capacity int    `json:"capacity"`
	Chunk    int    `json:"chunk"`
	// After names the graphs compiled before this one in the process
	// (CAPACITY:CHUNK), empty for a first compile.
	After string `json:"after,omitempty"`
	// GraphNodes is the number of layers (nodes) of the emitted IR.
	GraphNodes int `json:"graph_nodes"`
	// Layers and WeightBytes are the model's decoder layers and the bytes
	// of weights its decode step reads (model.Weights.StepBytes).
	Layers      int   `json:"layers,omitempty"`
	WeightBytes int64 `json:"weight_bytes,omitempty"`
	// PluginLoadS is loading the device plugin (asking it for a property)
	// before anything is timed; not part of CompileS.
	PluginLoadS float64 `json:"plugin_load_s"`
	// IRBuildS is emitting the IR XML plus OpenVINO reading it.
	IRBuildS float64 `json:"ir_build_s"`
	// CompileS is the wall time of ov_core_compile_model.
	CompileS float64 `json:"compile_s"`
	// CompileCPUS is the process's user+system CPU time (all threads,
	// getrusage RUSAGE_SELF) during that call.
	CompileCPUS float64 `json:"compile_cpu_s"`
	// PeakRSSBytes is the process's VmHWM right after the compile: weights,
	// IR and the compiled graph included.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// CompileStartMonoS and CompileEndMonoS bracket the compile on
	// CLOCK_MONOTONIC, seconds (the clock perf is told to record with).
	CompileStartMonoS float64 `json:"compile_start_mono_s"`
	CompileEndMonoS   float64 `json:"compile_end_mono_s"`
	OpenVINOVersion   string  `json:"openvino_version"`
	// HugePages says whether the process's malloc asked for transparent
	// huge pages (internal/hugepages): a compile on 4 KiB pages takes far
	// longer, so measurements are only comparable with the same setting.
	HugePages bool `json:"huge_pages"`
	// Library is the libopenvino_c that was loaded.
	Library string `json:"library"`
	// Attention and KVPrecision are the measured graph's attention form
	// and KV cache element type: those ovrun compiles with --attention
	// auto and --kv-precision auto on this device (ovexec.Form).
	Attention   string `json:"attention,omitempty"`
	KVPrecision string `json:"kv_precision,omitempty"`
	// PrecisionEffective is the inference precision the compiled model
	// reports (a CPU without bf16 support runs f32 whatever the hint).
	PrecisionEffective string `json:"precision_effective,omitempty"`
	// Properties are the compile properties passed, KEY=VALUE.
	Properties []string `json:"properties,omitempty"`
	// Logits is the .npy written for DumpLogits.
	Logits string `json:"logits,omitempty"`
	// ExportSHA256 and ExportBytes describe the exported compiled model
	// (OnceConfig.ExportHash); ExportS is how long the export took.
	ExportSHA256 string  `json:"export_sha256,omitempty"`
	ExportBytes  int64   `json:"export_bytes,omitempty"`
	ExportS      float64 `json:"export_s,omitempty"`
	// UnderDecodeTokensPerS is the decode rate of the After graph while
	// the measured one compiled (OnceConfig.UnderDecode).
	UnderDecodeTokensPerS float64 `json:"under_decode_tokens_per_s,omitempty"`
	// Batch is the decode batch of an under-decode measurement (the
	// measured graph is that batch's static variant); 0: one sequence.
	Batch int `json:"batch,omitempty"`
	// ImportS is the wall time of importing the exported model
	// (OnceConfig.Import): what a compiled-rung cache hit costs instead of
	// CompileS.
	ImportS float64 `json:"import_s,omitempty"`
	// Memo are the counters a preloaded memoization patch kept during
	// ov_core_compile_model (its counter file, named by
	// OVTRACE_MEMO_STATS, read before and after the call); nil without one.
	Memo *MemoStats `json:"memo,omitempty"`
}

// Endpoints are the measured quantities an experiment can compare.
var Endpoints = []string{"compile_s", "compile_cpu_s", "peak_rss_bytes", "ir_build_s"}

// Value returns the endpoint's value.
func (m *Measurement) Value(endpoint string) (float64, error) {
	switch endpoint {
	case "compile_s":
		return m.CompileS, nil
	case "compile_cpu_s":
		return m.CompileCPUS, nil
	case "peak_rss_bytes":
		return float64(m.PeakRSSBytes), nil
	case "ir_build_s":
		return m.IRBuildS, nil
	}
	return 0, fmt.Errorf("unknown endpoint %q (want one of %s)", endpoint, strings.Join(Endpoints, ", "))
}

// MeasureCompile emits the graph's IR, reads it and compiles it once,
// timing each part, in this process. Run it in a fresh process per
// measurement (`ovtrace compile-once`): OpenVINO keeps plugins, caches and
// allocator state alive between compiles.
func MeasureCompile(ctx context.Context, cfg OnceConfig) (*Measurement, error) {
	if cfg.Device == "" {
		cfg.Device = "CPU"
	}
	if cfg.Chunk == 0 {
		cfg.Chunk = 1
	}
	if err := ov.Load(); err != nil {
		return nil, err
	}
	ck, err := model.Load(cfg.Model)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	ver, _ := ov.Version()
	m := &Measurement{Model: cfg.Model, Device: cfg.Device, Capacity: cfg.Capacity, Chunk: cfg.Chunk,
		After: FormatSpecs(cfg.After), OpenVINOVersion: ver, HugePages: hugepages.On(), Library: ov.LibraryPath()}
	measureIt := measure
	if cfg.UnderDecode {
		measureIt = measureUnderDecode
	}
	if err := measureIt(ctx, ck, cfg, m); err != nil {
		return nil, err
	}
	if cfg.DumpLogits != "" {
		if err := dumpLogits(ctx, ck, cfg); err != nil {
			return nil, fmt.Errorf("dump logits: %w", err)
		}
		m.Logits = cfg.DumpLogits
	}
	return m, nil
}

// options are the compiler options of cfg's graphs.
func (cfg OnceConfig) options() ovexec.Options {
	return ovexec.Options{Device: cfg.Device, Precision: cfg.Precision, Properties: cfg.Props, Attention: cfg.Attention}
}

// measureUnderDecode compiles the graph through the runtime as a ladder
// compiles its next rung in the background, beside the decode loop of the
// After graph (runtime.MeasureCompileUnderDecode): CompileS is the
// compile's wall time as the ladder times it (IR build included, as the
// runtime's actual compile times are), UnderDecodeTokensPerS the decode
// rate meanwhile.
func measureUnderDecode(ctx context.Context, ck *model.Checkpoint, cfg OnceConfig, m *Measurement) error {
	comp, err := ovexec.NewCompiler(ck, cfg.options())
	if err != nil {
		return err
	}
	defer comp.Close()
	w := comp.Weights()
	m.Layers, m.WeightBytes = w.Config().NumHiddenLayers, w.StepBytes()
	for _, p := range comp.Properties() {
		m.Properties = append(m.Properties, p.Key+"="+p.Value)
	}
	spec := comp.Spec(model.GraphSpec{Capacity: cfg.Capacity, Chunk: 1})
	batch := max(cfg.Batch, 1)
	if batch > 1 {
		if spec.Attention != model.AttentionStatic {
			return fmt.Errorf("a compile under a decode batch of %d measures static batched graphs: give --attention static (this graph is %s)", batch, spec.Attention)
		}
		spec.Batch = batch
		m.Batch = batch
	}
	m.Attention, m.KVPrecision = string(spec.Attention), spec.KVPrecision
	cpu0 := cpuSeconds()
	m.CompileStartMonoS = monotonicSeconds()
	u, err := runtime.MeasureCompileUnderDecode(ctx, comp, comp.KVShape(), cfg.After[0].Capacity, batch, spec,
		runtime.BackgroundOptions{Nice: cfg.CompileNice})
	m.CompileEndMonoS = monotonicSeconds()
	m.CompileCPUS = cpuSeconds() - cpu0 // the decode loop's too
	m.PeakRSSBytes = runtime.PeakRSS()
	if err != nil {
		return fmt.Errorf("compile graph %s beside decoding at %d: %w", spec.Name(), cfg.After[0].Capacity, err)
	}
	m.CompileS, m.UnderDecodeTokensPerS = u.CompileS, u.TokensPerS
	m.PrecisionEffective = comp.EffectivePrecision()
	return nil
}

// measure drives ov directly rather than through ovexec.Compiler, whose
// CompileIR reads, compiles and prepares an infer request in one call: here
// reading the IR and compiling it are timed apart, and nothing else runs
// inside the compile's window.
func measure(ctx context.Context, ck *model.Checkpoint, cfg OnceConfig, m *Measurement) (err error) {
	core, err := ov.NewCore()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, core.Close()) }()
	// Compile the graphs ovrun compiles on this device, with the
	// properties it compiles them with (ovexec.Form).
	form, err := ovexec.NewForm(core, ck.Config, cfg.options())
	if err != nil {
		return err
	}
	w := form.Weights(ck)
	props := form.CompileProperties(w)
	for _, p := range props {
		m.Properties = append(m.Properties, p.Key+"="+p.Value)
	}
	m.Layers, m.WeightBytes = w.Config().NumHiddenLayers, w.StepBytes()
	blob, err := ovexec.AllocWeights(w)
	if err != nil {
		return err
	}
	defer blob.Free()
	wt, err := ov.NewTensorFromPtr(ov.U8, []int64{w.Size()}, blob.Ptr())
	if err != nil {
		return err
	}
	defer wt.Close()
	if err := ctx.Err(); err != nil {
		return err
	}

	// Load the device plugin first, as a runtime compiling its second rung
	// already has: a fresh process pays for it once, not per capacity.
	tp := time.Now()
	if _, err := core.Property(cfg.Device, "FULL_DEVICE_NAME"); err != nil {
		return fmt.Errorf("load the %s plugin: %w", cfg.Device, err)
	}
	m.PluginLoadS = time.Since(tp).Seconds()

	// The predecessors of a successor compile, held until the end.
	for _, spec := range cfg.After {
		spec = form.Spec(spec)
		xml, err := model.BuildIR(w, spec)
		if err != nil {
			return err
		}
		om, err := core.ReadModel(xml, wt)
		if err != nil {
			return fmt.Errorf("read graph %s: %w", spec.Name(), err)
		}
		cm, err := core.CompileModel(om, cfg.Device, props...)
		om.Close()
		if err != nil {
			return fmt.Errorf("compile the predecessor %s on %s: %w", spec.Name(), cfg.Device, err)
		}
		defer cm.Close()
	}

	spec := form.Spec(model.GraphSpec{Capacity: cfg.Capacity, Chunk: cfg.Chunk})
	m.Attention, m.KVPrecision = string(spec.Attention), spec.KVPrecision
	t0 := time.Now()
	xml, err := model.BuildIR(w, spec)
	if err != nil {
		return err
	}
	om, err := core.ReadModel(xml, wt)
	if err != nil {
		return fmt.Errorf("read graph %s: %w", spec.Name(), err)
	}
	defer om.Close()
	m.IRBuildS = time.Since(t0).Seconds()
	m.GraphNodes = bytes.Count(xml, []byte("<layer "))

	statsPath := os.Getenv(EnvMemoStats)
	memo0, err := readMemo(statsPath)
	if err != nil {
		return err
	}
	cpu0 := cpuSeconds()
	m.CompileStartMonoS = monotonicSeconds()
	t1 := time.Now()
	cm, err := core.CompileModel(om, cfg.Device, props...)
	m.CompileS = time.Since(t1).Seconds()
	m.CompileEndMonoS = monotonicSeconds()
	m.CompileCPUS = cpuSeconds() - cpu0
	m.PeakRSSBytes = runtime.PeakRSS()
	if err != nil {
		return fmt.Errorf("compile graph %s on %s: %w", spec.Name(), cfg.Device, err)
	}
	defer cm.Close()
	memo1, err := readMemo(statsPath)
	if err != nil {
		return err
	}
	m.Memo = memo1.Sub(memo0)
	if p, err := cm.Property("INFERENCE_PRECISION_HINT"); err == nil {
		m.PrecisionEffective = p
	}
	if cfg.ExportHash {
		t := time.Now()
		if m.ExportSHA256, m.ExportBytes, err = exportHash(cm); err != nil {
			return err
		}
		m.ExportS = time.Since(t).Seconds()
	}
	if cfg.Import {
		return measureImport(core, cm, cfg.Device, props, m)
	}
	return nil
}

// measureImport exports cm to a temporary file and imports it back, as a
// compiled-rung cache miss then hit would, recording ExportS, ExportBytes
// and ImportS.
func measureImport(core *ov.Core, cm *ov.CompiledModel, device string, props []ov.Property, m *Measurement) error {
	dir, err := os.MkdirTemp("", "ovtrace-import-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "compiled.blob")
	t := time.Now()
	if err := cm.Export(path); err != nil {
		return fmt.Errorf("export the compiled model: %w", err)
	}
	m.ExportS = time.Since(t).Seconds()
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	m.ExportBytes = int64(len(b))
	if err := core.SetProperties(device, props...); err != nil {
		return fmt.Errorf("before the import: %w", err)
	}
	t = time.Now()
	im, err := core.ImportModel(b, device)
	m.ImportS = time.Since(t).Seconds()
	if err != nil {
		return fmt.Errorf("import the exported model: %w", err)
	}
	im.Close()
	return nil
}

// readMemo reads the patch's counter file, if a path is set and the patch
// has created it.
func readMemo(path string) (*MemoStats, error) {
	if path == "" {
		return nil, nil
	}
	s, err := ReadMemoStats(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvMemoStats, err)
	}
	return s, nil
}

// exportHash exports the compiled model to a temporary file and returns
// the SHA-256 of its bytes and their number.
func exportHash(cm *ov.CompiledModel) (string, int64, error) {
	dir, err := os.MkdirTemp("", "ovtrace-export-")
	if err != nil {
		return "", 0, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "compiled.blob")
	if err := cm.Export(path); err != nil {
		return "", 0, fmt.Errorf("export the compiled model: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("hash the exported model: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// dumpLogits compiles the decode graph through the runtime (as ovrun does)
// and writes the logits after a seeded prompt and after one decode step.
func dumpLogits(ctx context.Context, ck *model.Checkpoint, cfg OnceConfig) error {
	comp, err := ovexec.NewCompiler(ck, cfg.options())
	if err != nil {
		return err
	}
	defer comp.Close()
	n := cfg.PromptTokens
	if n <= 0 {
		n = 8
	}
	n = min(n, cfg.Capacity-1)
	if n < 1 {
		return fmt.Errorf("capacity %d leaves no room for a prompt and a decode step", cfg.Capacity)
	}
	res, err := runtime.Generate(ctx, comp, comp.KVShape(), runtime.GenerateConfig{
		Capacity: cfg.Capacity, Prompt: runtime.SeededTokens(max(cfg.Seed, 1), n, ck.Config.VocabSize),
		MaxNewTokens: 2, KeepLogits: true,
	})
	if err != nil {
		return err
	}
	return npy.WriteFile(cfg.DumpLogits, res.Logits)
}

// cpuSeconds is this process's user+system CPU time, all threads.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// monotonicSeconds reads CLOCK_MONOTONIC (Go's time package does not
// expose its absolute value).
func monotonicSeconds() float64 {
	var ts syscall.Timespec
	const clockMonotonic = 1
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}
