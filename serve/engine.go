// Package serve is ovrun's OpenAI-compatible HTTP server: /v1/completions
// and /v1/chat/completions (streamed as server-sent events or not),
// /v1/models, /healthz and Prometheus /metrics, with admission control (a
// bounded number of concurrent sequences and a bounded queue), per-request
// deadlines and cancellation when a client goes away. It handles text
// (tokenizing, the chat template, stop sequences); an Engine decodes token
// ids.
//
// Sampling follows the OpenAI API where it names a field and llama.cpp's
// server where it does not: temperature defaults to 1 and top_p to 1
// (no nucleus cut) when a request leaves them out; top_k, which OpenAI
// does not have, defaults to engine.DefaultTopK (40, llama.cpp's server
// default), and a top_k of 0 or less keeps every token, as in llama.cpp.
// temperature 0 is greedy.
package serve

import "github.com/ovtoolkit/ovrun/engine"

// Engine decodes the server's requests: one Generate per request,
// concurrently (up to MaxSeqs at once). The server builds each
// engine.Request from the request's Options, with the tokenizer's
// end-of-generation tokens as IsEOG and an Emit that streams the text and
// returns false once a stop sequence matched.
type Engine = engine.Engine

// Options are one request's generation settings.
type Options struct {
	MaxTokens int
	engine.Sampling
	Stop []string // stop sequences (handled by the server, not the engine)
	// IgnoreEOS makes the end-of-generation tokens ordinary: the server
	// gives the engine no IsEOG, so only MaxTokens (or the largest
	// context) or a stop sequence ends the answer (ignore_eos).
	IgnoreEOS bool
}
