package model

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/tokenizer"
)

// TestFamilies fails when a family leaves out a hook or a form, names a
// tokenizer package tokenizer does not build, or has no preset small
// enough for the reference tests: what docs/extending.md says a new
// architecture must give.
func TestFamilies(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range Families() {
		t.Run(f.ModelType, func(t *testing.T) {
			if f.ModelType == "" || f.Architecture == "" {
				t.Fatalf("model type %q, architecture %q: both must be set", f.ModelType, f.Architecture)
			}
			if seen[f.ModelType] {
				t.Fatalf("model type %q twice", f.ModelType)
			}
			seen[f.ModelType] = true
			if LookupFamily(f.ModelType) != f {
				t.Error("LookupFamily does not find the family")
			}
			for name, missing := range map[string]bool{
				"HFDefaults": f.HFDefaults == nil, "GGUFConfig": f.GGUFConfig == nil,
				"Activation": f.Activation == nil, "Biases": f.Biases == nil,
				"GGUF.Names": f.GGUF.Names == nil,
			} {
				if missing {
					t.Errorf("hook %s is not set", name)
				}
			}
			if !slices.Contains([]NormForm{NormWeight, NormOnePlusWeight}, f.Norm) ||
				!slices.Contains([]NormForm{NormWeight, NormOnePlusWeight}, f.GGUF.Norm) {
				t.Errorf("norm forms %d (GGUF %d): want NormWeight or NormOnePlusWeight", f.Norm, f.GGUF.Norm)
			}
			if !slices.Contains([]EmbeddingScale{EmbedAsIs, EmbedSqrtHidden}, f.Embedding) {
				t.Errorf("embedding scale %d: want EmbedAsIs or EmbedSqrtHidden", f.Embedding)
			}
			if !slices.Contains([]QKRows{QKAsHF, QKInterleaved}, f.GGUF.QK) {
				t.Errorf("GGUF q/k rows %d: want QKAsHF or QKInterleaved", f.GGUF.QK)
			}
			if f.GGUF.Names != nil {
				for _, hf := range []string{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} {
					if !slices.Contains(mapValues(f.GGUF.Names.Global), hf) {
						t.Errorf("GGUF names have no tensor for %s", hf)
					}
				}
			}
			if len(f.Tokenizers) == 0 {
				t.Error("no tokenizer model")
			}
			for _, m := range f.Tokenizers {
				v := tokenizer.NewGGUFVocab(m, "")
				v.Tokens = []string{"<unk>", "<s>", "</s>", "a", "b"}
				if _, err := tokenizer.FromGGUF(v); errors.Is(err, tokenizer.ErrUnsupported) {
					t.Errorf("tokenizer model %q: %v", m, err)
				}
			}
			if len(f.Presets) == 0 {
				t.Fatal("no preset")
			}
			for i, p := range f.Presets {
				c := p.Config()
				if err := c.Validate(); err != nil {
					t.Errorf("preset %s: %v", p.Name, err)
				}
				if c.Family() != f || !slices.Equal(c.Architectures, []string{f.Architecture}) {
					t.Errorf("preset %s is of model type %q, architectures %v", p.Name, c.ModelType, c.Architectures)
				}
				if n := ParamCount(c); i == 0 && n > 1<<20 {
					t.Errorf("first preset %s has %d parameters: the reference tests want one below 1M", p.Name, n)
				}
				if !p.DType.IsFloatWeight() {
					t.Errorf("preset %s: dtype %q", p.Name, p.DType)
				}
			}
		})
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestFamilyGraphForms: every family's first preset builds every kind of
// graph, and the graph holds its family's activation and not the other.
func TestFamilyGraphForms(t *testing.T) {
	for _, f := range Families() {
		t.Run(f.ModelType, func(t *testing.T) {
			dir := t.TempDir()
			if err := Synthesize(f.Presets[0].Name, 1, DTypeF32, dir); err != nil {
				t.Fatal(err)
			}
			ck, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			act, err := f.Activation(ck.Config)
			if err != nil {
				t.Fatal(err)
			}
			want, not := `type="Swish"`, `type="Gelu"`
			if act == ActGELUTanh {
				want, not = not, want
			}
			w := NewWeights(ck)
			for _, spec := range []GraphSpec{
				{Capacity: 64, Chunk: 1}, {Capacity: 64, Chunk: 8},
				{Capacity: 64, Chunk: 8, Attention: AttentionBounded, Shared: true},
				{Capacity: 64, Chunk: 8, Attention: AttentionPaged, Shared: true},
			} {
				xml, err := BuildIR(w, spec)
				if err != nil {
					t.Fatalf("%s: %v", spec.Name(), err)
				}
				if n := strings.Count(string(xml), want); n != ck.Config.NumHiddenLayers {
					t.Errorf("%s: %d %s layers, want one per layer (%d)", spec.Name(), n, want, ck.Config.NumHiddenLayers)
				}
				if strings.Contains(string(xml), not) {
					t.Errorf("%s holds %s", spec.Name(), not)
				}
			}
		})
	}
}

// TestGemmaConfigFromHF maps Gemma's config.json, GemmaConfig's defaults
// included, as transformers does.
func TestGemmaConfigFromHF(t *testing.T) {
	// google/gemma-2b's config.json: hidden_act "gelu" is ignored for
	// gelu_pytorch_tanh, as GemmaMLP does.
	const gemma2b = `{"architectures": ["GemmaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
		"bos_token_id": 2, "eos_token_id": 1, "head_dim": 256, "hidden_act": "gelu", "hidden_size": 2048,
		"initializer_range": 0.02, "intermediate_size": 16384, "max_position_embeddings": 8192,
		"model_type": "gemma", "num_attention_heads": 8, "num_hidden_layers": 18, "num_key_value_heads": 1,
		"pad_token_id": 0, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 10000.0,
		"torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 256000}`
	// GemmaConfig's defaults fill what is absent: head_dim 256, tied.
	const bare = `{"model_type": "gemma", "vocab_size": 512, "hidden_size": 3072, "intermediate_size": 128,
		"num_hidden_layers": 1, "num_attention_heads": 16, "rms_norm_eps": 1e-6`
	for _, tc := range []struct {
		name    string
		json    string
		headDim int
		kv      int
		tied    bool
		biases  Biases
		want    string // an error naming this
	}{
		{name: "gemma-2b", json: gemma2b, headDim: 256, kv: 1, tied: true},
		{name: "defaults (gemma-7b's head_dim 256 of hidden 3072 / 16 heads)", json: bare + `}`, headDim: 256, kv: 16, tied: true},
		{name: "head_dim given", json: bare + `, "head_dim": 64}`, headDim: 64, kv: 16, tied: true},
		{name: "untied", json: bare + `, "tie_word_embeddings": false}`, headDim: 256, kv: 16},
		{name: "attention_bias", json: bare + `, "attention_bias": true}`, headDim: 256, kv: 16, tied: true, biases: Biases{QKV: true, O: true}},
		{name: "hidden_activation gelu_pytorch_tanh", json: bare + `, "hidden_activation": "gelu_pytorch_tanh"}`, headDim: 256, kv: 16, tied: true},
		{name: "hidden_activation erf gelu", json: bare + `, "hidden_activation": "gelu"}`, want: `hidden_activation "gelu" (Gemma runs gelu_pytorch_tanh only)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(tc.json), 0o644); err != nil {
				t.Fatal(err)
			}
			c, err := LoadConfig(dir)
			if tc.want != "" {
				if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("LoadConfig = %v, want ErrUnsupported naming %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			act, err := c.Family().Activation(c)
			got := []any{c.Family(), c.HeadDim(), c.KVHeads(), c.TieWordEmbeddings, c.biases(), act, err}
			want := []any{gemmaFamily, tc.headDim, tc.kv, tc.tied, tc.biases, ActGELUTanh, nil}
			if !slices.Equal(got, want) {
				t.Errorf("family, head_dim, kv heads, tied, biases, activation, error:\n got %v\nwant %v", got, want)
			}
		})
	}
}

// TestLlamaQwen2KeepTheirDefaults: a config.json without tie_word_embeddings
// or head_dim stays untied with head_dim hidden/heads for the families whose
// transformers classes say so (Gemma's defaults are its own).
func TestLlamaQwen2KeepTheirDefaults(t *testing.T) {
	for _, mt := range []string{"llama", "qwen2"} {
		dir := t.TempDir()
		js := `{"model_type": "` + mt + `", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
			"num_hidden_layers": 1, "num_attention_heads": 4, "rms_norm_eps": 1e-6}`
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		if c.TieWordEmbeddings || c.HeadDim() != 16 || c.HeadDimField != 0 || c.HiddenAct != "" {
			t.Errorf("%s: tied %v, head_dim %d (field %d), hidden_act %q: want untied, 16 (0), empty",
				mt, c.TieWordEmbeddings, c.HeadDim(), c.HeadDimField, c.HiddenAct)
		}
	}
}

// gemmaSpec is microSpec as a Gemma file: key_length given, as llama.cpp's
// converter writes it.
func gemmaSpec() *ggufSpec {
	s := microSpec("gemma")
	s.kvs = append(s.kvs, u32kv("gemma.attention.key_length", 2), u32kv("gemma.attention.value_length", 2))
	return s
}

// TestGemmaConfigFromGGUF maps the gemma.* keys: Gemma's activation, the
// tied lm_head, no biases, and norm weights the file holds as 1 + w.
func TestGemmaConfigFromGGUF(t *testing.T) {
	ck, err := Load(writeSpec(t, gemmaSpec().bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	c := ck.Config
	got := []any{c.ModelType, c.Architectures[0], c.HiddenActivation, c.HeadDim(), c.KVHeads(), c.TieWordEmbeddings, c.biases(), ck.NormForm()}
	want := []any{"gemma", "GemmaForCausalLM", "gelu_pytorch_tanh", 2, 1, true, Biases{}, NormWeight}
	if !slices.Equal(got, want) {
		t.Errorf("model type, architecture, activation, head_dim, kv heads, tied, biases, norm form:\n got %v\nwant %v", got, want)
	}

	// llama.cpp runs no bias of a Gemma file, so none is read.
	s := gemmaSpec()
	s.tensors = append(s.tensors, gtensor{name: "blk.0.attn_q.bias", dims: []uint64{4}, offset: -1})
	_, err = Load(writeSpec(t, s.bytes()))
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), `tensor "blk.0.attn_q.bias" (model.layers.0.self_attn.q_proj.bias) is not used by this gemma model`) {
		t.Errorf("a Gemma file with a q bias: %v", err)
	}
}

// TestNormFormOfSource: Gemma's Hugging Face checkpoints apply 1 + w, its
// GGUF files (TestGemmaConfigFromGGUF) and the other families w.
func TestNormFormOfSource(t *testing.T) {
	for _, tc := range []struct {
		preset string
		want   NormForm
	}{{"gemma-tiny", NormOnePlusWeight}, {"tiny", NormWeight}, {"tiny-llama", NormWeight}} {
		ck, err := Load(synthTo(t, tc.preset, 1, DTypeF32))
		if err != nil {
			t.Fatal(err)
		}
		if got := ck.NormForm(); got != tc.want {
			t.Errorf("%s: norm form %d, want %d", tc.preset, got, tc.want)
		}
		ck.Close()
	}
}

// TestFamilyChatTemplate: a checkpoint without a template gets its
// family's (Gemma's turns), or none for chat's ChatML.
func TestFamilyChatTemplate(t *testing.T) {
	for _, tc := range []struct{ preset, want string }{{"gemma-tiny", GemmaChatTemplate}, {"tiny", ""}, {"tiny-llama", ""}} {
		ck, err := Load(synthTo(t, tc.preset, 1, DTypeF32))
		if err != nil {
			t.Fatal(err)
		}
		src, _, _, err := ck.ReadChatTemplate()
		ck.Close()
		if err != nil || src != tc.want {
			t.Errorf("%s: template %q, %v; want %q", tc.preset, src, err, tc.want)
		}
	}
}

// TestUnsupportedFamily: one error names the architecture and the
// supported ones, from config.json and from a GGUF file alike.
func TestUnsupportedFamily(t *testing.T) {
	c := validConfig()
	c.ModelType = "phi3"
	if err := c.Validate(); !errors.Is(err, ErrUnsupported) || err.Error() != `unsupported model: model_type "phi3" (supported: llama, qwen2, gemma)` {
		t.Errorf("Validate = %v", err)
	}
	_, err := Load(writeSpec(t, microSpec("phi3").bytes()))
	if !errors.Is(err, ErrUnsupported) || !strings.HasSuffix(err.Error(), `unsupported model: general.architecture "phi3" (supported: llama, qwen2, gemma)`) {
		t.Errorf("Load = %v", err)
	}
}
