package engine

import (
	"time"

	"github.com/ovtoolkit/ovrun/runtime"
)

// Decoding is r's token choice for a runtime decode loop (a
// runtime.Sequence, runtime.Generate, runtime.Run): the sampler of
// r.Sampling, a stop after an end-of-generation token (r.IsEOG) or after
// the token r.Emit refuses, and every token handed to r.Emit. The Tally
// counts the tokens as the runtime chooses them and, once it has
// returned, says how the generation finished.
//
// r.MaxTokens is not a stop: the runtime's own limit ends the generation
// there (give a Sequence r.Steps(room) decode steps, Generate r.MaxTokens
// new tokens), so that its summary says "length" too. Decoding is the
// one place the stop rules live; Sequential and the commands that call
// runtime.Generate and runtime.Run use it.
func Decoding(r Request) (runtime.Decoding, *Tally, error) {
	s, err := r.Sampling.Sampler()
	if err != nil {
		return runtime.Decoding{}, nil, err
	}
	t := &Tally{start: time.Now(), emit: r.Emit, eog: r.IsEOG}
	return runtime.Decoding{Sampler: s, OnToken: t.token, Stop: t.stop}, t, nil
}

// Steps is the decode steps a runtime.Sequence takes for r with room
// tokens of context left after the prompt: the prompt's prediction is the
// first token, so r.MaxTokens tokens, or room where that is less, are
// made.
func (r *Request) Steps(room int) int { return min(r.MaxTokens, room) - 1 }

// Tally follows one generation's tokens through a runtime decode loop.
// It is used by the goroutine that runs the loop.
type Tally struct {
	start time.Time
	emit  func(int64) bool
	eog   func(int64) bool

	tokens  int
	ttft    time.Duration
	halted  bool // Emit refused a token
	lastEOG bool // the last token was an end-of-generation token
}

func (t *Tally) token(id int64) {
	if t.tokens == 0 {
		t.ttft = time.Since(t.start)
	}
	t.tokens++
	t.lastEOG = t.eog != nil && t.eog(id)
	if t.emit != nil && !t.emit(id) {
		t.halted = true
	}
}

func (t *Tally) stop(id int64) bool { return t.halted || (t.eog != nil && t.eog(id)) }

// Tokens is the number of tokens chosen so far.
func (t *Tally) Tokens() int { return t.tokens }

// Finish is how the generation finished, once the runtime has returned
// without error: "stop" when its last token ended it (an
// end-of-generation token, or Emit said so), "length" otherwise (the
// runtime's limit: MaxTokens, or the largest context). TTFT is counted
// from Decoding's call; Prompt and Cached are the caller's to fill.
func (t *Tally) Finish() Finish {
	f := Finish{Reason: ReasonLength, Tokens: t.tokens, TTFT: t.ttft}
	if t.halted || t.lastEOG {
		f.Reason = ReasonStop
	}
	return f
}
