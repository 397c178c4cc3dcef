package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ovtoolkit/ovrun/model"
)

// GenerateConfig is one generation on a single static graph.
type GenerateConfig struct {
	Capacity     int
	PrefillChunk int // tokens per prefill call; 0 feeds the prompt token by token through the decode graph
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
	PrefillS float64
	DecodeS  float64 // infer time of decode steps
	Steps    int     // decode infer calls
	// FinishReason is "length" (MaxNewTokens made) or "stop" (an
	// end-of-generation token, kept as the last of Tokens).
	FinishReason string
}

// DecodeTokensPerS is generated tokens after the first per second of decode.
func (r *GenerateResult) DecodeTokensPerS() float64 {
	if r.DecodeS <= 0 {
		return 0
	}
	return float64(r.Steps) / r.DecodeS
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
	res := &GenerateResult{}
	t0 := time.Now()
	dec, err := comp.Compile(ctx, model.GraphSpec{Capacity: cfg.Capacity, Chunk: 1})
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	pre := dec
	if cfg.PrefillChunk > 1 {
		p, err := comp.Compile(ctx, model.GraphSpec{Capacity: cfg.Capacity, Chunk: cfg.PrefillChunk})
		if err != nil {
			return nil, err
		}
		defer p.Close()
		pre = p
	}
	res.CompileS = time.Since(t0).Seconds()

	buf, kv, err := AllocFullView(shape, cfg.Capacity)
	if err != nil {
		return nil, err
	}
	defer buf.Free()
	if err := pre.Bind(kv); err != nil {
		return nil, err
	}
	t1 := time.Now()
	logits, err := Prefill(pre, cfg.Prompt)
	if err != nil {
		return nil, err
	}
	res.PrefillS = time.Since(t1).Seconds()
	if err := checkFinite(comp, logits, "after the prompt"); err != nil {
		return res, err
	}
	if err := dec.Bind(kv); err != nil {
		return nil, err
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
		res.DecodeS += time.Since(t).Seconds()
		res.Steps++
		if err != nil {
			return res, err
		}
		if err := checkFinite(comp, logits, fmt.Sprintf("at decode step %d", res.Steps)); err != nil {
			return res, err
		}
	}
	return res, nil
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
