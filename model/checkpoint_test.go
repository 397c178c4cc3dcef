package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLoadRoundTrip(t *testing.T) {
	type tcase struct {
		name   string
		preset string
		dtype  DType
	}
	var cases []tcase
	for _, p := range []string{"tiny", "tiny-llama"} {
		for _, dt := range synthDTypes {
			cases = append(cases, tcase{p + " " + string(dt), p, dt})
		}
	}
	if !testing.Short() {
		cases = append(cases, tcase{"small BF16", "small", DTypeBF16})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := synthTo(t, tc.preset, 7, tc.dtype)
			c, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := c.Close(); err != nil {
					t.Error(err)
				}
			}()
			want, _ := PresetConfig(tc.preset)
			want.TorchDtype = tc.dtype.TorchName()
			gotJSON, _ := json.Marshal(c.Config)
			wantJSON, _ := json.Marshal(want)
			if !bytes.Equal(gotJSON, wantJSON) {
				t.Errorf("config\n%s\nwant\n%s", gotJSON, wantJSON)
			}
			specs := RequiredTensors(c.Config)
			if len(c.Tensors) != len(specs) {
				t.Errorf("%d tensors, want %d", len(c.Tensors), len(specs))
			}
			for _, s := range specs {
				tn, err := c.Tensor(s.Name)
				if err != nil {
					t.Fatal(err)
				}
				if tn.DType != tc.dtype || !slices.Equal(tn.Shape, s.Shape) || int64(len(tn.Data)) != numElements(s.Shape)*int64(tc.dtype.Size()) {
					t.Errorf("%s: %s %v with %d bytes", s.Name, tn.DType, tn.Shape, len(tn.Data))
				}
			}
			if _, err := c.Tensor("lm_head.bias"); !errors.Is(err, ErrMissingTensor) {
				t.Errorf("Tensor(lm_head.bias) error %v", err)
			}
			raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
			for _, field := range []string{`"torch_dtype": "` + tc.dtype.TorchName() + `"`, `"architectures": [`, `"model_type": "` + want.ModelType + `"`} {
				if !bytes.Contains(raw, []byte(field)) {
					t.Errorf("config.json lacks %s", field)
				}
			}
		})
	}
}

// ckptTensors reads a checkpoint's tensors into memory, in name order, so a
// test can rewrite them.
func ckptTensors(t *testing.T, dir string) []*Tensor {
	t.Helper()
	sf, err := OpenSafetensors(filepath.Join(dir, SafetensorsName))
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	var ts []*Tensor
	for _, n := range sf.Names() {
		tn := *sf.Tensors[n]
		tn.Data = bytes.Clone(tn.Data)
		tn.Shape = slices.Clone(tn.Shape)
		ts = append(ts, &tn)
	}
	return ts
}

func ckptWrite(t *testing.T, path string, ts []*Tensor) {
	t.Helper()
	var b bytes.Buffer
	if err := WriteSafetensors(&b, ts, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func ckptEditConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadErrors(t *testing.T) {
	drop := func(names ...string) func([]*Tensor) []*Tensor {
		return func(ts []*Tensor) []*Tensor {
			return slices.DeleteFunc(ts, func(x *Tensor) bool { return slices.Contains(names, x.Name) })
		}
	}
	find := func(ts []*Tensor, name string) *Tensor {
		i := slices.IndexFunc(ts, func(x *Tensor) bool { return x.Name == name })
		return ts[i]
	}
	for _, tc := range []struct {
		name     string
		preset   string
		tensors  func([]*Tensor) []*Tensor // rewrite of model.safetensors
		config   func(map[string]any)
		remove   string
		trailing []byte // appended to model.safetensors
		is       error
		want     string
	}{
		{
			name: "missing tensor reports the first in order", preset: "tiny",
			tensors: drop("model.norm.weight", "model.layers.1.mlp.up_proj.weight", "model.layers.1.post_attention_layernorm.weight"),
			is:      ErrMissingTensor, want: `missing tensor "model.layers.1.post_attention_layernorm.weight"`,
		},
		{
			name: "missing untied lm_head", preset: "tiny-llama", tensors: drop("lm_head.weight"),
			is: ErrMissingTensor, want: `missing tensor "lm_head.weight"`,
		},
		{
			name: "missing qwen2 bias", preset: "tiny", tensors: drop("model.layers.0.self_attn.k_proj.bias"),
			is: ErrMissingTensor, want: `missing tensor "model.layers.0.self_attn.k_proj.bias"`,
		},
		{
			name: "wrong shape", preset: "tiny-llama",
			tensors: func(ts []*Tensor) []*Tensor {
				find(ts, "model.layers.1.self_attn.o_proj.weight").Shape = []int64{96, 64} // transposed
				return ts
			},
			is: ErrShape, want: `tensor "model.layers.1.self_attn.o_proj.weight" has shape [96 64], want [64 96]`,
		},
		{
			name: "tied lm_head with wrong shape", preset: "tiny",
			tensors: func(ts []*Tensor) []*Tensor {
				return append(ts, &Tensor{Name: "lm_head.weight", DType: DTypeF32, Shape: []int64{64, 2}, Data: make([]byte, 512)})
			},
			is: ErrShape, want: `tensor "lm_head.weight" has shape [64 2], want [512 64]`,
		},
		{
			name: "integer weights", preset: "tiny",
			tensors: func(ts []*Tensor) []*Tensor {
				find(ts, "model.norm.weight").DType = DTypeI32
				return ts
			},
			is: ErrUnsupported, want: `tensor "model.norm.weight" has dtype I32; weights must be F32, F16 or BF16`,
		},
		{
			name: "unsupported model_type", preset: "tiny",
			config: func(m map[string]any) { m["model_type"] = "mistral" },
			is:     ErrUnsupported, want: `model_type "mistral" (supported: llama, qwen2, gemma)`,
		},
		{
			name: "rope_scaling present", preset: "tiny-llama",
			config: func(m map[string]any) { m["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": 32} },
			is:     ErrUnsupported, want: `rope_scaling {"factor":32,"rope_type":"llama3"}`,
		},
		{
			name: "no config", preset: "tiny", remove: "config.json",
			is: os.ErrNotExist, want: "read model config",
		},
		{
			name: "no weights", preset: "tiny", remove: SafetensorsName,
			want: "no model.safetensors or model.safetensors.index.json",
		},
		{
			name: "corrupt weights", preset: "tiny", trailing: []byte{1, 2, 3},
			is: ErrCorrupt, want: `model.safetensors: corrupt checkpoint: 3 trailing bytes after the last tensor "model.norm.weight"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := synthTo(t, tc.preset, 2, DTypeF32)
			path := filepath.Join(dir, SafetensorsName)
			if tc.tensors != nil {
				ckptWrite(t, path, tc.tensors(ckptTensors(t, dir)))
			}
			if tc.trailing != nil {
				b, _ := os.ReadFile(path)
				if err := os.WriteFile(path, append(b, tc.trailing...), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.config != nil {
				ckptEditConfig(t, dir, tc.config)
			}
			if tc.remove != "" {
				if err := os.Remove(filepath.Join(dir, tc.remove)); err != nil {
					t.Fatal(err)
				}
			}
			c, err := Load(dir)
			if err == nil {
				c.Close()
				t.Fatal("Load succeeded")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q does not wrap %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q, want one line containing %q", err, tc.want)
			}
		})
	}
}

func TestLoadTiedWithLMHead(t *testing.T) {
	dir := synthTo(t, "tiny", 2, DTypeF32)
	ts := ckptTensors(t, dir)
	emb := ts[slices.IndexFunc(ts, func(x *Tensor) bool { return x.Name == "model.embed_tokens.weight" })]
	ckptWrite(t, filepath.Join(dir, SafetensorsName), append(ts, &Tensor{Name: "lm_head.weight", DType: DTypeBF16, Shape: emb.Shape, Data: make([]byte, len(emb.Data)/2)}))
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Tensor("lm_head.weight"); err != nil {
		t.Error(err)
	}
}

// ckptShard writes a sharded copy of the tiny checkpoint: tensors whose
// names sort before the middle go to shard 1, the rest to shard 2, and the
// index maps every tensor to its shard (edit may change the map).
func ckptShard(t *testing.T, edit func(shard1, shard2 []*Tensor, weightMap map[string]string) ([]*Tensor, []*Tensor)) string {
	t.Helper()
	src := synthTo(t, "tiny", 4, DTypeBF16)
	ts := ckptTensors(t, src)
	dir := t.TempDir()
	cfg, _ := os.ReadFile(filepath.Join(src, "config.json"))
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	const f1, f2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
	s1, s2 := ts[:len(ts)/2], ts[len(ts)/2:]
	wm := map[string]string{}
	for _, x := range s1 {
		wm[x.Name] = f1
	}
	for _, x := range s2 {
		wm[x.Name] = f2
	}
	if edit != nil {
		s1, s2 = edit(s1, s2, wm)
	}
	ckptWrite(t, filepath.Join(dir, f1), s1)
	ckptWrite(t, filepath.Join(dir, f2), s2)
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": wm})
	if err := os.WriteFile(filepath.Join(dir, IndexName), idx, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadSharded(t *testing.T) {
	dir := ckptShard(t, nil)
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	single, err := Load(synthTo(t, "tiny", 4, DTypeBF16))
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	if len(c.Tensors) != len(single.Tensors) {
		t.Fatalf("%d tensors, want %d", len(c.Tensors), len(single.Tensors))
	}
	for n, want := range single.Tensors {
		if got := c.Tensors[n]; !bytes.Equal(got.Data, want.Data) || !slices.Equal(got.Shape, want.Shape) {
			t.Errorf("%s differs from the single-file checkpoint", n)
		}
	}
	if len(c.files) != 2 {
		t.Errorf("%d files open, want 2", len(c.files))
	}
	// A model.safetensors next to the index wins, as in transformers.
	if err := Synthesize("tiny", 4, DTypeF32, dir); err != nil {
		t.Fatal(err)
	}
	both, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer both.Close()
	if len(both.files) != 1 || both.Tensors["model.norm.weight"].DType != DTypeF32 {
		t.Errorf("loaded %d files, dtype %s; want model.safetensors", len(both.files), both.Tensors["model.norm.weight"].DType)
	}
}

func TestLoadShardedErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(s1, s2 []*Tensor, wm map[string]string) ([]*Tensor, []*Tensor)
		is   error
		want string
	}{
		{
			name: "tensor missing from its shard",
			edit: func(s1, s2 []*Tensor, wm map[string]string) ([]*Tensor, []*Tensor) {
				return s1[1:], s2
			},
			is: ErrCorrupt, want: `tensor "model.embed_tokens.weight" is mapped to model-00001-of-00002.safetensors but is not in it`,
		},
		{
			name: "tensor in two shards",
			edit: func(s1, s2 []*Tensor, wm map[string]string) ([]*Tensor, []*Tensor) {
				return s1, append(s2, s1[0])
			},
			is: ErrCorrupt, want: `is in both model-00001-of-00002.safetensors and model-00002-of-00002.safetensors`,
		},
		{
			name: "shard outside the directory",
			edit: func(s1, s2 []*Tensor, wm map[string]string) ([]*Tensor, []*Tensor) {
				wm["model.norm.weight"] = "../model.safetensors"
				return s1, s2
			},
			is: ErrCorrupt, want: `tensor "model.norm.weight" maps to "../model.safetensors", not a file in the checkpoint directory`,
		},
		{
			name: "shard file missing",
			edit: func(s1, s2 []*Tensor, wm map[string]string) ([]*Tensor, []*Tensor) {
				wm["model.norm.weight"] = "model-00003-of-00002.safetensors"
				return s1, s2
			},
			is: os.ErrNotExist, want: "model-00003-of-00002.safetensors",
		},
		{
			name: "architecture check spans shards",
			edit: func(s1, s2 []*Tensor, wm map[string]string) ([]*Tensor, []*Tensor) {
				delete(wm, s2[0].Name)
				return s1, s2[1:]
			},
			is: ErrMissingTensor, want: "missing tensor",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(ckptShard(t, tc.edit))
			if err == nil {
				c.Close()
				t.Fatal("Load succeeded")
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want %v containing %q", err, tc.is, tc.want)
			}
		})
	}
	t.Run("index not JSON", func(t *testing.T) {
		dir := ckptShard(t, nil)
		os.WriteFile(filepath.Join(dir, IndexName), []byte("{"), 0o644)
		if _, err := Load(dir); !errors.Is(err, ErrCorrupt) {
			t.Errorf("error %v, want ErrCorrupt", err)
		}
	})
}

func TestLoadRefusesLayersBeyondConfig(t *testing.T) {
	dir := t.TempDir()
	if err := Synthesize("tiny", 4, DTypeF32, dir); err != nil {
		t.Fatal(err)
	}
	ckptEditConfig(t, dir, func(m map[string]any) { m["num_hidden_layers"] = 1 })
	_, err := Load(dir)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "tensors of layer 1 but config.json says num_hidden_layers 1") {
		t.Fatalf("Load = %v", err)
	}
}

// A checkpoint holding tensors its config's decoder never reads (here a
// qwen2 checkpoint's q/k/v biases under a llama config without
// attention_bias) is refused, naming one: running it would drop them.
func TestLoadRefusesUnusedTensors(t *testing.T) {
	dir := t.TempDir()
	if err := Synthesize("tiny", 4, DTypeF32, dir); err != nil {
		t.Fatal(err)
	}
	ckptEditConfig(t, dir, func(m map[string]any) {
		m["model_type"], m["architectures"], m["attention_bias"] = "llama", []string{"LlamaForCausalLM"}, false
	})
	_, err := Load(dir)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), `tensor "model.layers.0.self_attn.k_proj.bias" (and 5 more) is not one the llama decoder`) {
		t.Fatalf("Load = %v", err)
	}
}

func TestLoadShardIndexDuplicateKey(t *testing.T) {
	dir := ckptShard(t, nil)
	idx := filepath.Join(dir, IndexName)
	b, _ := os.ReadFile(idx)
	b = bytes.Replace(b, []byte(`"weight_map":{`), []byte(`"weight_map":{"model.norm.weight":"x.safetensors",`), 1)
	os.WriteFile(idx, b, 0o644)
	if _, err := Load(dir); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `"model.norm.weight" appears twice`) {
		t.Fatalf("Load = %v", err)
	}
}

func TestNonFinite(t *testing.T) {
	for _, dt := range []DType{DTypeF32, DTypeF16, DTypeBF16} {
		t.Run(string(dt), func(t *testing.T) {
			dir := t.TempDir()
			if err := Synthesize("tiny", 4, dt, dir); err != nil {
				t.Fatal(err)
			}
			c, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if name, _, _, ok := c.NonFinite(); ok {
				t.Errorf("synthetic weights: non-finite %s", name)
			}
			c.Close()
			ts := ckptTensors(t, dir)
			for _, x := range ts {
				if x.Name == "model.layers.1.mlp.up_proj.weight" {
					switch dt {
					case DTypeF32:
						binary.LittleEndian.PutUint32(x.Data[4*5:], math.Float32bits(float32(math.NaN())))
					case DTypeF16:
						binary.LittleEndian.PutUint16(x.Data[2*5:], 0x7c00) // +Inf
					case DTypeBF16:
						binary.LittleEndian.PutUint16(x.Data[2*5:], 0xff80) // -Inf
					}
				}
			}
			ckptWrite(t, filepath.Join(dir, SafetensorsName), ts)
			c, err = Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			name, i, v, ok := c.NonFinite()
			if !ok || name != "model.layers.1.mlp.up_proj.weight" || i != 5 || !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) {
				t.Errorf("NonFinite = %s[%d] = %v, %v", name, i, v, ok)
			}
		})
	}
}

// FuzzLoadConfig: any config.json is either refused with one line or
// validated, and listing its tensors stays within the limits.
func FuzzLoadConfig(f *testing.F) {
	f.Add([]byte(`{"model_type":"qwen2","vocab_size":256,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"rms_norm_eps":1e-6}`))
	f.Add([]byte(`{"model_type":"llama","vocab_size":256,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1000000000,"num_attention_heads":4,"rms_norm_eps":1e-6}`))
	f.Add([]byte(`{"model_type":"llama","vocab_size":256,"hidden_size":60,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"head_dim":-24,"rms_norm_eps":1e-6}`))
	f.Add([]byte(`{"model_type":"llama","rope_scaling":{"type":"linear"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(dir)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
			return
		}
		if c.HeadDim() <= 0 || c.KVHeads() <= 0 || c.NumHiddenLayers > configLimits["num_hidden_layers"] {
			t.Fatalf("validated config with head dim %d, kv heads %d, %d layers", c.HeadDim(), c.KVHeads(), c.NumHiddenLayers)
		}
		specs := RequiredTensors(c)
		if len(specs) > 16*configLimits["num_hidden_layers"]+4 {
			t.Fatalf("%d tensors required", len(specs))
		}
		// f32 K and V of one token across layers, as the runtime sizes caches.
		if kv := int64(2*c.NumHiddenLayers*c.KVHeads()*c.HeadDim()) * 4; kv <= 0 || ParamCount(c) <= 0 {
			t.Fatalf("non-positive sizes: %d KV bytes per token, %d parameters", kv, ParamCount(c))
		}
	})
}

// FuzzReadIndex: any shard index is refused with one line wrapping
// ErrCorrupt, or maps tensors only to files inside the checkpoint folder.
func FuzzReadIndex(f *testing.F) {
	f.Add([]byte(`{"metadata":{"total_size":0},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"../etc/passwd"}}`))
	f.Add([]byte(`{"weight_map":{"a":"x","a":"y"}}`))
	f.Add([]byte(`{"weight_map":{}}`))
	f.Add([]byte(`{"weight_map":{"a":1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), IndexName)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		wm, err := readIndex(path)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q: want one line wrapping ErrCorrupt", err)
			}
			return
		}
		if len(wm) == 0 {
			t.Fatal("empty weight map accepted")
		}
		for name, f := range wm {
			if f == "" || f != filepath.Base(f) || f == "." || f == ".." {
				t.Fatalf("tensor %q maps outside the folder: %q", name, f)
			}
		}
	})
}

// TestReleasePagesKeepsData drops a loaded checkpoint's resident pages and
// reads every tensor again: the bytes are the same (refaulted from the file).
func TestReleasePagesKeepsData(t *testing.T) {
	ck, err := Load(synthTo(t, "tiny", 1, DTypeF32))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	before := map[string][]byte{}
	for n, tn := range ck.Tensors {
		before[n] = append([]byte(nil), tn.Data...)
	}
	if err := ck.ReleasePages(); err != nil {
		t.Fatal(err)
	}
	for n, tn := range ck.Tensors {
		if !bytes.Equal(tn.Data, before[n]) {
			t.Fatalf("tensor %s changed after ReleasePages", n)
		}
	}
}
