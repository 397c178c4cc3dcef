package ovexec

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// The Gemma family (model/family_gemma.go) against the float64 reference's
// mirror of transformers' modeling_gemma.py: norms by 1 + w, embeddings
// scaled by sqrt(hidden), GeGLU with GELU's tanh approximation, head_dim 32
// where hidden/heads is 16, multi-query, tied, at f32 with the bounds of
// TestLogitsMatchReference and TestGGUFSyntheticMatchesReference.

// TestGemmaLogitsMatchReference runs the synthetic gemma-tiny checkpoint
// (safetensors) in every attention form and in F32 and BF16 storage.
func TestGemmaLogitsMatchReference(t *testing.T) {
	const steps = 16
	for _, dtype := range []model.DType{model.DTypeF32, model.DTypeBF16} {
		for _, attention := range []model.Attention{model.AttentionPaged, model.AttentionBounded, model.AttentionStatic} {
			t.Run(string(dtype)+" "+string(attention), func(t *testing.T) {
				ck, comp := openOVWith(t, "gemma-tiny", dtype, attention)
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

// TestGemmaGGUFMatchesReference writes gemma-tiny's GGUF file with
// scripts/synth_to_gguf.py, as F32 and as Q8_0 matrices (norm weights
// stored as 1 + w, as llama.cpp's converter stores them), and runs it in
// every weight format and through a shared graph against the reference
// reading the same file.
func TestGemmaGGUFMatchesReference(t *testing.T) {
	const steps = 12
	dir := testenv.Synth(t, "gemma-tiny", model.DTypeF32)
	for _, dtype := range []string{"f32", "q8_0"} {
		path := filepath.Join(t.TempDir(), "gemma-tiny-"+dtype+".gguf")
		testenv.Run(t, testenv.Python(t), filepath.Join(testenv.RepoRoot(t), "scripts", "synth_to_gguf.py"), dir, path, "--dtype", dtype)
		prompt := runtime.SeededTokens(7, 11, 512) // as TestGemmaLogitsMatchReference: tied synthetic models often repeat one token
		want, wantTok := reference(t, path, prompt, steps)
		for _, format := range []model.WeightFormat{model.WeightsNative, model.WeightsF32, model.WeightsRounded} {
			t.Run(dtype+" "+string(format), func(t *testing.T) {
				res, comp := generateGGUF(t, path, format, prompt, steps)
				if got, compressed := comp.Weights().Compressed(), dtype != "f32" && format != model.WeightsF32; got != compressed {
					t.Errorf("Compressed() = %v with format %s of a %s file", got, format, dtype)
				}
				matchReference(t, res, want, wantTok)
			})
		}
		t.Run(dtype+" native shared", func(t *testing.T) {
			res, _ := generateGGUF(t, path, model.WeightsNative, prompt, steps, runtime.PrefillShared)
			if res.PrefillUsed != string(runtime.PrefillShared) {
				t.Fatalf("prompt went through %q, want a shared graph", res.PrefillUsed)
			}
			matchReference(t, res, want, wantTok)
		})
	}
}

// TestGemmaGGUFBlockTypesMatchReference is TestGGUFSyntheticMatchesReference
// for a Gemma file (model/testdata/gguf_helper.py model --arch gemma):
// every block type (a Q6_K embedding gathered, scaled and tied; Q4_1 and
// Q4_K minima), in every weight format and through a shared graph.
func TestGemmaGGUFBlockTypesMatchReference(t *testing.T) {
	const steps = 12
	path := filepath.Join(t.TempDir(), "gemma.gguf")
	testenv.Run(t, testenv.Python(t), filepath.Join(testenv.RepoRoot(t), "model", "testdata", "gguf_helper.py"),
		"model", path, "--arch", "gemma", "--seed", "3")
	prompt := runtime.SeededTokens(5, 11, 512)
	exact, exactTok := reference(t, path, prompt, steps)
	rounded, roundedTok := reference(t, path, prompt, steps, "--round-zero-points")
	for _, format := range []model.WeightFormat{model.WeightsNative, model.WeightsF32, model.WeightsRounded} {
		t.Run(string(format), func(t *testing.T) {
			want, wantTok := exact, exactTok
			if format == model.WeightsRounded {
				want, wantTok = rounded, roundedTok
			}
			res, _ := generateGGUF(t, path, format, prompt, steps)
			matchReference(t, res, want, wantTok)
		})
	}
	t.Run("native shared", func(t *testing.T) {
		res, _ := generateGGUF(t, path, model.WeightsNative, prompt, steps, runtime.PrefillShared)
		matchReference(t, res, exact, exactTok)
	})
}
