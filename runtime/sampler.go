package runtime

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Decoding is how tokens are chosen and handed out, shared by Run and
// Generate.
type Decoding struct {
	// Sampler picks each token; nil is greedy.
	Sampler *Sampler
	// Stop reports an end-of-generation token: generation ends after it
	// (the token is kept, finish reason "stop"). Teacher-forced runs never
	// stop early. nil never stops.
	Stop func(tok int64) bool
	// OnToken receives every chosen token as soon as it is chosen, the
	// first one (from the prompt) included; for streaming text.
	OnToken func(tok int64)
}

// choose picks the token after logits, hands it to OnToken and reports
// whether it ends the generation.
func (d *Decoding) choose(logits []float32) (tok int64, stop bool) {
	tok = d.Sampler.Next(logits)
	if d.OnToken != nil {
		d.OnToken(tok)
	}
	return tok, d.Stop != nil && d.Stop(tok)
}

// Sampler picks the next token from logits: greedy (argmax) when
// Temperature is 0, otherwise top-k, then temperature softmax, then top-p
// (nucleus), then a draw from a seeded generator, in the order llama.cpp
// and Hugging Face apply them. A nil *Sampler is greedy.
type Sampler struct {
	Temperature float64 // 0: greedy
	TopK        int     // keep the K most likely tokens; 0: all
	TopP        float64 // keep the smallest set whose probability reaches P; 0 or 1: all

	rng  *rand.Rand
	idx  []int
	prob []float64
}

// NewSampler checks the settings and seeds the generator: the same seed and
// logits give the same tokens.
func NewSampler(temperature float64, topK int, topP float64, seed uint64) (*Sampler, error) {
	switch {
	case math.IsNaN(temperature) || temperature < 0 || temperature > 100:
		return nil, fmt.Errorf("temperature %v: want 0 (greedy) to 100", temperature)
	case topK < 0:
		return nil, fmt.Errorf("top-k %d: want 0 (all) or more", topK)
	case math.IsNaN(topP) || topP < 0 || topP > 1:
		return nil, fmt.Errorf("top-p %v: want 0 to 1", topP)
	}
	return &Sampler{Temperature: temperature, TopK: topK, TopP: topP,
		rng: rand.New(rand.NewPCG(seed, 0x73616d706c65))}, nil // "sample"
}

// Greedy reports whether s always takes the argmax.
func (s *Sampler) Greedy() bool { return s == nil || s.Temperature == 0 }

// Next picks a token id from one row of logits.
func (s *Sampler) Next(logits []float32) int64 {
	if s.Greedy() {
		return int64(Argmax(logits))
	}
	s.idx = s.idx[:0]
	for i := range logits {
		s.idx = append(s.idx, i)
	}
	// Most likely first; ties by id, so the order never depends on the sort.
	slices.SortFunc(s.idx, func(a, b int) int {
		switch {
		case logits[a] > logits[b]:
			return -1
		case logits[a] < logits[b]:
			return 1
		}
		return a - b
	})
	if s.TopK > 0 && s.TopK < len(s.idx) {
		s.idx = s.idx[:s.TopK]
	}
	// Softmax with temperature over the kept tokens, stable from the max.
	s.prob = s.prob[:0]
	maxL := float64(logits[s.idx[0]])
	var sum float64
	for _, i := range s.idx {
		p := math.Exp((float64(logits[i]) - maxL) / s.Temperature)
		s.prob = append(s.prob, p)
		sum += p
	}
	for i := range s.prob {
		s.prob[i] /= sum
	}
	if s.TopP > 0 && s.TopP < 1 {
		var cum float64
		for i, p := range s.prob {
			cum += p
			if cum >= s.TopP {
				s.idx, s.prob = s.idx[:i+1], s.prob[:i+1]
				break
			}
		}
		sum = cum
	} else {
		sum = 1
	}
	r := s.rng.Float64() * sum
	for i, p := range s.prob {
		if r < p {
			return int64(s.idx[i])
		}
		r -= p
	}
	return int64(s.idx[len(s.idx)-1])
}
