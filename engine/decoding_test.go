package engine

import (
	"context"
	"slices"
	"testing"

	"github.com/ovtoolkit/ovrun/runtime"
)

// generate runs r through runtime.Generate on the fake with Decoding's
// choice, as ovrun generate does, and returns what Emit saw.
func generate(t *testing.T, r Request, capacity int) (*runtime.GenerateResult, Finish, []int64) {
	t.Helper()
	var emitted []int64
	emit := r.Emit
	r.Emit = func(id int64) bool {
		emitted = append(emitted, id)
		return emit == nil || emit(id)
	}
	dec, tally, err := Decoding(r)
	if err != nil {
		t.Fatal(err)
	}
	res, err := runtime.Generate(context.Background(), newSeqCompiler(), seqShape, runtime.GenerateConfig{
		Capacity: capacity, PrefillChunk: 8, Prompt: r.Prompt, MaxNewTokens: r.MaxTokens, Decoding: dec})
	if err != nil {
		t.Fatal(err)
	}
	if tally.Tokens() != len(res.Tokens) {
		t.Errorf("tally counted %d tokens, the runtime made %d", tally.Tokens(), len(res.Tokens))
	}
	return res, tally.Finish(), emitted
}

// firstNew is the index of the first token of ids, from index 2 on,
// that does not occur before it: an end-of-generation token that stops
// exactly there.
func firstNew(t *testing.T, ids []int64) int {
	t.Helper()
	for k := 2; k < len(ids); k++ {
		if !slices.Contains(ids[:k], ids[k]) {
			return k
		}
	}
	t.Fatalf("no token of %v is new after index 2", ids)
	return 0
}

func TestDecodingStopsAndCounts(t *testing.T) {
	noLeaks(t)
	prompt := runtime.SeededTokens(3, 6, seqVocab)
	greedy, _, _ := generate(t, Request{Prompt: prompt, MaxTokens: 40}, 64)
	eogAt := firstNew(t, greedy.Tokens)
	eog := greedy.Tokens[eogAt]
	for _, tc := range []struct {
		name       string
		r          Request
		wantTokens []int64 // what the runtime generates and Emit sees
		wantReason string  // the runtime's and the Tally's
	}{
		{name: "max tokens", r: Request{MaxTokens: 12}, wantTokens: greedy.Tokens[:12], wantReason: ReasonLength},
		{name: "one token", r: Request{MaxTokens: 1}, wantTokens: greedy.Tokens[:1], wantReason: ReasonLength},
		{name: "end of generation", r: Request{MaxTokens: 40, IsEOG: func(id int64) bool { return id == eog }},
			wantTokens: greedy.Tokens[:eogAt+1], wantReason: ReasonStop},
		{name: "end of generation at max tokens", r: Request{MaxTokens: eogAt + 1, IsEOG: func(id int64) bool { return id == eog }},
			wantTokens: greedy.Tokens[:eogAt+1], wantReason: ReasonStop},
		{name: "emit refuses the fourth", r: Request{MaxTokens: 40, Emit: func() func(int64) bool {
			n := 0
			return func(int64) bool { n++; return n < 4 }
		}()}, wantTokens: greedy.Tokens[:4], wantReason: ReasonStop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.r.Prompt = prompt
			res, fin, emitted := generate(t, tc.r, 64)
			if !slices.Equal(res.Tokens, tc.wantTokens) || !slices.Equal(emitted, tc.wantTokens) {
				t.Errorf("generated %v, emitted %v; want %v", res.Tokens, emitted, tc.wantTokens)
			}
			if res.FinishReason != tc.wantReason || fin.Reason != tc.wantReason || fin.Tokens != len(tc.wantTokens) {
				t.Errorf("runtime finish %q, tally %+v; want %q after %d tokens", res.FinishReason, fin, tc.wantReason, len(tc.wantTokens))
			}
		})
	}
}

// TestDecodingSamples checks that Decoding samples with Sampling's
// defaults filled in: the same tokens as a runtime sampler made with
// DefaultTopK and DefaultTopP and the same seed, which differ from those
// of a sampler that keeps every token.
func TestDecodingSamples(t *testing.T) {
	noLeaks(t)
	prompt := runtime.SeededTokens(5, 6, seqVocab)
	ref := func(k int, p float64) []int64 {
		s, err := runtime.NewSampler(0.8, k, p, 11)
		if err != nil {
			t.Fatal(err)
		}
		res, err := runtime.Generate(context.Background(), newSeqCompiler(), seqShape, runtime.GenerateConfig{
			Capacity: 64, PrefillChunk: 8, Prompt: prompt, MaxNewTokens: 50, Decoding: runtime.Decoding{Sampler: s}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Tokens
	}
	want, all := ref(DefaultTopK, DefaultTopP), ref(0, 1)
	if slices.Equal(want, all) {
		t.Fatal("the fake's logits do not tell the default top-k and top-p from none")
	}
	for _, tc := range []struct {
		name string
		s    Sampling
		want []int64
	}{
		{"defaults", Sampling{Temperature: 0.8, Seed: 11, Seeded: true}, want},
		{"named defaults", Sampling{Temperature: 0.8, TopK: DefaultTopK, TopP: DefaultTopP, Seed: 11, Seeded: true}, want},
		{"all tokens", Sampling{Temperature: 0.8, TopK: -1, TopP: 1, Seed: 11, Seeded: true}, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, _, _ := generate(t, Request{Prompt: prompt, MaxTokens: 50, Sampling: tc.s}, 64)
			if !slices.Equal(res.Tokens, tc.want) {
				t.Errorf("sampled %v, want %v", res.Tokens, tc.want)
			}
		})
	}
}

func TestDecodingRefusesBadSampling(t *testing.T) {
	for _, s := range []Sampling{
		{Temperature: 1, TopK: -2},
		{Temperature: 1, TopP: 1.5},
		{Temperature: -1},
	} {
		if _, _, err := Decoding(Request{Prompt: []int64{1}, MaxTokens: 1, Sampling: s}); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
	dec, _, err := Decoding(Request{Prompt: []int64{1}, MaxTokens: 1})
	if err != nil || dec.Sampler != nil {
		t.Errorf("zero Sampling: sampler %v, error %v; want greedy (nil)", dec.Sampler, err)
	}
}

func TestRequestSteps(t *testing.T) {
	for _, tc := range []struct {
		name            string
		maxTokens, room int
		want            int
	}{
		{"max tokens less than the room", 10, 100, 9},
		{"one token", 1, 100, 0},
		{"room less than max tokens", 100, 10, 9},
		{"room for one", 100, 1, 0},
		{"equal", 7, 7, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Request{MaxTokens: tc.maxTokens}
			if got := r.Steps(tc.room); got != tc.want {
				t.Errorf("Steps(%d) with MaxTokens %d = %d, want %d", tc.room, tc.maxTokens, got, tc.want)
			}
		})
	}
}
