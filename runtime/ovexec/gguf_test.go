package ovexec

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"unsafe"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// smolPrompt is "The quick brown fox jumps over the lazy dog. Paris is the
// capital of France, and Berlin is the capital of" in SmolLM2's vocabulary
// (byte-level BPE from the GGUF's tokenizer.ggml.tokens and merges).
var smolPrompt = []int64{504, 2365, 6354, 16438, 27003, 690, 260, 23790, 2767, 30, 7042, 314, 260, 3575, 282, 4649, 28, 284, 11452, 314, 260, 3575, 282}

// generateGGUF loads a GGUF checkpoint and greedily generates steps tokens
// after prompt at f32 with the given weight format, keeping every logits
// row, with static prefill and decode graphs or, with prefill shared, one
// shared graph.
func generateGGUF(t *testing.T, path string, format model.WeightFormat, prompt []int64, steps int, prefill ...runtime.PrefillMode) (*runtime.GenerateResult, *Compiler) {
	t.Helper()
	ck, err := model.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	comp, err := NewCompiler(ck, Options{Device: "CPU", Precision: "f32", Weights: format})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := comp.Close(); err != nil {
			t.Error(err)
		}
	})
	res, err := runtime.Generate(context.Background(), comp, comp.KVShape(), runtime.GenerateConfig{
		Capacity: 64, PrefillChunk: 16, Prompt: prompt, MaxNewTokens: steps + 1, KeepLogits: true, Prefill: append(prefill, "")[0]})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Logits) != steps+1 {
		t.Fatalf("%d logits rows, want %d", len(res.Logits), steps+1)
	}
	return res, comp
}

// TestGGUFSyntheticMatchesReference runs small random GGUF models whose
// matrices use every block type (Q6_K embedding, Q4_K q and down, Q4_0 k,
// Q8_0 v and lm_head, Q4_1 o, Q6_K gate, F16 up) in every exact weight
// format (kernel: the Q4_1 o through ovrun's kernel),
// and native weights through a shared graph (its Q4_1 and Q4_K minima
// products of their own, as in the decode graph), against the float64 reference over gguf.quants.dequantize (for rounded:
// over the reference's own decoding with rounded zero points): llama (q/k
// stored permuted, untied) and qwen2 (biases, tied Q6_K embedding).
func TestGGUFSyntheticMatchesReference(t *testing.T) {
	const steps = 12
	for _, arch := range []string{"llama", "qwen2"} {
		path := filepath.Join(t.TempDir(), arch+".gguf")
		testenv.Run(t, testenv.Python(t), filepath.Join(testenv.RepoRoot(t), "model", "testdata", "gguf_helper.py"),
			"model", path, "--arch", arch, "--seed", "3")
		prompt := runtime.SeededTokens(5, 11, 512)
		exact, exactTok := reference(t, path, prompt, steps)
		rounded, roundedTok := reference(t, path, prompt, steps, "--round-zero-points")
		for _, format := range []model.WeightFormat{model.WeightsNative, model.WeightsF32, model.WeightsRounded, model.WeightsKernel} {
			t.Run(arch+" "+string(format), func(t *testing.T) {
				want, wantTok := exact, exactTok
				if format == model.WeightsRounded {
					want, wantTok = rounded, roundedTok
				}
				res, comp := generateGGUF(t, path, format, prompt, steps)
				if got := comp.Weights().Compressed(); got != (format != model.WeightsF32) {
					t.Errorf("Compressed() = %v with format %s", got, format)
				}
				if format == model.WeightsKernel {
					xml, err := model.BuildIR(comp.Weights(), model.GraphSpec{Capacity: 64, Chunk: 1})
					if err != nil || !bytes.Contains(xml, []byte(`type="GGUFLinear"`)) {
						t.Errorf("kernel format: no GGUFLinear in the decode graph (%v)", err)
					}
				}
				matchReference(t, res, want, wantTok)
			})
		}
		t.Run(arch+" native shared", func(t *testing.T) {
			res, _ := generateGGUF(t, path, model.WeightsNative, prompt, steps, runtime.PrefillShared)
			if res.PrefillUsed != string(runtime.PrefillShared) {
				t.Fatalf("prompt went through %q, want a shared graph", res.PrefillUsed)
			}
			matchReference(t, res, exact, exactTok)
		})
	}
}

// TestGGUFSmolLM2MatchesReference runs the real SmolLM2-135M-Instruct Q4_1
// GGUF at f32 with compressed weights against the float64 reference: cosine
// >= 0.999 on every row and identical greedy tokens for 32 steps of an
// English prompt, up to the first step where the reference's top-2 logit gap
// is below 0.1 (a near tie that float32 rounding may break either way). The
// graph with weights dequantized to f32 constants must pick the same tokens.
func TestGGUFSmolLM2MatchesReference(t *testing.T) {
	path := testenv.SmolLM2(t)
	if testing.Short() {
		t.Skip("compiles four graphs of a 135M-parameter model")
	}
	const steps = 32
	want, wantTok := reference(t, path, smolPrompt, steps)
	native, comp := generateGGUF(t, path, model.WeightsNative, smolPrompt, steps)
	t.Logf("compressed weights: %d bytes in the blob, properties %v", comp.Weights().TensorBytes(), comp.Properties())
	last := matchUpToTie(t, "native", native, want, wantTok)
	t.Logf("rows 0..%d: %s", last, rowErrors(native.Logits[:last+1], want[:last+1]))

	f32, comp32 := generateGGUF(t, path, model.WeightsF32, smolPrompt, steps)
	t.Logf("f32 weights: %d bytes in the blob; rows 0..%d: %s", comp32.Weights().TensorBytes(), last, rowErrors(f32.Logits[:last+1], want[:last+1]))
	if !slices.Equal(f32.Tokens, native.Tokens) {
		t.Errorf("f32-dequantized weights give other greedy tokens:\n   f32 %v\nnative %v", f32.Tokens, native.Tokens)
	}

	// Rounded zero points (GenAI's form of the file) against the reference
	// decoding the same rounded weights: as close as native is to the exact
	// reference; how far both are from the file's model is logged.
	wantR, wantRTok := reference(t, path, smolPrompt, steps, "--round-zero-points")
	rounded, compR := generateGGUF(t, path, model.WeightsRounded, smolPrompt, steps)
	if !compR.Weights().Compressed() || compR.Weights().TensorBytes() >= comp.Weights().TensorBytes() {
		t.Errorf("rounded weights: compressed %v, %d bytes in the blob (native %d): want compressed, with smaller zero points",
			compR.Weights().Compressed(), compR.Weights().TensorBytes(), comp.Weights().TensorBytes())
	}
	lastR := matchUpToTie(t, "rounded", rounded, wantR, wantRTok)
	t.Logf("rounded weights: %d bytes in the blob; rows 0..%d against the rounded reference: %s; row 0 against the file's model: cosine %.4f",
		compR.Weights().TensorBytes(), lastR, rowErrors(rounded.Logits[:lastR+1], wantR[:lastR+1]), runtime.Cosine(wantR[0], want[0]))

	// ovrun's kernel multiplies the file's Q4_1 blocks exactly: as close to
	// the reference as native, in a blob no larger than the file's blocks.
	kernel, compK := generateGGUF(t, path, model.WeightsKernel, smolPrompt, steps)
	if compK.Weights().TensorBytes() > comp.Weights().TensorBytes() {
		t.Errorf("kernel weights: %d bytes in the blob, more than native's %d", compK.Weights().TensorBytes(), comp.Weights().TensorBytes())
	}
	lastK := matchUpToTie(t, "kernel", kernel, want, wantTok)
	t.Logf("kernel weights: %d bytes in the blob; rows 0..%d: %s", compK.Weights().TensorBytes(), lastK, rowErrors(kernel.Logits[:lastK+1], want[:lastK+1]))

	// With 8-bit activations the logits move (docs/benchmarks.md states by
	// how much); a broken quantization (a wrong scale, a lane out of
	// place) leaves nothing of them.
	q8, _ := generateGGUF(t, path, model.WeightsKernelQ8, smolPrompt, steps)
	agree := 0
	for agree < len(wantTok) && q8.Tokens[agree] == wantTok[agree] {
		agree++
	}
	if c := runtime.Cosine(q8.Logits[0], want[0]); c < 0.99 {
		t.Errorf("kernel-q8, row 0: cosine %.4f < 0.99", c)
	}
	t.Logf("kernel-q8: row 0 %s; greedy tokens agree with the reference's for %d of %d", rowErrors(q8.Logits[:1], want[:1]), agree, len(wantTok))
}

// matchUpToTie compares a generation with the reference up to the first
// row where the reference's top-2 logit gap is below 0.1 (a near tie that
// float32 rounding may break either way; rows after it may have other
// inputs): identical greedy tokens before that row, cosine >= 0.999 on
// every row up to it. It returns that row (the last one when none ties).
func matchUpToTie(t *testing.T, label string, got *runtime.GenerateResult, want [][]float32, wantTok []int64) int {
	t.Helper()
	last := len(want) - 1
	for i, row := range want {
		if gap := top2Gap(row); gap < 0.1 {
			last = i
			t.Logf("%s: reference's top-2 gap at row %d is %.3f: rows compared up to it", label, i, gap)
			break
		}
	}
	for i := 0; i <= last; i++ {
		if i < last && got.Tokens[i] != wantTok[i] {
			t.Fatalf("%s, row %d: greedy token %d, reference %d (tokens %v, reference %v)", label, i, got.Tokens[i], wantTok[i], got.Tokens, wantTok)
		}
		if c := runtime.Cosine(got.Logits[i], want[i]); c < 0.999 {
			t.Errorf("%s, row %d: cosine %.6f < 0.999", label, i, c)
		}
	}
	return last
}

func top2Gap(row []float32) float64 {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, v := range row {
		switch x := float64(v); {
		case x > a:
			a, b = x, a
		case x > b:
			b = x
		}
	}
	return a - b
}

// rowErrors summarizes the worst cosine and max abs error over rows.
func rowErrors(got, want [][]float32) string {
	minCos, maxErr := 1.0, 0.0
	for i := range want {
		minCos = min(minCos, runtime.Cosine(got[i], want[i]))
		for k := range want[i] {
			maxErr = max(maxErr, math.Abs(float64(got[i][k]-want[i][k])))
		}
	}
	return fmt.Sprintf("min cosine %.7f, max abs error %.3g", minCos, maxErr)
}

// The weights a compile and its warm-up read leave the resident set, the
// blob's converted matrices that the plugin laid out its own way: before
// the warm-up dropped them, 8.5 of SmolLM2's 98 MB stayed resident for the
// whole run (qwen2.5-0.5b Q8_0: 350 MB), read on the first calls.
func TestCompileLeavesWeightsOut(t *testing.T) {
	comp := openSmolLM2(t)
	exe, err := comp.Compile(context.Background(), model.GraphSpec{Capacity: 64, Chunk: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	region := comp.WeightsRegion()
	resident := runtime.Memory(region, 0).Weights
	t.Logf("%d of the blob's %d bytes resident after the compile", resident, region.Len)
	if resident > int64(region.Len)/32 {
		t.Errorf("%d of the blob's %d bytes stayed resident after the compile and its warm-up", resident, region.Len)
	}
}

// TestKernelFeedSkipsLogits feeds a prompt through a kernel decode graph
// with Feed for its middle tokens (the logits of none wanted) and checks
// that Feed left the logits as the first Step made them (the lm_head
// skipped), while the cache took the tokens: the prompt's last logits
// equal those of stepping through every token.
func TestKernelFeedSkipsLogits(t *testing.T) {
	comp, exe := smolKernelDecode(t, 64)
	prompt := smolPrompt[:6]
	// run returns the prompt's last logits and whether the logits of the
	// first token were still in the graph's buffer after the middle ones.
	run := func(feed bool) (last []float32, kept bool) {
		buf, err := runtime.AllocKV(comp.KVShape(), 64, true)
		if err != nil {
			t.Fatal(err)
		}
		defer buf.Free()
		kv, err := buf.View(64)
		if err != nil {
			t.Fatal(err)
		}
		if err := exe.Bind(kv); err != nil {
			t.Fatal(err)
		}
		out, err := exe.Step(prompt[:1], 0) // the graph's logits buffer
		if err != nil {
			t.Fatal(err)
		}
		first := slices.Clone(out)
		for k := 1; k < len(prompt)-1; k++ {
			if feed {
				err = exe.(runtime.Feeder).Feed(prompt[k:k+1], k)
			} else {
				_, err = exe.Step(prompt[k:k+1], k)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		kept = slices.Equal(out, first)
		out, err = exe.Step(prompt[len(prompt)-1:], len(prompt)-1)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(out), kept
	}
	stepped, keptStepping := run(false)
	fed, keptFeeding := run(true)
	if keptStepping || !keptFeeding {
		t.Errorf("the first logits outlived the middle tokens: stepping %v, feeding %v; want false, true", keptStepping, keptFeeding)
	}
	var d float64
	for i := range stepped {
		d = max(d, math.Abs(float64(stepped[i]-fed[i])))
	}
	if d > 1e-5 {
		t.Errorf("the prompt's last logits differ by %g when its middle tokens are fed", d)
	}
}

// TestKernelDecodeGraphTakesEightTokens puts a prompt through a kernel
// decode graph 8 tokens a call (runtime.PrefillFrom, model.KernelStepTokens
// for SmolLM2's 140 MB: the padded token axis and its count) and a token a
// call, at a capacity the last call's padding runs past: the prompt's last logits agree (the
// products' sums only reordered) and the cache holds the same rows, so the
// padding was neither attended nor written.
func TestKernelDecodeGraphTakesEightTokens(t *testing.T) {
	const capacity = 60 // the last call: tokens 56..59, padding at 60..63
	comp, exe := smolKernelDecode(t, capacity)
	const axis = 8
	if got := runtime.StepTokens(exe); got != axis {
		t.Fatalf("the kernel decode graph takes %d tokens a call, want %d", got, axis)
	}
	if _, err := exe.Step(make([]int64, axis+1), 0); err == nil {
		t.Error("a call of 9 tokens ran")
	}
	prompt := runtime.SeededTokens(7, capacity, 49152)
	run := func(per int) (last []float32, kv []byte) {
		buf, err := runtime.AllocKV(comp.KVShape(), capacity, true)
		if err != nil {
			t.Fatal(err)
		}
		defer buf.Free()
		view, err := buf.View(capacity)
		if err != nil {
			t.Fatal(err)
		}
		if err := exe.Bind(view); err != nil {
			t.Fatal(err)
		}
		var out []float32
		for s := 0; s < len(prompt); s += per {
			if out, err = exe.Step(prompt[s:min(s+per, len(prompt))], s); err != nil {
				t.Fatal(err)
			}
		}
		return slices.Clone(out), slices.Clone(view.K[0])
	}
	one, kvOne := run(1)
	eight, kvEight := run(axis)
	var d, dk float64
	for i := range one {
		d = max(d, math.Abs(float64(one[i]-eight[i])))
	}
	f32s := func(b []byte) []float32 { return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4) }
	a, b := f32s(kvOne), f32s(kvEight)
	for i := range a {
		dk = max(dk, math.Abs(float64(a[i]-b[i])))
	}
	if d > 1e-3 || dk > 1e-4 || runtime.Argmax(one) != runtime.Argmax(eight) {
		t.Errorf("8 tokens a call against 1: logits differ by %g (argmax %d, %d), layer 0's K cache by %g", d, runtime.Argmax(eight), runtime.Argmax(one), dk)
	}
}

// smolKernelDecode is SmolLM2's exact-kernel (f32 activations) decode
// graph of capacity, closed with the test.
func smolKernelDecode(t *testing.T, capacity int) (*Compiler, runtime.Executable) {
	t.Helper()
	ck, err := model.Load(testenv.SmolLM2(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	comp, err := NewCompiler(ck, Options{Device: "CPU", Precision: "f32", Weights: model.WeightsKernel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { comp.Close() })
	exe, err := comp.Compile(context.Background(), model.GraphSpec{Capacity: capacity, Chunk: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exe.Close() })
	return comp, exe
}
