package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

var updateSynthGolden = flag.Bool("update-synth", false, "rewrite testdata/synth_golden.txt")

var synthDTypes = []DType{DTypeF32, DTypeF16, DTypeBF16}

func synthTo(t *testing.T, preset string, seed uint64, dtype DType) string {
	t.Helper()
	dir := t.TempDir()
	if err := Synthesize(preset, seed, dtype, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func synthFileHash(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestSynthesizeDeterministic(t *testing.T) {
	for _, tc := range []struct {
		name   string
		preset string
		dtype  DType
	}{
		{"tiny f32", "tiny", DTypeF32},
		{"tiny bf16", "tiny", DTypeBF16},
		{"tiny-llama f16", "tiny-llama", DTypeF16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := synthTo(t, tc.preset, 42, tc.dtype), synthTo(t, tc.preset, 42, tc.dtype)
			for _, f := range []string{"config.json", SafetensorsName} {
				if synthFileHash(t, filepath.Join(a, f)) != synthFileHash(t, filepath.Join(b, f)) {
					t.Errorf("%s differs between two runs", f)
				}
			}
			c := synthTo(t, tc.preset, 43, tc.dtype)
			if synthFileHash(t, filepath.Join(a, SafetensorsName)) == synthFileHash(t, filepath.Join(c, SafetensorsName)) {
				t.Error("seeds 42 and 43 give the same weights")
			}
			entries, _ := os.ReadDir(a)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if !slices.Equal(names, []string{"config.json", SafetensorsName}) {
				t.Errorf("directory holds %v", names)
			}
		})
	}
}

// TestSynthesizeGolden pins the exact bytes, so a change to the format or the
// random streams is deliberate (go test -run SynthesizeGolden -update-synth).
func TestSynthesizeGolden(t *testing.T) {
	var got strings.Builder
	for _, preset := range []string{"tiny", "tiny-llama"} {
		for _, dt := range synthDTypes {
			dir := synthTo(t, preset, 1, dt)
			for _, f := range []string{"config.json", SafetensorsName} {
				fmt.Fprintf(&got, "%s %s %s %s\n", preset, dt, f, synthFileHash(t, filepath.Join(dir, f)))
			}
		}
	}
	golden := filepath.Join("testdata", "synth_golden.txt")
	if *updateSynthGolden {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Errorf("synthetic checkpoints changed:\n%s\nwant\n%s", got.String(), want)
	}
}

// TestSynthesizeOrderIndependent: a tensor's values depend only on the seed
// and its name, so tiny-llama's embedding is the first rows of tiny's.
func TestSynthesizeOrderIndependent(t *testing.T) {
	a, err := Load(synthTo(t, "tiny", 5, DTypeF32))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Load(synthTo(t, "tiny-llama", 5, DTypeF32))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ea, eb := a.Tensors["model.embed_tokens.weight"].Data, b.Tensors["model.embed_tokens.weight"].Data
	if !bytes.Equal(ea[:len(eb)], eb) {
		t.Error("embedding values depend on the preset")
	}
}

// TestSynthesizeRounding: F16 and BF16 files hold the F32 values rounded to
// nearest even.
func TestSynthesizeRounding(t *testing.T) {
	load := func(dt DType) *Checkpoint {
		c, err := Load(synthTo(t, "tiny-llama", 3, dt))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ref := load(DTypeF32)
	for _, tc := range []struct {
		name  string
		dtype DType
		round func(float32) uint16
		back  func(uint16) float32
	}{
		{"f16", DTypeF16, Float32ToF16, F16ToFloat32},
		{"bf16", DTypeBF16, Float32ToBF16, BF16ToFloat32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := load(tc.dtype)
			for name, rt := range ref.Tensors {
				want, _ := rt.Float32s()
				got, err := c.Tensors[name].Float32s()
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if w := tc.back(tc.round(want[i])); got[i] != w {
						t.Fatalf("%s[%d] = %g, want %g (from %g)", name, i, got[i], w, want[i])
					}
				}
			}
		})
	}
}

func TestSynthesizeDistributions(t *testing.T) {
	c, err := Load(synthTo(t, "tiny", 9, DTypeF32))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		name      string
		mean, std float64
	}{
		{"model.embed_tokens.weight", 0, 1},
		{"model.layers.0.mlp.down_proj.weight", 0, 6 / math.Sqrt(128)},
		{"model.layers.0.mlp.gate_proj.weight", 0, 1.0 / 8},
		{"model.layers.1.self_attn.q_proj.weight", 0, 1.0 / 8},
		{"model.layers.1.self_attn.q_proj.bias", 0, 0.1},
		{"model.norm.weight", 1, 0.1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := c.Tensors[tc.name].Float32s()
			if err != nil {
				t.Fatal(err)
			}
			var s, ss float64
			for _, x := range v {
				s += float64(x)
			}
			mean := s / float64(len(v))
			for _, x := range v {
				ss += (float64(x) - mean) * (float64(x) - mean)
			}
			std := math.Sqrt(ss / float64(len(v)))
			// Tolerance: 5 standard errors of each estimate.
			se := tc.std / math.Sqrt(float64(len(v)))
			if math.Abs(mean-tc.mean) > 5*se || math.Abs(std-tc.std) > 5*se*math.Sqrt2+1e-9 {
				t.Errorf("mean %.4f std %.4f, want %.4f, %.4f (n=%d)", mean, std, tc.mean, tc.std, len(v))
			}
		})
	}
}

func TestSynthesizeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, preset string
		dtype        DType
		dir          string
		want         string
	}{
		{"unknown preset", "huge", "", t.TempDir(), `unknown preset "huge"`},
		{"integer dtype", "tiny", DTypeI8, t.TempDir(), `dtype "I8" is not F32, F16 or BF16`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Synthesize(tc.preset, 1, tc.dtype, tc.dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(tc.dir, SafetensorsName)); err == nil {
				t.Error("a failed Synthesize wrote model.safetensors")
			}
		})
	}
}

func TestWriteAtomicFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	boom := errors.New("boom")
	err := writeAtomic(path, func(w io.Writer) error {
		w.Write(make([]byte, 3<<20))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %d files behind", len(entries))
	}
}

func TestSynthesizeDefaultDType(t *testing.T) {
	dir := synthTo(t, "tiny", 1, "")
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Config.TorchDtype != "float32" || c.Tensors["model.norm.weight"].DType != DTypeF32 {
		t.Errorf("torch_dtype %q, dtype %s", c.Config.TorchDtype, c.Tensors["model.norm.weight"].DType)
	}
}

// TestSynthLogitGap runs an independent float64 forward pass of the tiny
// presets over random prompts and checks that greedy choices are robust and
// depend on the context: the top-1 vs top-2 logit gap exceeds 0.05 at >= 90%
// of positions, the greedy token is the input token at < 20% of positions,
// and changing the first token changes the greedy token at >= 50% of the
// later positions.
func TestSynthLogitGap(t *testing.T) {
	argmax := func(l []float64) int {
		best := 0
		for i, v := range l {
			if v > l[best] {
				best = i
			}
		}
		return best
	}
	for _, preset := range []string{"tiny", "tiny-llama", "gemma-tiny"} {
		t.Run(preset, func(t *testing.T) {
			c, err := Load(synthTo(t, preset, 1, DTypeF32))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r := rand.New(rand.NewPCG(11, 12))
			var gaps []float64
			var self, changed, later int
			for range 16 {
				tokens := make([]int, 16)
				for i := range tokens {
					tokens[i] = r.IntN(c.Config.VocabSize)
				}
				logits := synthRefLogits(t, c, tokens)
				other := slices.Clone(tokens)
				other[0] = (other[0] + 1) % c.Config.VocabSize
				otherLogits := synthRefLogits(t, c, other)
				for p, l := range logits {
					s := slices.Clone(l)
					sort.Float64s(s)
					gaps = append(gaps, s[len(s)-1]-s[len(s)-2])
					if argmax(l) == tokens[p] {
						self++
					}
					if p > 0 {
						later++
						if argmax(l) != argmax(otherLogits[p]) {
							changed++
						}
					}
				}
			}
			sort.Float64s(gaps)
			small := sort.SearchFloat64s(gaps, 0.05)
			t.Logf("%d positions: gap min %.4f, 10%% %.3f, median %.3f, %d below 0.05; greedy = input %d; context changes greedy at %d of %d",
				len(gaps), gaps[0], gaps[len(gaps)/10], gaps[len(gaps)/2], small, self, changed, later)
			if small*10 > len(gaps) {
				t.Errorf("%d of %d gaps below 0.05", small, len(gaps))
			}
			if self*5 >= len(gaps) {
				t.Errorf("greedy token is the input token at %d of %d positions", self, len(gaps))
			}
			if changed*2 < later {
				t.Errorf("changing the first token changes only %d of %d later greedy tokens", changed, later)
			}
		})
	}
}

// synthRefLogits is a plain float64 Llama/Qwen2/Gemma forward pass (RMSNorm,
// RoPE with the Hugging Face rotate-half layout, grouped-query causal
// attention, SwiGLU or GeGLU MLP, in the forms of the checkpoint's family)
// returning the logits at every position.
func synthRefLogits(t *testing.T, c *Checkpoint, tokens []int) [][]float64 {
	cfg := c.Config
	w := func(name string) []float64 {
		v, err := c.Tensors[name].Float32s()
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}
	matvec := func(m []float64, x []float64) []float64 {
		out := make([]float64, len(m)/len(x))
		for i := range out {
			for j, xj := range x {
				out[i] += m[i*len(x)+j] * xj
			}
		}
		return out
	}
	fam := cfg.Family()
	act, err := fam.Activation(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var offset float64 // of the norm weights
	if c.NormForm() == NormOnePlusWeight {
		offset = 1
	}
	rmsnorm := func(x, g []float64) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		s := 1 / math.Sqrt(ss/float64(len(x))+cfg.RMSNormEps)
		out := make([]float64, len(x))
		for i := range x {
			out[i] = x[i] * s * (offset + g[i])
		}
		return out
	}
	addTo := func(x, y []float64) {
		for i := range x {
			x[i] += y[i]
		}
	}
	D, H, Hkv := cfg.HeadDim(), cfg.NumAttentionHeads, cfg.KVHeads()
	rope := func(v []float64, pos int) {
		for h := 0; h < len(v)/D; h++ {
			x := v[h*D : (h+1)*D]
			for i := 0; i < D/2; i++ {
				a := float64(pos) * math.Pow(cfg.Theta(), -float64(2*i)/float64(D))
				x0, x1 := x[i], x[i+D/2]
				x[i], x[i+D/2] = x0*math.Cos(a)-x1*math.Sin(a), x1*math.Cos(a)+x0*math.Sin(a)
			}
		}
	}
	emb := w("model.embed_tokens.weight")
	head := emb
	if !cfg.TieWordEmbeddings {
		head = w("lm_head.weight")
	}
	hidden := cfg.HiddenSize
	xs := make([][]float64, len(tokens))
	for p, tok := range tokens {
		xs[p] = slices.Clone(emb[tok*hidden : (tok+1)*hidden])
		if fam.Embedding == EmbedSqrtHidden {
			for i := range xs[p] {
				xs[p][i] *= math.Sqrt(float64(hidden))
			}
		}
	}
	for l := range cfg.NumHiddenLayers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		lw := map[string][]float64{}
		for _, s := range RequiredTensors(cfg) {
			if name, ok := strings.CutPrefix(s.Name, pre); ok {
				lw[name] = w(s.Name)
			}
		}
		proj := func(name string, x []float64) []float64 {
			y := matvec(lw[name+".weight"], x)
			if b, ok := lw[name+".bias"]; ok {
				addTo(y, b)
			}
			return y
		}
		var ks, vs [][]float64
		for p, x := range xs {
			h := rmsnorm(x, lw["input_layernorm.weight"])
			q, k, v := proj("self_attn.q_proj", h), proj("self_attn.k_proj", h), proj("self_attn.v_proj", h)
			rope(q, p)
			rope(k, p)
			ks, vs = append(ks, k), append(vs, v)
			att := make([]float64, H*D)
			for hd := range H {
				kv := hd / (H / Hkv)
				scores := make([]float64, p+1)
				mx := math.Inf(-1)
				for s := range scores {
					for i := range D {
						scores[s] += q[hd*D+i] * ks[s][kv*D+i]
					}
					scores[s] /= math.Sqrt(float64(D))
					mx = max(mx, scores[s])
				}
				var sum float64
				for s := range scores {
					scores[s] = math.Exp(scores[s] - mx)
					sum += scores[s]
				}
				for s := range scores {
					for i := range D {
						att[hd*D+i] += scores[s] / sum * vs[s][kv*D+i]
					}
				}
			}
			addTo(x, matvec(lw["self_attn.o_proj.weight"], att))
			h2 := rmsnorm(x, lw["post_attention_layernorm.weight"])
			g, u := matvec(lw["mlp.gate_proj.weight"], h2), matvec(lw["mlp.up_proj.weight"], h2)
			for i, x := range g {
				if act == ActGELUTanh {
					g[i] = 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x))) * u[i]
				} else {
					g[i] = x / (1 + math.Exp(-x)) * u[i]
				}
			}
			addTo(x, matvec(lw["mlp.down_proj.weight"], g))
		}
	}
	norm := w("model.norm.weight")
	logits := make([][]float64, len(xs))
	for p, x := range xs {
		logits[p] = matvec(head, rmsnorm(x, norm))
	}
	return logits
}
