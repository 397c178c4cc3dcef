// Package serve is ovrun's OpenAI-compatible HTTP server: /v1/completions
// and /v1/chat/completions (streamed as server-sent events or not),
// /v1/models, /healthz and Prometheus /metrics, with admission control (a
// bounded number of concurrent sequences and a bounded queue), per-request
// deadlines and cancellation when a client goes away. It handles text
// (tokenizing, the chat template, stop sequences); an Engine decodes token
// ids on the ladder.
package serve

import (
	"context"
	"errors"
)

// Options are one request's generation settings.
type Options struct {
	MaxTokens   int
	Temperature float64 // 0: greedy
	TopP        float64
	Seed        uint64
	Seeded      bool     // Seed was given; otherwise the engine picks one
	Stop        []string // stop sequences (handled by the server, not the engine)
}

// Finish says why a generation ended.
type Finish struct {
	Reason string // "stop" (end-of-generation token or stop sequence) or "length"
	Tokens int    // tokens generated, an end-of-generation token included
}

// Engine decodes sequences of token ids. Implementations must be safe for
// concurrent calls of Generate (the server admits up to MaxSeqs at once).
type Engine interface {
	// Generate decodes after prompt until an end-of-generation token,
	// o.MaxTokens tokens, the largest context, or ctx ends. emit receives
	// each token as it is chosen; returning false ends the generation with
	// reason "stop" (the server matched a stop sequence).
	Generate(ctx context.Context, prompt []int64, o Options, emit func(id int64) bool) (Finish, error)
	// MaxContext is the number of tokens the largest rung holds.
	MaxContext() int
	// Ready reports whether the first rung is compiled.
	Ready() bool
}

// ErrPromptTooLong is returned (wrapped) for a prompt that leaves no room
// to generate in the largest rung; the server answers 400.
var ErrPromptTooLong = errors.New("prompt too long")
