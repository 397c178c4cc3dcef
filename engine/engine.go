// Package engine owns generation: it schedules sequences onto compiled
// graphs, chooses their tokens (sampling) and stops them (end of
// generation, max tokens, the caller, the context). Two engines implement
// Engine:
//
//   - Batched (batch.go): continuous batching on paged graphs. One
//     inference per step carries the next token of every active sequence
//     and prefill chunks of newly admitted ones, under a per-step token
//     budget; every sequence has its own block table in one shared KV block
//     pool, and prompts that share leading full blocks share their KV
//     (prefix cache).
//   - Sequential (sequential.go): one runtime.Sequence per request on a
//     shared runtime.CompiledLadder, each with its own KV store, under any
//     ladder policy (ovrun run, chat, and serve where paged graphs are not
//     available).
//
// serve, chat and generate are thin callers: they turn text into token
// ids and ids back into text. See docs/design.md §9.
package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ovtoolkit/ovrun/runtime"
)

// Engine decodes requests of token ids. Generate is safe for concurrent
// use: a server calls it once per request.
type Engine interface {
	// Generate decodes after r.Prompt until an end-of-generation token,
	// r.MaxTokens tokens, the largest context, r.Emit returning false, or
	// ctx ending (then it returns ctx's error, wrapped).
	Generate(ctx context.Context, r Request) (Finish, error)
	// MaxContext is the number of tokens (prompt and answer) one sequence
	// may hold: the largest rung.
	MaxContext() int
	// Ready reports whether the engine can decode without compiling its
	// first graph.
	Ready() bool
}

// Awaiter is an engine that can say, before a request takes a sequence
// slot, whether the graph its prompt starts on is compiled, and wait for it
// in the server's queue instead of in a slot. A server that finds its
// engine implements it calls Await before admitting a request.
type Awaiter interface {
	// Await returns at once (waited false) when the graph a prompt of n
	// tokens starts on is ready; otherwise it launches its compile unless
	// one runs, calls expect with the predicted seconds until it is ready
	// (-1: unknown), and waits for it or ctx. An error from expect is
	// returned at once; the compile goes on.
	Await(ctx context.Context, n int, expect func(seconds float64) error) (waited bool, err error)
}

// RungWait is a request's wait before admission for the graph its prompt
// starts on, as the server measured it (Awaiter); it goes into the
// request's trace.
type RungWait struct {
	Start     time.Time
	Wait      time.Duration
	ExpectedS float64 // -1: unknown
}

// Request is one generation.
type Request struct {
	Prompt    []int64 // at least one token
	MaxTokens int     // tokens to generate at most, at least 1
	Sampling  Sampling
	// IsEOG reports an end-of-generation token: the generation ends after
	// it (the token is emitted and counted, reason "stop"). nil: never.
	IsEOG func(id int64) bool
	// Emit receives each token as soon as it is chosen, the first one
	// (predicted from the prompt) included. Returning false ends the
	// generation with reason "stop" (a stop sequence matched). nil: all
	// are kept. It runs on the engine's goroutine: it must not block for
	// long (a batched engine's other sequences wait for it).
	Emit func(id int64) bool
	// RungWait, when set, is the request's wait for its first graph
	// before it was admitted.
	RungWait *RungWait
}

// Finish says how a generation ended.
type Finish struct {
	Reason string // ReasonStop or ReasonLength
	Tokens int    // tokens generated, an end-of-generation token included
	// Prompt is the prompt's tokens; Cached those of them whose KV came
	// from the prefix cache instead of being computed.
	Prompt, Cached int
	// TTFT is the time from Generate's call to the first token;
	// Queued the part of it spent waiting for a sequence slot.
	TTFT, Queued time.Duration
}

// Finish reasons, as the OpenAI API names them.
const (
	ReasonStop   = "stop"   // an end-of-generation token, or Emit said so
	ReasonLength = "length" // MaxTokens, or the largest context
)

// ErrPromptTooLong is returned (wrapped) for a prompt that leaves no room
// to generate in the largest context; a server answers 400.
var ErrPromptTooLong = errors.New("prompt too long")

// The sampling defaults every caller shares (llama.cpp's): a request that
// samples (Temperature > 0) and names no top-k or top-p gets these.
const (
	DefaultTopK = 40
	DefaultTopP = 0.95
)

// Sampling is how a request chooses its tokens. The zero value is greedy.
type Sampling struct {
	Temperature float64 // 0: greedy (argmax)
	// TopK keeps the K most likely tokens: 0 means DefaultTopK, -1 all.
	TopK int
	// TopP keeps the smallest set of tokens whose probability reaches P:
	// 0 means DefaultTopP, 1 all.
	TopP   float64
	Seed   uint64
	Seeded bool // Seed was given; otherwise the engine seeds from the clock
}

// Sampler is the runtime.Sampler of s (nil: greedy), its defaults filled
// in: the one place they are applied.
func (s Sampling) Sampler() (*runtime.Sampler, error) {
	if s.Temperature == 0 {
		return nil, nil
	}
	k, p := s.TopK, s.TopP
	switch {
	case k == 0:
		k = DefaultTopK
	case k == -1:
		k = 0
	case k < -1:
		return nil, fmt.Errorf("top-k %d: want -1 (all), 0 (default %d) or more", k, DefaultTopK)
	}
	if p == 0 {
		p = DefaultTopP
	}
	if math.IsNaN(p) || p < 0 || p > 1 {
		return nil, fmt.Errorf("top-p %v: want 0 (default %v) to 1", p, DefaultTopP)
	}
	seed := s.Seed
	if !s.Seeded {
		seed = uint64(time.Now().UnixNano())
	}
	return runtime.NewSampler(s.Temperature, k, p, seed)
}

// check refuses a request no engine can run.
func (r *Request) check(maxContext int) error {
	switch {
	case len(r.Prompt) == 0:
		return errors.New("the prompt has no tokens")
	case r.MaxTokens < 1:
		return fmt.Errorf("max tokens %d: want at least 1", r.MaxTokens)
	case len(r.Prompt) >= maxContext:
		return fmt.Errorf("%w: %d tokens, the largest context holds %d", ErrPromptTooLong, len(r.Prompt), maxContext)
	}
	return nil
}
