package ovexec

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// TestStaticBatchAgrees runs three sequences of different prompt lengths
// together through one static batched graph (B = 4), in batch slots 2, 0
// and 3 with slot 1 idle, the third joining late, prompts fed one token a
// step beside the others' decoding, over a cache whose unwritten slots
// hold finite garbage; and compares every logits row and the greedy
// tokens with the same sequence run alone through static graphs. Neither
// the batch nor another slot's cache changes a sequence's numbers. Then a
// sequence prefilled by a static prefill graph bound to its slot's part of
// the cache decodes on in the batch, as it would alone.
func TestStaticBatchAgrees(t *testing.T) {
	const capacity, decode, B = 64, 12, 4
	ck, comp := openOVWith(t, "tiny", "F32", model.AttentionStatic)
	prompts := [][]int64{
		runtime.SeededTokens(1, 5, ck.Config.VocabSize),
		runtime.SeededTokens(2, 17, ck.Config.VocabSize),
		runtime.SeededTokens(3, 30, ck.Config.VocabSize),
	}
	slots := []int32{2, 0, 3}
	const lateStep = 9 // the third sequence joins here
	alone := generateAlone(t, comp, capacity, decode, prompts)

	spec := model.GraphSpec{Capacity: capacity, Chunk: 1, Attention: model.AttentionStatic, Batch: B}
	exe, err := comp.Compile(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	be, ok := exe.(runtime.BatchExecutable)
	if !ok {
		t.Fatalf("%T is not a runtime.BatchExecutable", exe)
	}
	shape := comp.KVShape()
	if wrong, kv, err := runtime.AllocFullView(shape, capacity); err != nil {
		exe.Close()
		t.Fatal(err)
	} else {
		if err := be.Bind(kv); err == nil {
			t.Errorf("Bind took a cache of %d slots, want %d", capacity, B*capacity)
		}
		wrong.Free()
	}
	buf, kv, err := runtime.AllocFullView(shape, B*capacity)
	if err != nil {
		exe.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { exe.Close(); buf.Free() }) // the graph first: it has the cache bound
	garbage(kv, shape.ElemBytes)
	if err := be.Bind(kv); err != nil {
		t.Fatal(err)
	}

	type seq struct {
		tokens []int64 // prompt, then the chosen tokens
		fed    int     // tokens in its cache
		rows   [][]float32
		slot   int32
	}
	seqs := make([]*seq, len(prompts))
	for i, p := range prompts {
		seqs[i] = &seq{tokens: slices.Clone(p), slot: slots[i]}
	}
	for steps := 0; ; steps++ {
		step := &runtime.BatchStep{}
		var carried []*seq
		// Not in slot order: the rows come back in the step's order.
		for _, i := range []int{2, 0, 1} {
			s := seqs[i]
			if len(s.rows) >= len(alone[i].Logits) || (i == 2 && steps < lateStep) {
				continue
			}
			step.IDs = append(step.IDs, s.tokens[s.fed])
			step.Seqs = append(step.Seqs, runtime.BatchSeq{Tokens: 1, Past: s.fed, Blocks: []int32{s.slot}})
			carried = append(carried, s)
		}
		if len(carried) == 0 {
			break
		}
		rows, err := be.StepBatch(step)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != len(carried) {
			t.Fatalf("step %d: %d rows for %d sequences", steps, len(rows), len(carried))
		}
		for i, s := range carried {
			s.fed++
			if s.fed == len(s.tokens) { // its last token was in this step: a row to compare
				s.rows = append(s.rows, slices.Clone(rows[i]))
				s.tokens = append(s.tokens, int64(runtime.Argmax(rows[i])))
			}
		}
	}
	for i, s := range seqs {
		n := len(alone[i].Tokens)
		if got := s.tokens[len(prompts[i]) : len(prompts[i])+n]; !slices.Equal(got, alone[i].Tokens) {
			t.Errorf("sequence %d: batched tokens %v, alone %v", i, got, alone[i].Tokens)
		}
		if len(s.rows) != len(alone[i].Logits) {
			t.Fatalf("sequence %d: %d batched rows, %d alone", i, len(s.rows), len(alone[i].Logits))
		}
		for r := range alone[i].Logits {
			checkRow(t, 1000*i+r, s.rows[r], alone[i].Logits[r])
		}
	}

	// A slot's cache is a cache of its own (the capacity axis outermost):
	// a static prefill graph bound to slot 1's part of the buffer fills
	// it with a prompt in chunks, and the sequence then decodes in the
	// batch from there.
	pre, err := comp.Compile(context.Background(), model.GraphSpec{Capacity: capacity, Chunk: 8, Attention: model.AttentionStatic})
	if err != nil {
		t.Fatal(err)
	}
	defer pre.Close()
	if err := pre.Bind(slotView(kv, shape, 1, capacity)); err != nil {
		t.Fatal(err)
	}
	p, want := prompts[1], alone[1]
	var row []float32
	for at := 0; at < len(p); at += 8 {
		if row, err = pre.Step(p[at:min(at+8, len(p))], at); err != nil {
			t.Fatal(err)
		}
	}
	checkRow(t, 3000, row, want.Logits[0])
	next := int64(runtime.Argmax(row))
	for r := 1; r < len(want.Logits); r++ {
		rows, err := be.StepBatch(&runtime.BatchStep{IDs: []int64{next}, Seqs: []runtime.BatchSeq{{Tokens: 1, Past: len(p) + r - 1, Blocks: []int32{1}}}})
		if err != nil {
			t.Fatal(err)
		}
		checkRow(t, 3000+r, rows[0], want.Logits[r])
		next = int64(runtime.Argmax(rows[0]))
	}

	// A step the graph cannot take is an error naming it, not a write.
	one := func(tokens, past int, slot ...int32) runtime.BatchSeq {
		return runtime.BatchSeq{Tokens: tokens, Past: past, Blocks: slot}
	}
	for _, tc := range []struct {
		name string
		step runtime.BatchStep
		is   error
	}{
		{name: "slot out of range", step: runtime.BatchStep{IDs: []int64{1}, Seqs: []runtime.BatchSeq{one(1, 0, B)}}},
		{name: "negative slot", step: runtime.BatchStep{IDs: []int64{1}, Seqs: []runtime.BatchSeq{one(1, 0, -1)}}},
		{name: "no slot", step: runtime.BatchStep{IDs: []int64{1}, Seqs: []runtime.BatchSeq{one(1, 0)}}},
		{name: "two sequences in one slot", step: runtime.BatchStep{IDs: []int64{1, 2}, Seqs: []runtime.BatchSeq{one(1, 0, 1), one(1, 3, 1)}}},
		{name: "two tokens", step: runtime.BatchStep{IDs: []int64{1}, Seqs: []runtime.BatchSeq{one(2, 0, 1)}}},
		{name: "past the capacity", step: runtime.BatchStep{IDs: []int64{1}, Seqs: []runtime.BatchSeq{one(1, capacity, 1)}}, is: runtime.ErrCapacity},
		{name: "ids and sequences differ", step: runtime.BatchStep{IDs: []int64{1, 2}, Seqs: []runtime.BatchSeq{one(1, 0, 1)}}},
		{name: "too many sequences", step: runtime.BatchStep{IDs: make([]int64, B+1), Seqs: []runtime.BatchSeq{
			one(1, 0, 0), one(1, 0, 1), one(1, 0, 2), one(1, 0, 3), one(1, 0, 0)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := be.StepBatch(&tc.step)
			switch {
			case err == nil:
				t.Fatal("no error")
			case tc.is != nil && !errors.Is(err, tc.is):
				t.Fatalf("%v, want %v", err, tc.is)
			}
			t.Log(err)
		})
	}
	// Step runs the sequence of slot 0.
	if row, err := be.Step([]int64{1}, 0); err != nil || len(row) != ck.Config.VocabSize {
		t.Errorf("Step: %d logits, %v", len(row), err)
	}
}

// slotView is batch slot b's cache in kv, the slots b*C..b*C+C-1 of a
// static batched graph's cache: a cache of capacity C for any graph.
func slotView(kv *runtime.KV, shape runtime.KVShape, b, C int) *runtime.KV {
	n := shape.LayerBytes(C)
	v := &runtime.KV{Capacity: C}
	for l := range kv.K {
		v.K = append(v.K, kv.K[l][b*n:(b+1)*n:(b+1)*n])
		v.V = append(v.V, kv.V[l][b*n:(b+1)*n:(b+1)*n])
	}
	return v
}

// garbage fills every slot of kv with finite values in [-1, 1]: what a
// slot holds before its sequence writes it (another sequence's rows) must
// not reach the result.
func garbage(kv *runtime.KV, elemBytes int) {
	r := rand.New(rand.NewPCG(11, 11))
	for l := range kv.K {
		for _, mem := range [][]byte{kv.K[l], kv.V[l]} {
			switch elemBytes {
			case 4:
				for i := 0; i+4 <= len(mem); i += 4 {
					binary.LittleEndian.PutUint32(mem[i:], math.Float32bits(float32(2*r.Float64()-1)))
				}
			case 2: // bf16 (the top half of an f32), finite as f16 too
				for i := 0; i+2 <= len(mem); i += 2 {
					binary.LittleEndian.PutUint16(mem[i:], uint16(math.Float32bits(float32(2*r.Float64()-1))>>16))
				}
			}
		}
	}
}

// BenchmarkStaticBatchDecode times one decode step of B sequences (each
// 128 tokens in) through SmolLM2's static batched graph at capacity 512,
// at the default precision: ns/op is a step, tok/s the step's tokens over
// its time. Each B is a graph of its own.
//
//	go test ./runtime/ovexec -run '^$' -bench StaticBatchDecode -benchtime 40x
func BenchmarkStaticBatchDecode(b *testing.B) {
	comp := openSmolLM2(b)
	const capacity, past = 512, 128
	for _, B := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("B=%d", B), func(b *testing.B) {
			exe, err := comp.Compile(context.Background(), model.GraphSpec{Capacity: capacity, Chunk: 1, Attention: model.AttentionStatic, Batch: B})
			if err != nil {
				b.Fatal(err)
			}
			be := exe.(runtime.BatchExecutable)
			buf, kv, err := runtime.AllocFullView(comp.KVShape(), B*capacity)
			if err != nil {
				exe.Close()
				b.Fatal(err)
			}
			defer func() { exe.Close(); buf.Free() }() // the graph first: it has the cache bound
			if err := be.Bind(kv); err != nil {
				b.Fatal(err)
			}
			step := &runtime.BatchStep{}
			for i := range B {
				step.IDs = append(step.IDs, int64(100+i))
				step.Seqs = append(step.Seqs, runtime.BatchSeq{Tokens: 1, Past: past, Blocks: []int32{int32(i)}})
			}
			for b.Loop() {
				if _, err := be.StepBatch(step); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(B*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
