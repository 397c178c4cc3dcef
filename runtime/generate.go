package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/model"
)

// GenerateConfig is one generation on a single static graph.
type GenerateConfig struct {
	Capacity     int
	PrefillChunk int // tokens per prefill call; 0 feeds the prompt token by token through the decode graph
	// Prefill is how the prompt is processed: graph compiles the prefill
	// graph with the decode graph; decode feeds the prompt through the
	// decode graph; auto feeds it there until the measured step time says
	// compiling the prefill graph is faster for the rest (the ladder's
	// rule, with the decode graph's compile time as the estimate), or
	// where the ladder's rule would choose a shared graph, a shared graph
	// (or on a WeightSharer the prefill graph compiled beside the decode
	// graph). "" is graph when PrefillChunk > 1.
	Prefill      PrefillMode
	Prompt       []int64
	MaxNewTokens int
	KeepLogits   bool // keep every row of logits (for --dump-logits and tests)
	Decoding          // token choice, end-of-generation and streaming; greedy by default
}

// GenerateResult holds the tokens and timings of a generation.
type GenerateResult struct {
	Tokens   []int64     // generated tokens
	Logits   [][]float32 // row 0 after the prompt, row i after the i-th generated token (KeepLogits)
	CompileS float64     // compile of the decode graph and, when used, the prefill graph
	PrefillS float64     // prompt processing, compiles excluded
	// PrefillUsed is what the prompt went through (graph, decode,
	// decode+graph) and PrefillReason why.
	PrefillUsed, PrefillReason string
	// SharedStepPenalty is the estimate of a shared graph's slower steps
	// that prefill mode auto weighed against the prompt (0 where it
	// weighed none), as Summary's.
	SharedStepPenalty float64
	DecodeS           float64   // infer time of decode steps
	StepS             []float64 // each decode infer call's time, in order
	// FinishReason is "length" (MaxNewTokens made) or "stop" (an
	// end-of-generation token, kept as the last of Tokens).
	FinishReason string
}

// Steps is the number of decode infer calls.
func (r *GenerateResult) Steps() int { return len(r.StepS) }

// DecodeTokensPerS is generated tokens after the first per second of decode.
func (r *GenerateResult) DecodeTokensPerS() float64 {
	if r.DecodeS <= 0 {
		return 0
	}
	return float64(r.Steps()) / r.DecodeS
}

// Generate decodes (greedily unless cfg.Sampler says otherwise) with one decode graph of cfg.Capacity slots
// (and a prefill graph of the same capacity when PrefillChunk > 0). It
// generates MaxNewTokens tokens; the last one is not fed back, so the
// prompt plus MaxNewTokens-1 tokens must fit the capacity.
func Generate(ctx context.Context, comp Compiler, shape KVShape, cfg GenerateConfig) (*GenerateResult, error) {
	P, M := len(cfg.Prompt), cfg.MaxNewTokens
	switch {
	case P == 0:
		return nil, errors.New("the prompt is empty")
	case M < 1:
		return nil, fmt.Errorf("max new tokens must be at least 1, got %d", M)
	case P > cfg.Capacity:
		return nil, fmt.Errorf("%w: prompt of %d tokens is longer than capacity %d", ErrCapacity, P, cfg.Capacity)
	case P+M-1 > cfg.Capacity:
		return nil, fmt.Errorf("%w: prompt of %d tokens plus %d new tokens needs %d slots, capacity is %d", ErrCapacity, P, M, P+M-1, cfg.Capacity)
	}
	mode, err := resolvePrefill(cfg.Prefill, cfg.PrefillChunk)
	if err != nil {
		return nil, err
	}
	res := &GenerateResult{}
	beside := false // the prefill graph compiled beside the decode graph
	if mode == PrefillAuto {
		per := specStepTokens(comp, DecodeSpec(cfg.Capacity, PrefillDecode, cfg.PrefillChunk))
		why, shared, penalty := autoShared(comp, P, per, M-1, cfg.PrefillChunk)
		res.SharedStepPenalty = penalty
		switch {
		case shared && sharesWeights(comp):
			mode, beside = PrefillGraph, true
			res.PrefillReason = fmt.Sprintf("%s; the prefill graph (up to %d tokens per call) compiles beside the decode graph, whose weights it reads in the same memory", compilecost.SharedWhy(P, per, cfg.PrefillChunk, M-1, penalty), cfg.PrefillChunk)
		case shared:
			mode, res.PrefillReason = PrefillShared, why
		}
	}
	t0 := time.Now()
	var pre Executable
	defer func() {
		if pre != nil {
			pre.Close()
		}
	}()
	var aside <-chan compiled
	if beside {
		aside = compileAside(ctx, comp, model.GraphSpec{Capacity: cfg.Capacity, Chunk: cfg.PrefillChunk})
	}
	dec, err := comp.Compile(ctx, DecodeSpec(cfg.Capacity, mode, cfg.PrefillChunk))
	if aside != nil {
		r := <-aside
		pre, err = r.exe, errors.Join(err, r.err)
	}
	if err != nil {
		if dec != nil {
			dec.Close()
		}
		return nil, err
	}
	defer dec.Close()
	res.CompileS = time.Since(t0).Seconds()
	compilePrefill := func() (Executable, error) {
		t := time.Now()
		var err error
		pre, err = comp.Compile(ctx, model.GraphSpec{Capacity: cfg.Capacity, Chunk: cfg.PrefillChunk})
		res.CompileS += time.Since(t).Seconds()
		return pre, err
	}
	if mode == PrefillGraph && pre == nil {
		if _, err := compilePrefill(); err != nil {
			return nil, err
		}
	}

	// The cache is reserved, not committed: a page becomes resident when
	// a token's row is first written (a bounded graph reads no further;
	// unwritten pages read as the zero page), so memory follows the
	// live tokens rather than the capacity.
	buf, err := AllocKV(shape, cfg.Capacity, false)
	if err != nil {
		return nil, err
	}
	defer buf.Free()
	kv, err := buf.View(cfg.Capacity)
	if err != nil {
		return nil, err
	}
	if err := dec.Bind(kv); err != nil {
		return nil, err
	}
	var logits []float32
	switch mode {
	case PrefillGraph:
		if err := pre.Bind(kv); err != nil {
			return nil, err
		}
		t1 := time.Now()
		if logits, err = Prefill(pre, cfg.Prompt); err != nil {
			return nil, err
		}
		res.PrefillS = time.Since(t1).Seconds()
		res.PrefillUsed = PrefillUsedGraph
		if !beside {
			res.PrefillReason = fmt.Sprintf("prefill mode graph: the prefill graph (%d tokens per call) is compiled before the first token", cfg.PrefillChunk)
		}
		// The prompt was the prefill graph's one job: it goes now with its
		// buffers (SmolLM2's for a 512-token call: 40 MiB), not after the
		// answer; the logits were its memory.
		logits = slices.Clone(logits)
		err := pre.Close()
		if pre = nil; err != nil {
			return nil, err
		}
	case PrefillDecode, PrefillShared:
		t1 := time.Now()
		if logits, err = Prefill(dec, cfg.Prompt); err != nil {
			return nil, err
		}
		res.PrefillS = time.Since(t1).Seconds()
		switch {
		case mode == PrefillDecode:
			res.PrefillUsed, res.PrefillReason = PrefillUsedDecode, "the prompt goes through the decode graph"
		case cfg.Prefill == PrefillShared:
			res.PrefillUsed, res.PrefillReason = PrefillUsedShared, fmt.Sprintf("prefill mode shared: the prompt goes through the graph that decodes, up to %d tokens per call", cfg.PrefillChunk)
		default: // auto chose shared, and said why
			res.PrefillUsed = PrefillUsedShared
		}
	default:
		if logits, err = generatePrefillAuto(res, comp, dec, kv, cfg, compilePrefill); err != nil {
			return nil, err
		}
	}
	if err := dec.Bind(kv); err != nil {
		return nil, err
	}
	if err := checkFinite(comp, logits, "after the prompt"); err != nil {
		return res, err
	}
	for i := 0; ; i++ {
		if cfg.KeepLogits {
			res.Logits = append(res.Logits, append([]float32(nil), logits...))
		}
		next, stop := cfg.choose(logits)
		res.Tokens = append(res.Tokens, next)
		if stop {
			res.FinishReason = "stop"
			break
		}
		if len(res.Tokens) == M {
			res.FinishReason = "length"
			break
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		t := time.Now()
		logits, err = dec.Step([]int64{next}, P+i)
		d := time.Since(t).Seconds()
		res.DecodeS += d
		res.StepS = append(res.StepS, d)
		if err != nil {
			return res, err
		}
		if err := checkFinite(comp, logits, fmt.Sprintf("at decode step %d", res.Steps())); err != nil {
			return res, err
		}
	}
	return res, nil
}

// generatePrefillAuto feeds the prompt through dec a call at a time (one
// token, or StepTokens) and, when prefillGraphPays says so, compiles the
// prefill graph and runs the rest through it (the decode graph's compile
// time, res.CompileS so far, is the estimate of the prefill graph's:
// fromDecodeGraph). Compile time goes to res.CompileS, the rest to
// res.PrefillS.
func generatePrefillAuto(res *GenerateResult, comp Compiler, dec Executable, kv *KV, cfg GenerateConfig, compilePrefill func() (Executable, error)) ([]float32, error) {
	prompt := cfg.Prompt
	feed := fromDecodeGraph(dec, res.CompileS, model.GraphSpec{Capacity: cfg.Capacity, Chunk: cfg.PrefillChunk}, comp)
	feed.chunk, feed.per = cfg.PrefillChunk, StepTokens(dec)
	var logits []float32
	t1 := time.Now()
	for k := 0; k < len(prompt); k += feed.calls() {
		end := min(k+feed.calls(), len(prompt))
		t := time.Now()
		var err error
		if logits, err = promptStep(dec, prompt, k, end); err != nil {
			return nil, fmt.Errorf("prompt tokens %d..%d through the decode graph: %w", k, end-1, err)
		}
		why, pays := feed.fed(k, end, time.Since(t).Seconds(), len(prompt))
		if !pays {
			continue
		}
		res.PrefillS += time.Since(t1).Seconds()
		res.PrefillUsed, res.PrefillReason = PrefillUsedSwitch, why
		pre, err := compilePrefill()
		if err != nil {
			return nil, err
		}
		if err := pre.Bind(kv); err != nil {
			return nil, err
		}
		t2 := time.Now()
		logits, err = PrefillFrom(pre, prompt, end)
		res.PrefillS += time.Since(t2).Seconds()
		return logits, err
	}
	res.PrefillS = time.Since(t1).Seconds()
	res.PrefillUsed, res.PrefillReason = PrefillUsedDecode, feed.stayedReason(len(prompt))
	return logits, nil
}

// Prefill feeds the prompt through exe in chunks of its spec and returns the
// logits after the last prompt token.
func Prefill(exe Executable, prompt []int64) ([]float32, error) {
	return PrefillFrom(exe, prompt, 0)
}

// Argmax is the index of the largest value (the first on ties).
func Argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// compiled is one compile's outcome.
type compiled struct {
	exe Executable
	err error
}

// compileAside compiles spec in a goroutine of its own and sends the
// outcome once.
func compileAside(ctx context.Context, comp Compiler, spec model.GraphSpec) <-chan compiled {
	ch := make(chan compiled, 1)
	go func() {
		exe, err := comp.Compile(ctx, spec)
		ch <- compiled{exe, err}
	}()
	return ch
}
