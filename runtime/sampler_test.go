package runtime

import (
	"math"
	"slices"
	"testing"
)

func TestNewSamplerRejectsAbsurdSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		temp float64
		k    int
		p    float64
	}{
		{"negative temperature", -0.1, 0, 0},
		{"NaN temperature", math.NaN(), 0, 0},
		{"huge temperature", 1e9, 0, 0},
		{"negative top-k", 1, -1, 0},
		{"top-p above 1", 1, 0, 1.5},
		{"NaN top-p", 1, 0, math.NaN()},
	} {
		if _, err := NewSampler(tc.temp, tc.k, tc.p, 1); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func TestGreedyAndTopOneAreArgmax(t *testing.T) {
	logits := []float32{0.1, 3, -2, 2.9, 3}
	var nilSampler *Sampler
	if got := nilSampler.Next(logits); got != 1 {
		t.Errorf("nil sampler picked %d, want the first maximum 1", got)
	}
	for _, temp := range []float64{0, 0.5, 5} {
		s, _ := NewSampler(temp, 1, 0, 7)
		for range 20 {
			if got := s.Next(logits); got != 1 {
				t.Fatalf("temperature %v top-k 1 picked %d, want 1", temp, got)
			}
		}
	}
}

// Draws follow softmax(logits/T) restricted by top-k and top-p, and the
// same seed gives the same draws.
func TestSamplerDistribution(t *testing.T) {
	logits := []float32{float32(math.Log(0.5)), float32(math.Log(0.3)), float32(math.Log(0.15)), float32(math.Log(0.05))}
	const n = 40000
	freq := func(temp float64, k int, p float64) []float64 {
		s, err := NewSampler(temp, k, p, 42)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float64, len(logits))
		for range n {
			out[s.Next(logits)] += 1.0 / n
		}
		return out
	}
	near := func(name string, got, want []float64) {
		t.Helper()
		for i := range want {
			if math.Abs(got[i]-want[i]) > 0.012 {
				t.Errorf("%s: frequencies %.3f, want %.3f", name, got, want)
				return
			}
		}
	}
	near("T=1", freq(1, 0, 0), []float64{0.5, 0.3, 0.15, 0.05})
	near("top-k 2", freq(1, 2, 0), []float64{0.625, 0.375, 0, 0})
	near("top-p 0.8", freq(1, 0, 0.8), []float64{0.625, 0.375, 0, 0})
	// T=0.5 squares the probabilities: .25, .09, .0225, .0025 over .365.
	near("T=0.5", freq(0.5, 0, 0), []float64{0.25 / 0.365, 0.09 / 0.365, 0.0225 / 0.365, 0.0025 / 0.365})

	draw := func() []int64 {
		s, _ := NewSampler(0.8, 40, 0.95, 9)
		var out []int64
		for range 50 {
			out = append(out, s.Next(logits))
		}
		return out
	}
	if !slices.Equal(draw(), draw()) {
		t.Error("the same seed gave different tokens")
	}
}

// A run ends after the first end-of-generation token, keeps it, and
// streams every prediction in order; a teacher-forced run never stops early.
func TestRunStopsAtEndOfGeneration(t *testing.T) {
	ladder := Ladder{32, 64, 128}
	base := RunConfig{Ladder: ladder, Policy: GrowOneAhead, Prompt: SeededTokens(1, 5, 97), DecodeTokens: 100, PrefillChunk: 16}
	full, err := fakeRun(t, newFakeCompiler(testShape, 97, nil), base)
	if err != nil {
		t.Fatal(err)
	}
	// Stop at the 40th prediction's token (the first time it appears).
	stopTok := full.Predictions[40]
	first := slices.Index(full.Predictions, stopTok)
	var streamed []int64
	cfg := base
	cfg.Decoding = Decoding{Stop: func(tok int64) bool { return tok == stopTok },
		OnToken: func(tok int64) { streamed = append(streamed, tok) }}
	s, err := fakeRun(t, newFakeCompiler(testShape, 97, nil), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.FinishReason != "stop" || len(s.Predictions) != first+1 || s.Predictions[first] != stopTok {
		t.Errorf("finish %q with %d predictions, want stop after %d ending in %d", s.FinishReason, len(s.Predictions), first+1, stopTok)
	}
	if !slices.Equal(streamed, s.Predictions) || !slices.Equal(s.Predictions, full.Predictions[:first+1]) {
		t.Errorf("streamed %v, predictions %v: want both the unstopped run's first %d", streamed, s.Predictions, first+1)
	}
	cfg.Forced = SeededTokens(2, 100, 97)
	if s, err := fakeRun(t, newFakeCompiler(testShape, 97, nil), cfg); err != nil || s.FinishReason != "length" {
		t.Errorf("teacher forced: finish %q (%v), want length", s.FinishReason, err)
	}
	// A stop token right after the prompt ends the run before any decode step.
	cfg = base
	cfg.Decoding = Decoding{Stop: func(tok int64) bool { return tok == full.Predictions[0] }}
	if s, err := fakeRun(t, newFakeCompiler(testShape, 97, nil), cfg); err != nil || s.FinishReason != "stop" || s.DecodedTokens != 0 {
		t.Errorf("stop after the prompt: finish %q after %d steps (%v), want stop after 0", s.FinishReason, s.DecodedTokens, err)
	}
}
