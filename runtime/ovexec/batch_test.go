package ovexec

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// TestBatchedGraphAgrees runs three sequences together through one batched
// paged graph, with block tables scattered over a shared pool, prompts in
// chunks that mix with the others' decode steps, and compares every logits
// row with the same sequence run alone through a paged graph: the batch
// changes no sequence's numbers.
func TestBatchedGraphAgrees(t *testing.T) {
	const capacity, decode = 200, 24
	ck, comp := openOVWith(t, "tiny", "F32", model.AttentionPaged)
	prompts := [][]int64{
		runtime.SeededTokens(1, 5, ck.Config.VocabSize),
		runtime.SeededTokens(2, 40, ck.Config.VocabSize),
		runtime.SeededTokens(3, 70, ck.Config.VocabSize), // past two blocks, chunked over four steps
	}
	alone := generateAlone(t, comp, capacity, decode, prompts)

	exe, err := comp.Compile(context.Background(), model.GraphSpec{Capacity: capacity, Chunk: 32, Attention: model.AttentionPaged, Shared: true, Batch: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exe.Close() })
	be, ok := exe.(runtime.BatchExecutable)
	if !ok {
		t.Fatalf("%T is not a runtime.BatchExecutable", exe)
	}
	shape := comp.KVShape()
	perSeq := capacity/shape.Block + 1
	pool := len(prompts) * perSeq
	buf, kv, err := runtime.AllocFullView(shape, pool*shape.Block)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { buf.Free() })
	if err := be.Bind(kv); err != nil {
		t.Fatal(err)
	}
	// Scatter the pool's blocks over the sequences.
	order := rand.New(rand.NewPCG(7, 7)).Perm(pool)
	type seq struct {
		tokens []int64 // prompt, then the chosen tokens
		fed    int     // tokens in the pool
		rows   [][]float32
		blocks []int32
	}
	seqs := make([]*seq, len(prompts))
	for i, p := range prompts {
		s := &seq{tokens: slices.Clone(p)}
		for _, b := range order[i*perSeq : (i+1)*perSeq] {
			s.blocks = append(s.blocks, int32(b))
		}
		seqs[i] = s
	}
	for steps := 0; ; steps++ {
		step := &runtime.BatchStep{}
		var carried []*seq
		budget := 32
		for _, s := range seqs {
			n := min(len(s.tokens)-s.fed, budget)
			if len(s.rows) > decode || n == 0 || (steps == 0 && s == seqs[2]) { // the last one joins a step late
				continue
			}
			step.IDs = append(step.IDs, s.tokens[s.fed:s.fed+n]...)
			step.Seqs = append(step.Seqs, runtime.BatchSeq{Tokens: n, Past: s.fed, Blocks: s.blocks})
			carried = append(carried, s)
			budget -= n
		}
		if len(carried) == 0 {
			break
		}
		rows, err := be.StepBatch(step)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range carried {
			s.fed += step.Seqs[i].Tokens
			if s.fed == len(s.tokens) { // its last token was in this step: a row to compare
				s.rows = append(s.rows, slices.Clone(rows[i]))
				s.tokens = append(s.tokens, int64(runtime.Argmax(rows[i])))
			}
		}
	}
	for i, s := range seqs {
		if got := s.tokens[len(prompts[i]) : len(prompts[i])+decode]; !slices.Equal(got, alone[i].Tokens) {
			t.Errorf("sequence %d: batched tokens %v, alone %v", i, got, alone[i].Tokens)
		}
		for r := range alone[i].Logits {
			checkRow(t, 1000*i+r, s.rows[r], alone[i].Logits[r])
		}
	}
	// A table naming a block outside the pool is an error, not a write.
	_, err = be.StepBatch(&runtime.BatchStep{IDs: []int64{1}, Seqs: []runtime.BatchSeq{{Tokens: 1, Blocks: []int32{int32(pool)}}}})
	if err == nil {
		t.Error("StepBatch took a block outside the pool")
	}
}

// generateAlone runs each prompt alone through comp's own graphs (decode
// tokens, logits kept): the reference a batch must match.
func generateAlone(t *testing.T, comp *Compiler, capacity, decode int, prompts [][]int64) []*runtime.GenerateResult {
	t.Helper()
	alone := make([]*runtime.GenerateResult, len(prompts))
	for i, p := range prompts {
		res, err := runtime.Generate(context.Background(), comp, comp.KVShape(), runtime.GenerateConfig{
			Capacity: capacity, PrefillChunk: 8, Prompt: p, MaxNewTokens: decode, KeepLogits: true})
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = res
	}
	return alone
}

// openSmolLM2 is a compiler of the real SmolLM2 GGUF at the CPU's default
// precision, closed (with its checkpoint) when tb ends.
func openSmolLM2(tb testing.TB) *Compiler {
	return openCompiler(tb, testenv.SmolLM2(tb), Options{Device: "CPU"})
}

// openCompiler is a compiler with opts of the checkpoint at path, closed
// (with its checkpoint) when tb ends.
func openCompiler(tb testing.TB, path string, opts Options) *Compiler {
	ck, err := model.Load(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ck.Close() })
	comp, err := NewCompiler(ck, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { comp.Close() })
	return comp
}

// BenchmarkBatchedDecode times one decode step of S sequences (each 128
// tokens in) through SmolLM2's batched graph, at the default precision:
// ns/op is a step, tok/s the step's tokens over its time.
//
//	go test ./runtime/ovexec -run '^$' -bench BatchedDecode -benchtime 40x
func BenchmarkBatchedDecode(b *testing.B) {
	comp := openSmolLM2(b)
	const maxS, past = 16, 128
	exe, err := comp.Compile(context.Background(), model.GraphSpec{Capacity: 1024, Chunk: 256, Attention: model.AttentionPaged, Shared: true, Batch: maxS})
	if err != nil {
		b.Fatal(err)
	}
	defer exe.Close()
	be := exe.(runtime.BatchExecutable)
	shape := comp.KVShape()
	perSeq := (past + 64) / shape.Block
	buf, kv, err := runtime.AllocFullView(shape, maxS*perSeq*shape.Block)
	if err != nil {
		b.Fatal(err)
	}
	defer buf.Free()
	if err := be.Bind(kv); err != nil {
		b.Fatal(err)
	}
	table := func(i int) []int32 {
		t := make([]int32, perSeq)
		for j := range t {
			t[j] = int32(i*perSeq + j)
		}
		return t
	}
	// The same step through a paged shared graph of one sequence.
	b.Run("alone", func(b *testing.B) {
		one, err := comp.Compile(context.Background(), model.GraphSpec{Capacity: 1024, Chunk: 256, Attention: model.AttentionPaged, Shared: true})
		if err != nil {
			b.Fatal(err)
		}
		defer one.Close()
		ob, okv, err := runtime.AllocFullView(shape, 1024)
		if err != nil {
			b.Fatal(err)
		}
		defer ob.Free()
		if err := one.Bind(okv); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := one.Step([]int64{100}, past); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
	})
	for _, S := range []int{1, 2, 4, 8, 16} {
		b.Run(fmt.Sprintf("S=%d", S), func(b *testing.B) {
			step := &runtime.BatchStep{}
			for i := range S {
				step.IDs = append(step.IDs, int64(100+i))
				step.Seqs = append(step.Seqs, runtime.BatchSeq{Tokens: 1, Past: past, Blocks: table(i)})
			}
			for b.Loop() {
				if _, err := be.StepBatch(step); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(S*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
