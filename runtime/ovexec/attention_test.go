package ovexec

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// TestAttentionFormsAgree runs the same prompt through bounded and static
// graphs at a capacity that is not a multiple of the 64-slot block, with a
// prompt whose prefill chunks and decode steps cross block edges (60 + 100
// tokens: live prefixes of 64, 128 and 192 slots, then capped at 200): the
// greedy tokens are identical and every logits row agrees.
func TestAttentionFormsAgree(t *testing.T) {
	run := func(a model.Attention) *runtime.GenerateResult {
		ck, comp := openOVWith(t, "tiny", "F32", a)
		res, err := runtime.Generate(context.Background(), comp, runtime.ShapeOf(ck.Config), runtime.GenerateConfig{
			Capacity: 200, PrefillChunk: 8, Prompt: runtime.SeededTokens(9, 60, ck.Config.VocabSize), MaxNewTokens: 140, KeepLogits: true})
		if err != nil {
			t.Fatal(err)
		}
		if comp.Attention() != a {
			t.Fatalf("Attention() = %q, asked for %q", comp.Attention(), a)
		}
		return res
	}
	bounded, static := run(model.AttentionBounded), run(model.AttentionStatic)
	if len(bounded.Tokens) != 140 || !slices.Equal(bounded.Tokens, static.Tokens) {
		t.Fatalf("tokens differ:\nbounded %v\n static %v", bounded.Tokens, static.Tokens)
	}
	for i := range static.Logits {
		checkRow(t, i, bounded.Logits[i], static.Logits[i])
	}
}

// TestBoundedReadsOnlyLivePrefix fills every cache slot past the bounded
// graph's live prefix with NaN: the bounded decode graph must not read them
// (finite logits, equal to those with zeros there), while the static graph,
// which reads every slot, turns them into NaN logits (the check can fail).
func TestBoundedReadsOnlyLivePrefix(t *testing.T) {
	const capacity, pos = 256, 70 // live prefix: model.LiveSlots(70, 256) = 128 slots
	live := model.LiveSlots(pos, capacity)
	step := func(a model.Attention, poison bool) []float32 {
		ck, comp := openOVWith(t, "tiny", "F32", a)
		shape := runtime.ShapeOf(ck.Config)
		exe, err := comp.Compile(context.Background(), model.GraphSpec{Capacity: capacity, Chunk: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer exe.Close()
		buf, kv, err := runtime.AllocFullView(shape, capacity)
		if err != nil {
			t.Fatal(err)
		}
		defer buf.Free()
		rb := shape.RowBytes()
		for _, m := range append(append([][]byte{}, kv.K...), kv.V...) {
			for j := 0; j < capacity*rb; j += 4 {
				v := float32(math.Sin(float64(j))) // some finite cache content
				if j >= live*rb && poison {
					v = float32(math.NaN())
				}
				binary.LittleEndian.PutUint32(m[j:], math.Float32bits(v))
			}
		}
		if err := exe.Bind(kv); err != nil {
			t.Fatal(err)
		}
		logits, err := exe.Step([]int64{3}, pos)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(logits)
	}
	clean := step(model.AttentionBounded, false)
	poisoned := step(model.AttentionBounded, true)
	for i, v := range poisoned {
		if math.IsNaN(float64(v)) {
			t.Fatalf("bounded graph: logit %d is NaN: it read slots past its live prefix of %d", i, live)
		}
	}
	checkRow(t, 0, poisoned, clean)
	if !slices.Equal(poisoned, clean) {
		t.Errorf("bounded graph: logits moved when slots %d.. changed", live)
	}
	nan := false
	for _, v := range step(model.AttentionStatic, true) {
		nan = nan || math.IsNaN(float64(v))
	}
	if !nan {
		t.Error("static graph: finite logits with NaN in unused slots; the poison does not reach the attention and the bounded check proves nothing")
	}
}

// TestResolveAttention pins auto: bounded where the device takes dynamic
// shapes inside a graph, static on NPU; explicit forms are kept.
func TestResolveAttention(t *testing.T) {
	for _, tc := range []struct {
		name   string
		asked  model.Attention
		device string
		want   model.Attention
	}{
		{name: "auto on CPU", asked: model.AttentionAuto, device: "CPU", want: model.AttentionBounded},
		{name: "empty on GPU", asked: "", device: "GPU", want: model.AttentionBounded},
		{name: "auto on NPU", asked: model.AttentionAuto, device: "NPU", want: model.AttentionStatic},
		{name: "static on CPU", asked: model.AttentionStatic, device: "CPU", want: model.AttentionStatic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ResolveAttention(tc.asked, tc.device); got != tc.want {
				t.Errorf("ResolveAttention(%q, %s) = %q, want %q", tc.asked, tc.device, got, tc.want)
			}
		})
	}
}

// TestKVCacheInBF16 runs a bf16 inference with its cache stored in bf16
// (what auto picks on a CPU with bf16) and in f32: the plugin converts an
// f32 cache to bf16 before its decode attention anyway, so both give the
// same greedy tokens up to the first near tie and logits within bf16
// rounding, while the bf16 cache has half the bytes per slot. The prompt
// puts positions past 256, where bf16 no longer holds integers: the rotary
// angles must not be computed in the device's precision. Skipped on CPUs without bf16 (auto keeps f32 there).
func TestKVCacheInBF16(t *testing.T) {
	run := func(kv string) (*runtime.GenerateResult, *Compiler) {
		ck, err := model.Load(testenv.Synth(t, "tiny", "F32"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ck.Close() })
		comp, err := NewCompiler(ck, Options{Device: "CPU", Precision: "bf16", KVPrecision: kv})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := comp.Close(); err != nil {
				t.Error(err)
			}
		})
		res, err := runtime.Generate(context.Background(), comp, comp.KVShape(), runtime.GenerateConfig{
			Capacity: 600, PrefillChunk: 16, Prompt: runtime.SeededTokens(9, 300, ck.Config.VocabSize), MaxNewTokens: 100, KeepLogits: true})
		if err != nil {
			t.Fatal(err)
		}
		return res, comp
	}
	bf, compBF := run("auto")
	if compBF.KVPrecision() != "bf16" {
		t.Skipf("auto stores the cache in %s here (no bf16 on this CPU)", compBF.KVPrecision())
	}
	f, compF := run("f32")
	if got, want := compBF.KVShape().RowBytes()*2, compF.KVShape().RowBytes(); got != want {
		t.Errorf("bf16 cache rows are %d bytes, want half of f32's %d", got/2, want)
	}
	// Rows are compared up to the first near tie (top-2 gap below 0.1),
	// which bf16 rounding may break either way (as in the GGUF test).
	last := len(f.Logits) - 1
	for i, row := range f.Logits {
		if top2Gap(row) < 0.1 {
			last = i
			break
		}
	}
	if last < 32 {
		t.Fatalf("a near tie at row %d: too few rows to compare", last)
	}
	for i := 0; i <= last; i++ {
		if i < last && bf.Tokens[i] != f.Tokens[i] {
			t.Fatalf("row %d: token %d with a bf16 cache, %d with f32 (top-2 gap %.3f)", i, bf.Tokens[i], f.Tokens[i], top2Gap(f.Logits[i]))
		}
		if c := runtime.Cosine(bf.Logits[i], f.Logits[i]); c < 0.9995 {
			t.Errorf("row %d: cosine %.6f < 0.9995", i, c)
		}
	}
	t.Logf("rows 0..%d agree (first near tie at %d)", last, last)
}
