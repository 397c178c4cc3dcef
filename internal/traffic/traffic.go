// Package traffic draws the requests of a load: when each arrives (a
// Poisson process, or all at once) and how long its prompt and answer
// are (drawn uniformly from a mix of lengths), from a seed. The planner
// (compilecost.SimulateServe, ovrun plan --serve) and the load test
// (serve.RunLoad, ovrun loadtest) draw from the same seed the same
// requests at the same offsets, so a prediction and a measurement can be
// compared request for request.
package traffic

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// Limits on a load, so that a mistyped flag is an error, not hours of
// simulation or a flood of requests.
const (
	MaxRequests = 100000
	MaxRate     = 1e6  // requests per second
	MaxMix      = 1024 // lengths in a mix
)

// Mix describes a load.
type Mix struct {
	// Rate is the mean arrival rate, requests per second, of a Poisson
	// process; 0 sends every request at once (offset 0).
	Rate float64
	// Requests is the number of requests.
	Requests int
	// Prompt and Answer are the lengths, in tokens, each request draws
	// its prompt and its answer (max_tokens) from, uniformly.
	Prompt, Answer []int
	// Seed seeds the draws.
	Seed uint64
}

// Request is one drawn request.
type Request struct {
	// AtS is its arrival, seconds from the start of the load.
	AtS float64 `json:"at_s"`
	// Prompt and Answer are its prompt length and max_tokens.
	Prompt int `json:"prompt_tokens"`
	Answer int `json:"answer_tokens"`
}

// ErrInvalid is wrapped by Validate's errors.
var ErrInvalid = errors.New("invalid traffic")

// Validate checks m: a finite, non-negative rate, 1..MaxRequests requests,
// non-empty mixes of positive lengths.
func (m Mix) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	switch {
	case math.IsNaN(m.Rate) || m.Rate < 0 || m.Rate > MaxRate:
		return bad("rate %v: want 0 (all at once) to %g requests per second", m.Rate, MaxRate)
	case m.Requests < 1 || m.Requests > MaxRequests:
		return bad("requests %d: want 1..%d", m.Requests, MaxRequests)
	}
	for _, l := range []struct {
		name string
		xs   []int
	}{{"prompt", m.Prompt}, {"answer", m.Answer}} {
		if len(l.xs) == 0 || len(l.xs) > MaxMix {
			return bad("%s lengths: %d given, want 1..%d", l.name, len(l.xs), MaxMix)
		}
		for _, x := range l.xs {
			if x < 1 {
				return bad("%s length %d: want at least 1 token", l.name, x)
			}
		}
	}
	return nil
}

// Draw returns m's requests in arrival order. The same Mix draws the same
// requests.
func Draw(m Mix) ([]Request, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(m.Seed, 0x7472616666696321)) // "traffic!"
	out := make([]Request, m.Requests)
	var t float64
	for i := range out {
		if m.Rate > 0 {
			t += rng.ExpFloat64() / m.Rate
		}
		out[i] = Request{AtS: t, Prompt: m.Prompt[rng.IntN(len(m.Prompt))], Answer: m.Answer[rng.IntN(len(m.Answer))]}
	}
	return out, nil
}

// Token ids of a drawn prompt: PromptIDs draws from [MinID, MaxID), a
// range of ordinary tokens in the vocabularies of the models ovrun serves
// (SmolLM2, Qwen2.5: tens of thousands of tokens), away from the special
// tokens at either end.
const (
	MinID = 1000
	MaxID = 5000
)

// PromptIDs returns the prompt of request i of a load seeded with seed:
// n token ids in [MinID, MaxID), the same for the same seed, i and n.
func PromptIDs(seed uint64, i, n int) []int64 {
	rng := rand.New(rand.NewPCG(seed, uint64(i)))
	ids := make([]int64, n)
	for k := range ids {
		ids[k] = MinID + rng.Int64N(MaxID-MinID)
	}
	return ids
}
