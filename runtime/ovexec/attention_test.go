package ovexec

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/ov"
	"github.com/ovtoolkit/ovrun/runtime"
)

// TestAttentionFormsAgree runs the same prompt through paged, bounded and
// static graphs at a capacity that is a multiple of neither the 64-slot
// block nor the 32-slot paged block, with a prompt whose prefill chunks and
// decode steps cross block edges (60 + 140 tokens: live prefixes of 64,
// 128 and 192 slots, then capped at 200; paged blocks up to the seventh,
// partly past the capacity): the greedy tokens are identical and every
// logits row agrees.
func TestAttentionFormsAgree(t *testing.T) {
	run := func(a model.Attention) *runtime.GenerateResult {
		ck, comp := openOVWith(t, "tiny", "F32", a)
		res, err := runtime.Generate(context.Background(), comp, comp.KVShape(), runtime.GenerateConfig{
			Capacity: 200, PrefillChunk: 8, Prompt: runtime.SeededTokens(9, 60, ck.Config.VocabSize), MaxNewTokens: 140, KeepLogits: true})
		if err != nil {
			t.Fatal(err)
		}
		if comp.Attention() != a {
			t.Fatalf("Attention() = %q, asked for %q", comp.Attention(), a)
		}
		return res
	}
	static := run(model.AttentionStatic)
	for _, a := range []model.Attention{model.AttentionBounded, model.AttentionPaged} {
		got := run(a)
		if len(got.Tokens) != 140 || !slices.Equal(got.Tokens, static.Tokens) {
			t.Fatalf("tokens differ:\n%7s %v\n static %v", a, got.Tokens, static.Tokens)
		}
		for i := range static.Logits {
			checkRow(t, i, got.Logits[i], static.Logits[i])
		}
	}
}

// TestPagedReadsOnlyLiveBlocks fills the paged cache with NaN everywhere
// but the live tokens' slots (the blocks past them, and the slots past the
// live position inside the last block, of every KV head): a paged decode
// step must not read them (finite logits, equal to those with finite
// content there), and writes its own token's K/V into its slot.
func TestPagedReadsOnlyLiveBlocks(t *testing.T) {
	const capacity, pos = 256, 70 // slot 70 is in block 2, slot 6 of 32
	step := func(poison bool) ([]float32, *runtime.KV, runtime.KVShape) {
		_, comp := openOVWith(t, "tiny", "F32", model.AttentionPaged)
		shape := comp.KVShape()
		if shape.Block != model.PagedBlock {
			t.Fatalf("KVShape().Block = %d, want %d", shape.Block, model.PagedBlock)
		}
		exe, err := comp.Compile(context.Background(), model.GraphSpec{Capacity: capacity, Chunk: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { exe.Close() })
		buf, kv, err := runtime.AllocFullView(shape, capacity)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { buf.Free() })
		eb, B, H, D := 4, shape.Block, shape.KVHeads, shape.HeadDim
		for _, m := range append(append([][]byte{}, kv.K...), kv.V...) {
			for j := 0; j < len(m); j += eb {
				e := j / eb
				slot := e/(H*B*D)*B + e/D%B // [block, head, slot in block, d]
				v := float32(math.Sin(float64(j)))
				if slot >= pos && poison {
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
		return slices.Clone(logits), kv, shape
	}
	clean, _, _ := step(false)
	poisoned, kv, shape := step(true)
	for i, v := range poisoned {
		if math.IsNaN(float64(v)) {
			t.Fatalf("paged graph: logit %d is NaN: it read slots past position %d", i, pos)
		}
	}
	if !slices.Equal(poisoned, clean) {
		t.Errorf("paged graph: logits moved when slots %d.. changed", pos)
	}
	// The step stored its K row at slot 70: block 2, slot 6, every head.
	B, H, D := shape.Block, shape.KVHeads, shape.HeadDim
	for h := 0; h < H; h++ {
		off := 4 * (((pos/B*H+h)*B + pos%B) * D)
		if v := math.Float32frombits(binary.LittleEndian.Uint32(kv.K[0][off:])); math.IsNaN(float64(v)) {
			t.Errorf("layer 0 head %d: slot %d still holds the poison: the graph did not write its K row there", h, pos)
		}
	}
}

// TestResolveAttention pins auto: on the CPU static up to StaticCacheMax
// bytes of past cache and bounded above, bounded on GPU, static on NPU;
// explicit forms are kept.
func TestResolveAttention(t *testing.T) {
	for _, tc := range []struct {
		name   string
		asked  model.Attention
		device string
		bytes  int64
		paged  bool // the core can read paged attention
		want   model.Attention
	}{
		{name: "auto on CPU with paged attention", asked: model.AttentionAuto, device: "CPU", bytes: 1, paged: true, want: model.AttentionPaged},
		{name: "auto on CPU with paged attention, large cache", asked: "", device: "cpu", bytes: 1 << 40, paged: true, want: model.AttentionPaged},
		{name: "auto on GPU with paged attention", asked: model.AttentionAuto, device: "GPU", bytes: 1, paged: true, want: model.AttentionBounded},
		{name: "auto on NPU with paged attention", asked: model.AttentionAuto, device: "NPU", bytes: 1, paged: true, want: model.AttentionStatic},
		{name: "static on CPU with paged attention", asked: model.AttentionStatic, device: "CPU", bytes: 1, paged: true, want: model.AttentionStatic},
		{name: "auto on CPU, small cache", asked: model.AttentionAuto, device: "CPU", bytes: StaticCacheMax, want: model.AttentionStatic},
		{name: "auto on CPU, large cache", asked: model.AttentionAuto, device: "CPU", bytes: StaticCacheMax + 1, want: model.AttentionBounded},
		{name: "empty on cpu", asked: "", device: "cpu", bytes: 1 << 20, want: model.AttentionStatic},
		{name: "empty on GPU", asked: "", device: "GPU", bytes: 1 << 20, want: model.AttentionBounded},
		{name: "auto on NPU", asked: model.AttentionAuto, device: "NPU", bytes: 1 << 30, want: model.AttentionStatic},
		{name: "static on CPU", asked: model.AttentionStatic, device: "CPU", bytes: 1 << 30, want: model.AttentionStatic},
		{name: "bounded on CPU", asked: model.AttentionBounded, device: "CPU", bytes: 1, want: model.AttentionBounded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ResolveAttention(tc.asked, tc.device, tc.bytes, tc.paged); got != tc.want {
				t.Errorf("ResolveAttention(%q, %s, %d, paged %v) = %q, want %q", tc.asked, tc.device, tc.bytes, tc.paged, got, tc.want)
			}
		})
	}
}

// TestAutoAttentionPerCapacity: with auto, a compiler whose core has the
// paged-attention extension gives every graph paged attention (make build
// builds the extension, so it must be there); without it, each graph gets
// the form its capacity's cache size calls for, the summary's description
// names the split, and an explicit form holds for every capacity.
func TestAutoAttentionPerCapacity(t *testing.T) {
	_, comp := openOVWith(t, "tiny", "F32", model.AttentionAuto)
	if comp.paged != nil {
		t.Fatalf("no paged attention: %v", comp.paged)
	}
	for _, c := range []int{64, 1000, 1 << 16} {
		if got := comp.withAttention(model.GraphSpec{Capacity: c, Chunk: 8, Shared: c == 64}).Attention; got != model.AttentionPaged {
			t.Errorf("capacity %d: %s, want paged", c, got)
		}
	}
	pagedPenalty := comp.SharedStepPenalty()
	if !comp.Paged() || comp.KVShape().Block != model.PagedBlock {
		t.Errorf("Paged() %v, KVShape().Block %d: want true, %d", comp.Paged(), comp.KVShape().Block, model.PagedBlock)
	}
	comp.paged = ov.ErrNoPagedAttention // as without the extension
	if p := comp.SharedStepPenalty(); pagedPenalty <= 0 || pagedPenalty >= p {
		t.Errorf("SharedStepPenalty: paged %v, else %v; want a positive estimate below the other", pagedPenalty, p)
	}
	limit := int(StaticCacheMax / comp.KVShape().TokenBytes()) // the largest static capacity
	if comp.AttentionFor(limit) != model.AttentionStatic || comp.AttentionFor(limit+1) != model.AttentionBounded {
		t.Fatalf("AttentionFor(%d), (%d) = %s, %s: want static, bounded", limit, limit+1, comp.AttentionFor(limit), comp.AttentionFor(limit+1))
	}
	if got := comp.withAttention(model.GraphSpec{Capacity: limit + 1, Chunk: 1}).Attention; got != model.AttentionBounded {
		t.Errorf("a graph of capacity %d gets %s, want bounded", limit+1, got)
	}
	spec := func(c int) model.GraphSpec { return model.GraphSpec{Capacity: c, Chunk: 1} }
	if got, want := comp.DescribeAttention(spec(limit/2), spec(limit), spec(2*limit)), fmt.Sprintf("static %d-%d, bounded %d", limit/2, limit, 2*limit); got != want {
		t.Errorf("DescribeAttention = %q, want %q", got, want)
	}
	if got := comp.DescribeAttention(); got != "auto" {
		t.Errorf("DescribeAttention() = %q, want auto", got)
	}
	if got := comp.DescribeAttention(spec(256), spec(512)); got != "static" {
		t.Errorf("DescribeAttention(256, 512) = %q, want static", got)
	}
	_, static := openOVWith(t, "tiny", "F32", model.AttentionStatic)
	shared := model.GraphSpec{Capacity: limit / 2, Chunk: 8, Shared: true}
	if got, want := comp.DescribeAttention(shared, spec(limit)), fmt.Sprintf("bounded %d, static %d", limit/2, limit); got != want {
		t.Errorf("a shared first rung: DescribeAttention = %q, want %q", got, want)
	}
	if got := static.DescribeAttention(spec(limit/2), spec(2*limit)); got != "static" {
		t.Errorf("--attention static: DescribeAttention = %q, want static", got)
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

// TestSharedGraphAgrees runs the same prompt through a shared graph (1 to 8
// tokens per call: prompt chunks of 8 and a last one of 4, then decode
// steps of 1) and through static prefill and decode graphs: identical
// greedy tokens, every logits row in agreement, one compile instead of two.
func TestSharedGraphAgrees(t *testing.T) {
	run := func(a model.Attention, mode runtime.PrefillMode) *runtime.GenerateResult {
		ck, comp := openOVWith(t, "tiny", "F32", a)
		res, err := runtime.Generate(context.Background(), comp, comp.KVShape(), runtime.GenerateConfig{
			Capacity: 200, PrefillChunk: 8, Prefill: mode, Prompt: runtime.SeededTokens(9, 60, ck.Config.VocabSize), MaxNewTokens: 140, KeepLogits: true})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	shared, static := run(model.AttentionAuto, runtime.PrefillShared), run(model.AttentionStatic, runtime.PrefillGraph)
	if shared.PrefillUsed != runtime.PrefillUsedShared {
		t.Errorf("prefill used %q, want %q", shared.PrefillUsed, runtime.PrefillUsedShared)
	}
	if len(shared.Tokens) != 140 || !slices.Equal(shared.Tokens, static.Tokens) {
		t.Fatalf("tokens differ:\nshared %v\nstatic %v", shared.Tokens, static.Tokens)
	}
	for i := range static.Logits {
		checkRow(t, i, shared.Logits[i], static.Logits[i])
	}
}
