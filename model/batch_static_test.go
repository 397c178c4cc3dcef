package model

import (
	"cmp"
	"fmt"
	"strings"
	"testing"
)

// TestStaticBatchShapes pins a static batched graph's I/O as an NPU needs
// it: every Parameter static (no "-1", no "1..N" interval), the tokens
// [1, B], the past K/V B caches back to back [B*C, Hkv, D], no
// logits_index, and the present rows [B, Hkv, D] and logits [B, V] as
// outputs.
func TestStaticBatchShapes(t *testing.T) {
	ck, w := boundWeights(t, "tiny")
	const C, B = 48, 4
	kvd := fmt.Sprintf("%d,%d", ck.Config.KVHeads(), ck.Config.HeadDim())
	for _, spec := range []GraphSpec{
		{Capacity: C, Chunk: 1, Attention: AttentionStatic, Batch: B},
		{Capacity: C, Chunk: 1, Batch: B, KVPrecision: "bf16"}, // "" attention is static
	} {
		t.Run(spec.Name()+"/kv-"+cmp.Or(spec.KVPrecision, "f32"), func(t *testing.T) {
			b, err := BuildIR(w, spec)
			if err != nil {
				t.Fatal(err)
			}
			net := parseIR(t, b)
			readsInPlace(t, b, spec)
			want := map[string]string{InputIDs: "1,4", PositionIDs: "1,4"}
			for i := range ck.Config.NumHiddenLayers {
				want[PastKey(i)], want[PastValue(i)] = fmt.Sprintf("%d,%s", B*C, kvd), fmt.Sprintf("%d,%s", B*C, kvd)
			}
			outs := map[string]string{OutputLogits: fmt.Sprintf("%d,%d", B, ck.Config.VocabSize)}
			for i := range ck.Config.NumHiddenLayers {
				outs[PresentKey(i)], outs[PresentValue(i)] = fmt.Sprintf("%d,%s", B, kvd), fmt.Sprintf("%d,%s", B, kvd)
			}
			params := 0
			for _, l := range net.Layers {
				for _, o := range l.Outputs {
					if w, ok := outs[o.Names]; ok {
						got := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(o.Dims)), ","), "[]")
						if got != w {
							t.Errorf("output %s is [%s], want [%s]", o.Names, got, w)
						}
						delete(outs, o.Names)
					}
				}
				if l.Type != "Parameter" {
					continue
				}
				params++
				if strings.Contains(l.Data.Shape, "-1") || strings.Contains(l.Data.Shape, "..") {
					t.Errorf("parameter %s has a dynamic shape %q", l.Name, l.Data.Shape)
				}
				w, ok := want[l.Name]
				if !ok {
					t.Errorf("unexpected parameter %s [%s]", l.Name, l.Data.Shape)
					continue
				}
				if l.Data.Shape != w {
					t.Errorf("parameter %s is [%s], want [%s]", l.Name, l.Data.Shape, w)
				}
			}
			if params != len(want) {
				t.Errorf("%d parameters, want %d", params, len(want))
			}
			for name := range outs {
				t.Errorf("no output %s", name)
			}
		})
	}
}

// TestStaticBatchSpecs checks which batched specs BuildIR takes and that
// every form of graph keeps a name of its own (names are file names and
// compile-worker arguments).
func TestStaticBatchSpecs(t *testing.T) {
	_, w := boundWeights(t, "tiny")
	for _, tc := range []struct {
		name string
		spec GraphSpec
		ok   bool
	}{
		{name: "static decode batch", spec: GraphSpec{Capacity: 32, Chunk: 1, Attention: AttentionStatic, Batch: 2}, ok: true},
		{name: "static chunk of 4", spec: GraphSpec{Capacity: 32, Chunk: 4, Attention: AttentionStatic, Batch: 2}},
		{name: "static shared", spec: GraphSpec{Capacity: 32, Chunk: 1, Attention: AttentionStatic, Shared: true, Batch: 2}},
		{name: "bounded batch", spec: GraphSpec{Capacity: 32, Chunk: 1, Attention: AttentionBounded, Batch: 2}},
		{name: "paged not shared", spec: GraphSpec{Capacity: 32, Chunk: 8, Attention: AttentionPaged, Batch: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := BuildIR(w, tc.spec)
			if tc.ok && err != nil {
				t.Fatal(err)
			}
			if !tc.ok && err == nil {
				t.Fatalf("BuildIR(%+v): no error", tc.spec)
			}
		})
	}
	names := map[string]GraphSpec{}
	for _, s := range []GraphSpec{
		{Capacity: 1024, Chunk: 1},
		{Capacity: 1024, Chunk: 1, Attention: AttentionStatic, Batch: 4},
		{Capacity: 1024, Chunk: 1, Attention: AttentionPaged, Shared: true, Batch: 4},
		{Capacity: 1024, Chunk: 1, Attention: AttentionPaged, Shared: true},
	} {
		if o, ok := names[s.Name()]; ok {
			t.Errorf("%+v and %+v are both named %s", o, s, s.Name())
		}
		names[s.Name()] = s
	}
	if got := (GraphSpec{Capacity: 1024, Chunk: 1, Attention: AttentionStatic, Batch: 4}).Name(); got != "batch-static-c1024-s4" {
		t.Errorf("name %q, want batch-static-c1024-s4", got)
	}
}

// readsInPlace checks that every past K/V input of a static batched graph
// is only reshaped (after one Convert when the cache is not f32) and read
// by MatMuls: a step copies no cache.
func readsInPlace(t *testing.T, ir []byte, spec GraphSpec) {
	t.Helper()
	net := parseIR(t, ir)
	typ, consumers := map[int]string{}, map[int][]int{}
	var pasts []int
	for _, l := range net.Layers {
		typ[l.ID] = l.Type
		if l.Type == "Parameter" && (strings.HasPrefix(l.Name, "past_key.") || strings.HasPrefix(l.Name, "past_value.")) {
			pasts = append(pasts, l.ID)
		}
	}
	for _, e := range net.Edges {
		consumers[e.From] = append(consumers[e.From], e.To)
	}
	if len(pasts) == 0 {
		t.Fatal("no past K/V inputs")
	}
	for _, id := range pasts {
		cs := consumers[id]
		if spec.KVPrecision == "bf16" {
			if len(cs) != 1 || typ[cs[0]] != "Convert" {
				t.Fatalf("past input %d is read by %v, want one Convert", id, cs)
			}
			cs = consumers[cs[0]]
		}
		for _, r := range cs {
			if typ[r] != "Reshape" {
				t.Errorf("past input %d -> %s, want a Reshape", id, typ[r])
				continue
			}
			for _, m := range consumers[r] {
				if typ[m] != "MatMul" {
					t.Errorf("past input %d -> Reshape -> %s, want a MatMul", id, typ[m])
				}
			}
		}
	}
}
