package model

import (
	"strings"
	"testing"
)

// loadSpec loads a GGUF spec as a checkpoint.
func loadSpec(t *testing.T, s *ggufSpec) *Checkpoint {
	t.Helper()
	ck, err := Load(writeSpec(t, s.bytes()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

// TestFusedProjections checks the layout that lets a layer's q, k and v
// (and gate and up) run as one matrix product: members stored alike lie
// back to back in group order, each plane of the group in one run, the graph
// reads the group through one constant; stored bytes that are not back to
// back (read in place, or some copied) stay where they are and the graph
// concatenates their constants; members stored differently (a mixed GGUF
// quantization) stay apart.
func TestFusedProjections(t *testing.T) {
	const (
		q, k, v  = "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight"
		gate, up = "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"
	)
	for _, tc := range []struct {
		name     string
		edit     func(*ggufSpec)
		qkv, mlp bool
		qkvParts bool // fused by a Concat in the graph
	}{
		// llama's q and k rows are permuted in the file, so they are copied
		// while v is read in place: concatenated in the graph. gate and up
		// are back to back in the file and read in place: fused.
		{name: "f32", edit: func(*ggufSpec) {}, qkv: true, qkvParts: true, mlp: true},
		{name: "q4_1", edit: func(s *ggufSpec) {
			for _, n := range []string{"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"} {
				s.tensor(n).typ = 3
			}
		}, qkv: true, mlp: true},
		{name: "mixed", edit: func(s *ggufSpec) { s.tensor("blk.0.attn_k.weight").typ = 8 }, qkv: false, mlp: true},
		// 16-bit gate and up read in place stay apart when asked
		// (SplitMLP; fusesMLP: the CPU plugin's fused MLP node needs them
		// so).
		{name: "f16", edit: func(s *ggufSpec) {
			for _, n := range []string{"blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"} {
				s.tensor(n).typ = 1
			}
		}, qkv: true, qkvParts: true, mlp: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tinyLlama()
			tc.edit(s)
			w := NewWeightsWith(loadSpec(t, s), WeightOptions{SplitMLP: true})
			for _, g := range []struct {
				members []string
				want    bool
			}{{[]string{q, k, v}, tc.qkv}, {[]string{gate, up}, tc.mlp}} {
				name := w.Fused(g.members...)
				if (name != "") != g.want {
					t.Fatalf("Fused(%v) = %q, want fused %v", g.members, name, g.want)
				}
				if name == "" {
					continue
				}
				f := w.slot(name)
				if f.parts != nil {
					if !tc.qkvParts || g.members[0] != q || strings.Join(f.parts, "+") != name {
						t.Fatalf("%s: parts %v, want parts %v", name, f.parts, tc.qkvParts && g.members[0] == q)
					}
					continue
				}
				at := [3]int64{f.off, f.scaleOff, f.zpOff}
				var rows int64
				for _, m := range g.members {
					s := w.slot(m)
					if got := [3]int64{s.off, s.scaleOff, s.zpOff}; got != at {
						t.Errorf("%s: planes at %v, want right after the previous member, %v", m, got, at)
					}
					at = [3]int64{at[0] + s.size, at[1] + s.scaleSize, at[2] + s.zpSize}
					rows += s.shape[0]
				}
				if f.shape[0] != rows || at != [3]int64{f.off + f.size, f.scaleOff + f.scaleSize, f.zpOff + f.zpSize} {
					t.Errorf("group slot %+v does not span its members (%d rows)", f, rows)
				}
			}
			if err := w.Bind(make([]byte, w.Size())); err != nil {
				t.Fatal(err)
			}
			b, err := BuildIR(w, GraphSpec{Capacity: 16, Chunk: 1})
			if err != nil {
				t.Fatal(err)
			}
			net := parseIR(t, b)
			consts, types := map[string]int{}, map[int]string{}
			for _, l := range net.Layers {
				types[l.ID] = l.Type
				if l.Type == "Const" {
					consts[l.Name] = l.ID
				}
			}
			_, apart := consts[q]
			_, fused := consts[q+"+"+k+"+"+v]
			concat := false
			for _, e := range net.Edges {
				concat = concat || apart && e.From == consts[q] && types[e.To] == "Concat"
			}
			if want := tc.qkv && !tc.qkvParts; fused != want || apart == want || concat != tc.qkvParts {
				t.Errorf("graph constants for q: separate %v, fused %v, concatenated %v; want fused %v, concatenated %v", apart, fused, concat, want, tc.qkvParts)
			}
		})
	}
}

// TestMappedTensors checks which tensors the blob reads in place from the
// file (stored as is, aligned) and which it copies (llama's permuted q and
// k rows, repacked blocks, the vectors of a file that is mostly repacked),
// that Bind copies the files' regions into a
// plain buffer and BindMapped refuses a buffer that does not map them.
func TestMappedTensors(t *testing.T) {
	s := tinyLlama()
	s.tensor("blk.0.ffn_down.weight").typ = 8 // Q8_0: repacked
	ck := loadSpec(t, s)
	w := NewWeights(ck)
	for name, want := range map[string]slotKind{
		"model.layers.0.self_attn.v_proj.weight": slotMapped,
		"model.layers.0.self_attn.q_proj.weight": slotRaw,
		"model.layers.0.mlp.down_proj.weight":    slotPacked,
		"model.norm.weight":                      slotMapped,
	} {
		if got := w.slot(name).kind; got != want {
			t.Errorf("%s: slot kind %d, want %d", name, got, want)
		}
	}
	files := w.Files()
	if len(files) != 1 || files[0].Offset != 0 || files[0].Path != ck.Dir {
		t.Fatalf("files %+v, want the GGUF file at offset 0", files)
	}
	v := w.slot("model.layers.0.self_attn.v_proj.weight")
	if v.off+v.size > files[0].Size {
		t.Fatalf("v at [%d, %d) lies outside the file's region of %d bytes", v.off, v.off+v.size, files[0].Size)
	}
	buf := make([]byte, w.Size())
	if err := w.BindMapped(buf); err == nil || !strings.Contains(err.Error(), "does not map") {
		t.Fatalf("BindMapped on a buffer without the file: %v", err)
	}
	if err := w.Bind(buf); err != nil {
		t.Fatal(err)
	}
	tv := ck.Tensors["model.layers.0.self_attn.v_proj.weight"]
	if string(buf[v.off:v.off+v.size]) != string(tv.Data) {
		t.Error("Bind did not copy v's bytes from the file")
	}

	// A quantized file whose matrices are all repacked is not mapped for
	// its few vectors: they are copied.
	q := tinyLlama()
	for _, n := range []string{"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.attn_output.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"} {
		q.tensor(n).typ = 3
	}
	wq := NewWeights(loadSpec(t, q))
	if len(wq.Files()) != 0 || wq.slot("model.norm.weight").kind != slotRaw {
		t.Errorf("Q4_1 file: files %+v, norm slot kind %d; want no file mapped, the norm copied", wq.Files(), wq.slot("model.norm.weight").kind)
	}
}

// TestMinimumPlanes checks which Q4_1 weights keep their minimum as a plane
// (matrix-product weights, w = q*scale + min, exact) and which as a float
// zero point (the gathered embedding), and that rounded rounds both.
func TestMinimumPlanes(t *testing.T) {
	s := tinyLlama()
	s.tensor("token_embd.weight").typ = 3
	s.tensor("blk.0.attn_output.weight").typ = 3
	ck := loadSpec(t, s)
	const o, emb = "model.layers.0.self_attn.o_proj.weight", "model.embed_tokens.weight"
	for format, want := range map[WeightFormat][2]zeroPoint{
		WeightsNative:  {zpMin, zpPlane},
		WeightsRounded: {zpRounded, zpRounded},
	} {
		w := NewWeightsWith(ck, WeightOptions{Format: format})
		if got := [2]zeroPoint{w.slot(o).pack.zp, w.slot(emb).pack.zp}; got != want {
			t.Errorf("%s: o_proj, embedding zero points %v, want %v", format, got, want)
		}
		if err := w.Bind(make([]byte, w.Size())); err != nil {
			t.Fatal(err)
		}
		b, err := BuildIR(w, GraphSpec{Capacity: 16, Chunk: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), `name="`+o+`/min"`); got != (format == WeightsNative) {
			t.Errorf("%s: graph reads a minimum plane for o_proj: %v", format, got)
		}
	}
}

// TestStepBytes: a decode step reads every weight of a model whose lm_head
// is its embedding (tiny), and all but the embedding, of which it gathers
// one row, of a model with a separate lm_head (tiny-llama).
func TestStepBytes(t *testing.T) {
	for _, tc := range []struct {
		preset string
		tied   bool
	}{{"tiny", true}, {"tiny-llama", false}} {
		ck, err := Load(synthTo(t, tc.preset, 2, DTypeF32))
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Close()
		w := NewWeights(ck)
		cfg := w.Config()
		want := w.TensorBytes()
		if !tc.tied {
			want -= int64(cfg.VocabSize * cfg.HiddenSize * 4) // the f32 embedding, 64-byte aligned already
		}
		if got := w.StepBytes(); got != want || got <= 0 {
			t.Errorf("%s: StepBytes %d, want %d (tensors %d)", tc.preset, got, want, w.TensorBytes())
		}
	}
}
