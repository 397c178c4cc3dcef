package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/app/compilebench"
	"github.com/ovtoolkit/ovrun/app/plan"
	"github.com/ovtoolkit/ovrun/app/profiling"
	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
	"github.com/ovtoolkit/ovrun/runtime/ovexec"
)

func tiny(t *testing.T) string {
	return testenv.Synth(t, "tiny", model.DTypeF32)
}

func TestCompileEndToEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cost.json")
	out, err := ovtrace(t, "compile", "--model", tiny(t), "--ladder", "32,64", "--reps", "2", "--prefill-chunk", "64", "--json", path, "-q")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	p, err := compilecost.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Device != "CPU" || !strings.HasPrefix(p.OpenVINOVersion, "2026.") || len(p.Rungs) != 2 {
		t.Fatalf("profile = %+v", p)
	}
	for i, r := range p.Rungs {
		if r.Capacity != []int{32, 64}[i] || len(r.CompileS) != 2 || len(r.CompileCPUS) != 2 || len(r.IRBuildS) != 2 ||
			r.MedianS <= 0 || r.PeakRSSBytes < 1<<20 {
			t.Errorf("rung %d = %+v", i, r)
		}
		// --import (the default): each decode compile exported and imported back.
		if len(r.ImportS) != 2 || len(r.ExportS) != 2 || r.ImportS[0] <= 0 || r.ExportS[0] <= 0 {
			t.Errorf("rung %d: import_s %v, export_s %v; want two of each", i, r.ImportS, r.ExportS)
		}
	}
	// Two rungs: the exact line through their medians, unless the larger
	// one happened to compile faster (tiny compiles take ~0.08 s, well
	// within the noise), where a fit never falls: a constant at their mean.
	if rising := p.Rungs[1].MedianS >= p.Rungs[0].MedianS; p.Fit.N != 2 ||
		(rising && p.Fit.Model != compilecost.FitLinear) || (!rising && p.Fit.Model != compilecost.FitConstant) {
		t.Errorf("fit = %+v over medians %v and %v: want the line through both, or a constant where they fall", p.Fit, p.Rungs[0].MedianS, p.Rungs[1].MedianS)
	}
	if !strings.Contains(out, "fit: t = ") {
		t.Errorf("table lacks the fit:\n%s", out)
	}
	// The other kinds: rung 64 after rung 32, the 64-token prefill graph of
	// capacity 64 first and after its decode graph; capacity 32 holds no
	// 64-token prefill graph, so its decode graph has no predecessor.
	r32, r64 := p.Rungs[0], p.Rungs[1]
	if len(r32.SuccessorS) != 0 || len(r32.Prefill) != 0 {
		t.Errorf("rung 32 = %+v, want no other kinds", r32)
	}
	if len(r64.SuccessorS) != 2 || len(r64.Prefill) != 1 || r64.Prefill[0].Chunk != 64 ||
		len(r64.Prefill[0].FirstS) != 2 || len(r64.Prefill[0].SuccessorS) != 2 || r64.Prefill[0].PeakRSSBytes < 1<<20 {
		t.Errorf("rung 64 = %+v, want 2 successor decode compiles and 2+2 prefill compiles", r64)
	}
	for _, k := range []string{"decode.successor", "prefill64.first", "prefill64.successor"} {
		if f, ok := p.Fits[k]; !ok || f.Model != compilecost.FitConstant {
			t.Errorf("fits[%s] = %+v (%v), want a constant (one capacity)", k, f, ok)
		}
	}
	if !strings.Contains(out, "prefill64.successor") {
		t.Errorf("table lacks the kinds:\n%s", out)
	}
}

// TestCompileMeasuresWhatOvrunCompiles: without --prefill-chunk the
// profile holds the graphs ovrun compiles on this CPU: paged attention, the
// cache in the inference precision, and prefill graphs of 512 tokens.
func TestCompileMeasuresWhatOvrunCompiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cost.json")
	out, err := ovtrace(t, "compile", "--model", tiny(t), "--ladder", "512", "--reps", "1", "--precision", "f32",
		"--successors=false", "--import=false", "--json", path, "-q")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	p, err := compilecost.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Attention != string(model.AttentionPaged) || p.KVPrecision != "f32" {
		t.Fatalf("attention %q, kv_precision %q; want paged, f32 (ovrun's auto on the CPU)", p.Attention, p.KVPrecision)
	}
	if r := p.Rungs[0]; len(r.Prefill) != 1 || r.Prefill[0].Chunk != runtime.PagedPrefillChunk {
		t.Errorf("prefill kinds %+v, want one of %d tokens, as ovrun's paged graphs take", r.Prefill, runtime.PagedPrefillChunk)
	}
	if !strings.Contains(out, "attention paged, kv f32") {
		t.Errorf("the table does not name the form:\n%s", out)
	}
}

// TestMeasuredPropertiesAreOvruns checks that a compile measurement uses the
// properties ovrun compiles with, the f32 run over compressed weights
// included (dynamic quantization off).
func TestMeasuredPropertiesAreOvruns(t *testing.T) {
	gguf := testenv.SmolLM2(t)
	out, err := ovtrace(t, "compile-once", "--model", gguf, "--capacity", "32", "--precision", "f32")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var m compilebench.Measurement
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	ck, err := model.Load(gguf)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	comp, err := ovexec.NewCompiler(ck, ovexec.Options{Precision: "f32"})
	if err != nil {
		t.Fatal(err)
	}
	defer comp.Close()
	var want []string
	for _, p := range comp.Properties() {
		want = append(want, p.Key+"="+p.Value)
	}
	if !slices.Equal(m.Properties, want) {
		t.Errorf("measured with %v, ovrun compiles with %v", m.Properties, want)
	}
	if !slices.Contains(m.Properties, ovexec.DynamicQuantizationKey+"=0") {
		t.Errorf("measured with %v: an f32 run over compressed weights keeps dynamic quantization off", m.Properties)
	}
}

func TestCompileErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cost.json")
	_, err := ovtrace(t, "compile", "--model", tiny(t), "--ladder", "32", "--reps", "1", "--device", "NOPE", "--json", path, "-q")
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "capacity 32, repetition 1: compile-once:") {
		t.Errorf("err = %v, want one line naming the compile", err)
	}
	if _, serr := os.Stat(path); serr == nil {
		t.Error("a profile was written although nothing was measured")
	}
	if _, err := ovtrace(t, "compile", "--model", tiny(t), "--ladder", "64,32"); err == nil || !strings.Contains(err.Error(), "ladder") {
		t.Errorf("descending ladder: err = %v", err)
	}
	if _, err := ovtrace(t, "compile", "--model", filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "--model") {
		t.Errorf("missing model: err = %v", err)
	}
}

func TestABEndToEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ab.json")
	out, err := ovtrace(t, "ab", "--model", tiny(t), "--capacity", "32", "--pairs", "2", "--allow-small",
		"--variant", "f32=prop:INFERENCE_PRECISION_HINT=f32", "--variant", "bf16=prop:INFERENCE_PRECISION_HINT=bf16", "--json", path, "-q")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep compilebench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(rep.Order); string(got) != `[["f32","bf16"],["bf16","f32"]]` {
		t.Errorf("order = %s", got)
	}
	var arms []string
	for _, tr := range rep.Trials {
		arms = append(arms, tr.Variant)
		if tr.Values["compile_s"] <= 0 || tr.Values["peak_rss_bytes"] <= 0 {
			t.Errorf("trial %+v lacks values", tr)
		}
	}
	if strings.Join(arms, ",") != "f32,bf16,bf16,f32" || rep.FinishReason != "complete" || len(rep.Warmup) != 2 {
		t.Errorf("trials %v, finish %s, warm-up %d", arms, rep.FinishReason, len(rep.Warmup))
	}
	if len(rep.Comparisons) != 3 || rep.Comparisons[0].N != 2 || rep.Comparisons[0].Treatment != "bf16" {
		t.Errorf("comparisons = %+v", rep.Comparisons)
	}
	e := rep.Equivalent
	if e == nil {
		t.Fatal("no equivalence evidence")
	}
	// bf16 only changes the numbers where the CPU runs bf16; where it falls
	// back to f32 (no AVX512-BF16/AMX) the logits must be bitwise equal.
	f32, bf16 := rep.Variants[0].PrecisionEffective, rep.Variants[1].PrecisionEffective
	t.Logf("effective precision: f32 variant %s, bf16 variant %s; %s", f32, bf16, e.Detail)
	if f32 != bf16 {
		if e.Equal || e.MaxAbsDiff == 0 {
			t.Errorf("f32 vs bf16 logits reported equal: %+v", e)
		}
	} else if !e.Equal || e.MaxAbsDiff != 0 {
		t.Errorf("both variants run %s but the logits differ: %+v", f32, e)
	}
	if !strings.Contains(out, "Paired effect") || !strings.Contains(out, "equivalence:") {
		t.Errorf("table:\n%s", out)
	}
}

func TestABRejectsSmallDesigns(t *testing.T) {
	_, err := ovtrace(t, "ab", "--model", tiny(t), "--capacity", "32", "--pairs", "5",
		"--variant", "a=prop:INFERENCE_PRECISION_HINT=f32", "--variant", "b=")
	if err == nil || !strings.Contains(err.Error(), "2/2^n = 0.0625") {
		t.Errorf("err = %v", err)
	}
	_, err = ovtrace(t, "ab", "--model", tiny(t), "--capacity", "32",
		"--variant", "a=prop:INFERENCE_PRECISION_HINT=f32", "--variant", "b=lib:/nonexistent/ov")
	if err == nil || !strings.Contains(err.Error(), "variant b: lib:/nonexistent/ov") {
		t.Errorf("err = %v", err)
	}
}

func TestPlan(t *testing.T) {
	cost := filepath.Join(testenv.RepoRoot(t), "compilecost", "testdata", "cost.json")
	path := filepath.Join(t.TempDir(), "plan.json")
	out, err := ovtrace(t, "plan", "--compile-cost", cost, "--decode-rate", "50", "--prompt-tokens", "128",
		"--decode-tokens", "8064", "--kv-bytes-per-token", "12288", "--json", path)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, p := range compilecost.Policies() {
		if !strings.Contains(out, p) {
			t.Errorf("table lacks %s:\n%s", p, out)
		}
	}
	var rep plan.Report
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Results) != len(compilecost.Policies()) {
		t.Fatalf("plan.json: %v, %d results", err, len(rep.Results))
	}
	byPolicy := map[string]compilecost.SimResult{}
	for _, r := range rep.Results {
		byPolicy[r.Policy] = r
	}
	// Compiling one ahead moves all but the first compile off the path.
	if e, o := byPolicy["grow-eager"], byPolicy["grow-one-ahead"]; o.ForegroundCompileS >= e.ForegroundCompileS || o.KVReservedAvgBytes <= 0 {
		t.Errorf("one-ahead foreground %v vs eager %v", o.ForegroundCompileS, e.ForegroundCompileS)
	}
	if _, err := ovtrace(t, "plan", "--compile-cost", cost, "--decode-rate", "50", "--prompt-tokens", "128",
		"--decode-tokens", "10", "--policy", "eager"); err == nil || !strings.Contains(err.Error(), `--policy "eager"`) {
		t.Errorf("bad policy: err = %v", err)
	}
}

func TestProfilePerfTopDiff(t *testing.T) {
	if _, err := profiling.CheckPerf(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	pb := filepath.Join(dir, "c32.pb.gz")
	out, err := ovtrace(t, "profile", "--model", tiny(t), "--capacity", "32", "--out", pb, "--top", "5")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "kept the samples of the compile") || !strings.Contains(out, "cpu-clock total") {
		t.Errorf("profile output:\n%s", out)
	}
	p, err := profiling.ReadFile(pb)
	if err != nil {
		t.Fatal(err)
	}
	if profiling.GraphNodes(p) < 100 || len(p.Mapping) < 3 {
		t.Errorf("graph nodes %d, mappings %d", profiling.GraphNodes(p), len(p.Mapping))
	}
	var sawOV bool
	for _, m := range p.Mapping {
		sawOV = sawOV || strings.Contains(m.File, "libopenvino")
	}
	if !sawOV {
		t.Error("no OpenVINO shared object among the mappings")
	}
	out, err = ovtrace(t, "top", pb, "--json", "--n", "3")
	if err != nil {
		t.Fatal(err)
	}
	var top profiling.TopReport
	if err := json.Unmarshal([]byte(out), &top); err != nil || len(top.Rows) != 3 || top.SampleType != "cpu-clock" {
		t.Errorf("top --json: %v %+v", err, top)
	}
	out, err = ovtrace(t, "diff", pb, pb)
	if err != nil || !strings.Contains(out, "no differences") {
		t.Errorf("diff of a profile with itself: %v\n%s", err, out)
	}
	if _, err := ovtrace(t, "profile", "--model", tiny(t), "--capacity", "32", "--out", pb, "--", "true"); err == nil {
		t.Error("--model together with a command accepted")
	}
}
