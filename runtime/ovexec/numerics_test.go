package ovexec

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/npy"
	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// openOV loads a synthetic checkpoint and an f32 OpenVINO compiler for it.
func openOV(t *testing.T, preset string, dtype model.DType) (*model.Checkpoint, *Compiler) {
	t.Helper()
	return openOVWith(t, preset, dtype, "")
}

// openOVWith is openOV with an attention form ("" resolves to the CPU's).
func openOVWith(t *testing.T, preset string, dtype model.DType, attention model.Attention) (*model.Checkpoint, *Compiler) {
	t.Helper()
	ck, err := model.Load(testenv.Synth(t, preset, dtype))
	if err != nil {
		t.Fatal(err)
	}
	comp, err := NewCompiler(ck, Options{Device: "CPU", Precision: "f32", Attention: attention})
	if err != nil {
		ck.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := comp.Close(); err != nil {
			t.Error(err)
		}
		ck.Close()
	})
	return ck, comp
}

// reference runs model/testdata/reference.py (numpy, float64, sharing no
// code with the graph emitter) and returns its logits rows and greedy tokens.
func reference(t *testing.T, dir string, prompt []int64, steps int, flags ...string) ([][]float32, []int64) {
	t.Helper()
	root := testenv.RepoRoot(t)
	tmp := t.TempDir()
	ids := make([]string, len(prompt))
	for i, p := range prompt {
		ids[i] = fmt.Sprint(p)
	}
	out, toks := filepath.Join(tmp, "ref.npy"), filepath.Join(tmp, "ref.json")
	args := append([]string{filepath.Join(root, "model", "testdata", "reference.py"),
		"--model", dir, "--ids", strings.Join(ids, ","), "--steps", fmt.Sprint(steps), "--out", out, "--tokens-out", toks}, flags...)
	testenv.Run(t, testenv.Python(t), args...)
	rows, err := npy.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(toks)
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ Argmax []int64 }
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return rows, r.Argmax
}

// matchReference checks a synthetic model's generation against the float64
// reference: identical greedy tokens, at least 3 distinct ones (else the
// model is degenerate and the check weak), and every logits row within
// checkRow's bounds.
func matchReference(t *testing.T, res *runtime.GenerateResult, want [][]float32, wantTok []int64) {
	t.Helper()
	if !slices.Equal(res.Tokens, wantTok) {
		t.Fatalf("greedy tokens differ:\n got %v\nwant %v", res.Tokens, wantTok)
	}
	if distinct := len(slices.Compact(slices.Sorted(slices.Values(res.Tokens)))); distinct < 3 {
		t.Errorf("only %d distinct tokens in %v: the synthetic model is degenerate and the test weak", distinct, res.Tokens)
	}
	for i := range want {
		checkRow(t, i, res.Logits[i], want[i])
	}
}

// TestLogitsMatchReference compares OpenVINO f32 logits for the prompt and
// 16 decode steps with the float64 reference: cosine >= 0.9999 and max abs
// error <= 2e-3 * max(1, max|logit|) on every row, identical greedy tokens.
func TestLogitsMatchReference(t *testing.T) {
	tests := []struct {
		name   string
		preset string
		dtype  model.DType
	}{
		{name: "qwen2 GQA qkv-bias tied f32", preset: "tiny", dtype: "F32"},
		{name: "llama MQA untied head_dim 24 f32", preset: "tiny-llama", dtype: "F32"},
		{name: "qwen2 bf16 storage", preset: "tiny", dtype: "BF16"},
		{name: "llama f16 storage", preset: "tiny-llama", dtype: "F16"},
	}
	const steps = 16
	for _, tc := range tests {
		for _, attention := range []model.Attention{model.AttentionPaged, model.AttentionBounded, model.AttentionStatic} {
			t.Run(tc.name+" "+string(attention), func(t *testing.T) {
				ck, comp := openOVWith(t, tc.preset, tc.dtype, attention)
				prompt := runtime.SeededTokens(7, 11, ck.Config.VocabSize)
				res, err := runtime.Generate(context.Background(), comp, comp.KVShape(), runtime.GenerateConfig{
					Capacity: 64, PrefillChunk: 8, Prompt: prompt, MaxNewTokens: steps + 1, KeepLogits: true})
				if err != nil {
					t.Fatal(err)
				}
				want, wantTok := reference(t, ck.Dir, prompt, steps)
				if len(res.Logits) != steps+1 || len(want) != steps+1 {
					t.Fatalf("rows: got %d, reference %d, want %d", len(res.Logits), len(want), steps+1)
				}
				matchReference(t, res, want, wantTok)
			})
		}
	}
}

func checkRow(t *testing.T, row int, got, want []float32) {
	t.Helper()
	var peak, worst float64
	for k := range want {
		peak = math.Max(peak, math.Abs(float64(want[k])))
		worst = math.Max(worst, math.Abs(float64(got[k]-want[k])))
	}
	if tol := 2e-3 * math.Max(1, peak); worst > tol {
		t.Errorf("row %d: max abs error %.3g > %.3g", row, worst, tol)
	}
	if c := runtime.Cosine(got, want); c < 0.9999 {
		t.Errorf("row %d: cosine %.7f < 0.9999", row, c)
	}
}

// TestPrefillEqualsTokenByToken checks that the chunked prefill graph (with
// padding in the last chunk) leaves the same state as feeding the prompt one
// token at a time through the decode graph.
func TestPrefillEqualsTokenByToken(t *testing.T) {
	ck, comp := openOV(t, "tiny", "F32")
	prompt := runtime.SeededTokens(3, 21, ck.Config.VocabSize) // 8+8+5: the last chunk is padded
	run := func(chunk int) *runtime.GenerateResult {
		res, err := runtime.Generate(context.Background(), comp, comp.KVShape(), runtime.GenerateConfig{
			Capacity: 48, PrefillChunk: chunk, Prompt: prompt, MaxNewTokens: 10, KeepLogits: true})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	chunked, single := run(8), run(0)
	if !slices.Equal(chunked.Tokens, single.Tokens) {
		t.Fatalf("tokens differ: chunked %v, token by token %v", chunked.Tokens, single.Tokens)
	}
	for i := range single.Logits {
		checkRow(t, i, chunked.Logits[i], single.Logits[i])
	}
}

func TestGenerateRejectsPromptLongerThanCapacity(t *testing.T) {
	ck, comp := openOV(t, "tiny", "F32")
	_, err := runtime.Generate(context.Background(), comp, comp.KVShape(), runtime.GenerateConfig{
		Capacity: 16, Prompt: runtime.SeededTokens(1, 17, ck.Config.VocabSize), MaxNewTokens: 1})
	if err == nil || !strings.Contains(err.Error(), "longer than capacity 16") {
		t.Fatalf("err = %v, want prompt longer than capacity", err)
	}
}
