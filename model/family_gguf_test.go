package model_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
)

// synthGGUF writes the GGUF file of a synthetic checkpoint folder with
// scripts/synth_to_gguf.py (the gguf package, no code shared with this
// package) and returns its path.
func synthGGUF(t *testing.T, dir string, flags ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(dir)+".gguf")
	args := append([]string{filepath.Join(testenv.RepoRoot(t), "scripts", "synth_to_gguf.py"), dir, out}, flags...)
	testenv.Run(t, testenv.Python(t), args...)
	return out
}

// TestFamilyGGUFs: the GGUF file synth_to_gguf.py writes of each family's
// first preset loads as the same model: every tensor the folder's value
// under its Hugging Face name (llama's q and k put back in order; Gemma's
// norm weights as the converter stores them, 1 + w in f32), the same
// configuration, the family's tokenizer model built by package tokenizer,
// and the family's chat template where it has one.
func TestFamilyGGUFs(t *testing.T) {
	for _, f := range model.Families() {
		t.Run(f.ModelType, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), f.Presets[0].Name)
			if err := model.Synthesize(f.Presets[0].Name, 1, model.DTypeF32, dir); err != nil {
				t.Fatal(err)
			}
			st, err := model.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			gg, err := model.Load(synthGGUF(t, dir))
			if err != nil {
				t.Fatal(err)
			}
			defer gg.Close()

			a, b := st.Config, gg.Config
			got := []any{b.ModelType, b.HiddenSize, b.NumHiddenLayers, b.HeadDim(), b.KVHeads(), b.TieWordEmbeddings, b.QKVBias(), b.OProjBias(), b.MLPBiases()}
			want := []any{a.ModelType, a.HiddenSize, a.NumHiddenLayers, a.HeadDim(), a.KVHeads(), a.TieWordEmbeddings, a.QKVBias(), a.OProjBias(), a.MLPBiases()}
			if !slices.Equal(got, want) {
				t.Errorf("GGUF config %v, folder's %v", got, want)
			}
			for _, s := range model.RequiredTensors(a) {
				x, err := st.Tensors[s.Name].Float32s()
				if err != nil {
					t.Fatal(err)
				}
				y, err := gg.Tensors[s.Name].Float32s()
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasSuffix(s.Name, "norm.weight") && st.NormForm() != gg.NormForm() {
					for i := range x {
						x[i] += 1 // the converter's 1 + w
					}
				}
				if !slices.Equal(x, y) {
					t.Errorf("tensor %s differs in the GGUF file", s.Name)
				}
			}

			mdl, err := gg.GGUF.String("tokenizer.ggml.model")
			if err != nil || mdl != f.Tokenizers[0] {
				t.Errorf("tokenizer.ggml.model %q, %v; want the family's %q", mdl, err, f.Tokenizers[0])
			}
			tok, err := gg.Tokenizer()
			if err != nil {
				t.Fatal(err)
			}
			if text := "hello tiny model"; tok.Decode(tok.Encode(text, false)) != text {
				t.Errorf("%q does not survive encoding: %v", text, tok.Encode(text, false))
			}
			src, _, _, err := gg.ReadChatTemplate()
			if err != nil {
				t.Fatal(err)
			}
			if f.ChatTemplate != "" && src != f.ChatTemplate {
				t.Errorf("the file's template differs from the family's:\n%s\nwant\n%s", src, f.ChatTemplate)
			}
		})
	}
}

// TestGemmaGGUFTokenizer: the synthetic Gemma file's SentencePiece
// vocabulary has Gemma's special tokens where Gemma has them, adds bos, and
// ends a turn at <end_of_turn>.
func TestGemmaGGUFTokenizer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gemma-tiny")
	if err := model.Synthesize("gemma-tiny", 1, model.DTypeF32, dir); err != nil {
		t.Fatal(err)
	}
	ck, err := model.Load(synthGGUF(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	tok, err := ck.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	eot, _ := tok.TokenID("<end_of_turn>")
	got := []any{tok.Token(tok.BOS()), tok.Token(tok.EOS()), tok.IsEOG(eot), tok.Encode("ab", true)[0]}
	want := []any{"<bos>", "<eos>", true, int64(2)}
	if !slices.Equal(got, want) {
		t.Errorf("bos, eos, <end_of_turn> ends a turn, first id with specials: %v, want %v", got, want)
	}
}
