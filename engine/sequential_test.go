package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/runtime"
)

var seqLadder = runtime.Ladder{16, 32, 64}

// newSequential is a Sequential on a kept ladder of the fake, as ovrun
// serve and chat build it; the ladder is closed at the test's end.
func newSequential(t *testing.T, f *seqCompiler, p runtime.Policy, cfg SequentialConfig) *Sequential {
	t.Helper()
	l, err := runtime.NewCompiledLadder(context.Background(), f, runtime.LadderConfig{Ladder: seqLadder, Policy: p,
		Shape: seqShape, PrefillChunk: 8, KeepRungs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
		if n := f.open.Load(); n != 0 {
			t.Errorf("%d executables left open", n)
		}
		if n := runtime.MappedKVBytes(); n != 0 {
			t.Errorf("%d bytes of KV still mapped", n)
		}
	})
	return NewSequential(l, cfg)
}

// reference is what runtime.Run predicts for prompt on a ladder of its
// own: the independent reference of a sequence's tokens.
func reference(t *testing.T, p runtime.Policy, prompt []int64, s *runtime.Sampler) []int64 {
	t.Helper()
	sum, err := runtime.Run(context.Background(), newSeqCompiler(), seqShape, runtime.RunConfig{Ladder: seqLadder, Policy: p,
		Prompt: prompt, DecodeTokens: seqLadder.Max(), PrefillChunk: 8, Decoding: runtime.Decoding{Sampler: s}})
	if err != nil || sum.FinishReason != "capacity" {
		t.Fatalf("reference run: finish %q (%v)", sum.FinishReason, err)
	}
	return sum.Predictions
}

// collect returns r with an Emit that records every token (and then
// asks the one r had, if any).
func collect(r Request, into *[]int64) Request {
	emit := r.Emit
	r.Emit = func(id int64) bool {
		*into = append(*into, id)
		return emit == nil || emit(id)
	}
	return r
}

// TestSequentialGenerate decodes requests under every policy and checks
// the tokens against runtime.Run's and the exact stop of each rule: max
// tokens, the largest context (prompt and answer fill it), an
// end-of-generation token, Emit refusing a token.
func TestSequentialGenerate(t *testing.T) {
	noLeaks(t)
	prompt := runtime.SeededTokens(1, 5, seqVocab)
	for _, p := range runtime.Policies {
		t.Run(string(p), func(t *testing.T) {
			ref := reference(t, p, prompt, nil)
			eogAt := firstNew(t, ref[20:]) + 20 // past the first boundary
			eog := ref[eogAt]
			e := newSequential(t, newSeqCompiler(), p, SequentialConfig{})
			for _, tc := range []struct {
				name string
				r    Request
				want Finish // Reason and Tokens
			}{
				{name: "max tokens", r: Request{MaxTokens: 30}, want: Finish{Reason: ReasonLength, Tokens: 30}},
				{name: "one token", r: Request{MaxTokens: 1}, want: Finish{Reason: ReasonLength, Tokens: 1}},
				{name: "largest context", r: Request{MaxTokens: 1000}, want: Finish{Reason: ReasonLength, Tokens: seqLadder.Max() - len(prompt)}},
				{name: "end of generation", r: Request{MaxTokens: 1000, IsEOG: func(id int64) bool { return id == eog }},
					want: Finish{Reason: ReasonStop, Tokens: eogAt + 1}},
				{name: "emit refuses", r: Request{MaxTokens: 1000, Emit: func() func(int64) bool {
					n := 0
					return func(int64) bool { n++; return n < 25 }
				}()}, want: Finish{Reason: ReasonStop, Tokens: 25}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					var got []int64
					tc.r.Prompt = prompt
					fin, sum, err := e.GenerateSummary(context.Background(), collect(tc.r, &got), time.Time{})
					if err != nil {
						t.Fatal(err)
					}
					if fin.Reason != tc.want.Reason || fin.Tokens != tc.want.Tokens || fin.Prompt != len(prompt) {
						t.Errorf("finish %+v, want %s after %d tokens of a %d-token prompt", fin, tc.want.Reason, tc.want.Tokens, len(prompt))
					}
					if !slices.Equal(got, ref[:tc.want.Tokens]) {
						t.Errorf("emitted %v, want %v", got, ref[:tc.want.Tokens])
					}
					if !slices.Equal(sum.Predictions, got) || sum.FinishReason != tc.want.Reason {
						t.Errorf("summary: %d predictions, finish %q; want the %d emitted, %q", len(sum.Predictions), sum.FinishReason, len(got), tc.want.Reason)
					}
				})
			}
		})
	}
}

// TestSequentialSamples: a seeded request samples as a runtime sampler
// with the default top-k and top-p does, however many requests ran
// before it on the ladder.
func TestSequentialSamples(t *testing.T) {
	noLeaks(t)
	prompt := runtime.SeededTokens(2, 9, seqVocab)
	s, err := runtime.NewSampler(0.7, DefaultTopK, DefaultTopP, 5)
	if err != nil {
		t.Fatal(err)
	}
	want := reference(t, runtime.GrowOneAhead, prompt, s)[:40]
	e := newSequential(t, newSeqCompiler(), runtime.GrowOneAhead, SequentialConfig{})
	for i := range 2 {
		var got []int64
		r := collect(Request{Prompt: prompt, MaxTokens: 40, Sampling: Sampling{Temperature: 0.7, Seed: 5, Seeded: true}}, &got)
		if _, err := e.Generate(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("request %d sampled %v, want %v", i, got, want)
		}
	}
}

// TestSequentialConcurrent runs requests at once on one ladder (run it
// with -race): each gets the tokens it gets alone, and every rung is
// compiled once for all of them.
func TestSequentialConcurrent(t *testing.T) {
	noLeaks(t)
	f := newSeqCompiler()
	e := newSequential(t, f, runtime.GrowOneAhead, SequentialConfig{})
	if err := e.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	prompts := [][]int64{runtime.SeededTokens(1, 5, seqVocab), runtime.SeededTokens(2, 20, seqVocab),
		runtime.SeededTokens(3, 40, seqVocab), runtime.SeededTokens(4, 3, seqVocab)}
	maxTokens := []int{50, 30, 24, 61}
	got := make([][]int64, len(prompts))
	fins := make([]Finish, len(prompts))
	errs := make([]error, len(prompts))
	var wg sync.WaitGroup
	for i := range prompts {
		wg.Go(func() {
			fins[i], errs[i] = e.Generate(context.Background(), collect(Request{Prompt: prompts[i], MaxTokens: maxTokens[i]}, &got[i]))
		})
	}
	wg.Wait()
	for i, p := range prompts {
		want := reference(t, runtime.GrowOneAhead, p, nil)[:maxTokens[i]]
		if errs[i] != nil || fins[i].Tokens != maxTokens[i] || fins[i].Reason != ReasonLength {
			t.Errorf("request %d: finish %+v (%v)", i, fins[i], errs[i])
		}
		if !slices.Equal(got[i], want) {
			t.Errorf("request %d (prompt %d) decodes differently next to the others", i, len(p))
		}
	}
	for _, c := range seqLadder {
		if n := f.compiles(c); n != 1 {
			t.Errorf("rung %d compiled %d times for %d requests, want once", c, n, len(prompts))
		}
	}
}

// TestSequentialRefuses: requests no sequence can run are errors before
// any sequence is made.
func TestSequentialRefuses(t *testing.T) {
	noLeaks(t)
	summaries := 0
	e := newSequential(t, newSeqCompiler(), runtime.GrowOneAhead, SequentialConfig{
		OnSummary: func(*runtime.Summary, time.Time) { summaries++ }})
	full := runtime.SeededTokens(1, seqLadder.Max(), seqVocab)
	for _, tc := range []struct {
		name    string
		r       Request
		tooLong bool
	}{
		{name: "no prompt", r: Request{MaxTokens: 4}},
		{name: "no max tokens", r: Request{Prompt: full[:4]}},
		{name: "prompt fills the largest context", r: Request{Prompt: full, MaxTokens: 4}, tooLong: true},
		{name: "bad top-k", r: Request{Prompt: full[:4], MaxTokens: 4, Sampling: Sampling{Temperature: 1, TopK: -3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fin, sum, err := e.GenerateSummary(context.Background(), tc.r, time.Time{})
			if err == nil || errors.Is(err, ErrPromptTooLong) != tc.tooLong || sum != nil || fin.Tokens != 0 {
				t.Errorf("error %v (prompt too long: %v), summary %v, %d tokens", err, tc.tooLong, sum != nil, fin.Tokens)
			}
		})
	}
	// The longest prompt that fits leaves room for one token.
	fin, err := e.Generate(context.Background(), Request{Prompt: full[:seqLadder.Max()-1], MaxTokens: 4})
	if err != nil || fin.Tokens != 1 || fin.Reason != ReasonLength {
		t.Errorf("a prompt of MaxContext-1 tokens: finish %+v (%v), want one token, length", fin, err)
	}
	if summaries != 1 {
		t.Errorf("OnSummary called %d times, want once (for the request that ran)", summaries)
	}
}

// TestSequentialCancel: a request whose context ends stops after its
// step with the context's error, its summary says interrupted, and the
// hooks see it end.
func TestSequentialCancel(t *testing.T) {
	noLeaks(t)
	var sums []*runtime.Summary
	done := 0
	e := newSequential(t, newSeqCompiler(), runtime.GrowOneAhead, SequentialConfig{
		Progress:  func(int) (func(runtime.Progress), func()) { return nil, func() { done++ } },
		OnSummary: func(s *runtime.Summary, _ time.Time) { sums = append(sums, s) }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	fin, err := e.Generate(ctx, Request{Prompt: []int64{1, 2, 3}, MaxTokens: 50, Emit: func(int64) bool {
		if n++; n == 6 {
			cancel()
		}
		return true
	}})
	if !errors.Is(err, context.Canceled) || fin.Tokens != 6 {
		t.Errorf("finish %+v, error %v; want 6 tokens and context.Canceled", fin, err)
	}
	if len(sums) != 1 || sums[0].FinishReason != "interrupted" || done != 1 {
		t.Errorf("%d summaries (finish %v), done called %d times; want one interrupted, once", len(sums), sums, done)
	}
	if e.Ready() {
		t.Error("ready after a cancelled request and no warm-up")
	}
}

// TestSequentialHooks: Warm makes the engine ready; every request gets
// its progress callback with its prompt's length, its done call and its
// summary, whose offsets count from the origin given while TTFT counts
// from the call.
func TestSequentialHooks(t *testing.T) {
	noLeaks(t)
	var mu sync.Mutex
	var prompts []int
	steps, done := 0, 0
	var origins []time.Time
	e := newSequential(t, newSeqCompiler(), runtime.GrowOneAhead, SequentialConfig{
		Progress: func(n int) (func(runtime.Progress), func()) {
			mu.Lock()
			defer mu.Unlock()
			prompts = append(prompts, n)
			return func(runtime.Progress) { mu.Lock(); steps++; mu.Unlock() }, func() { mu.Lock(); done++; mu.Unlock() }
		},
		OnSummary: func(_ *runtime.Summary, o time.Time) { mu.Lock(); origins = append(origins, o); mu.Unlock() },
	})
	if e.Ready() {
		t.Fatal("ready before Warm")
	}
	if err := e.Warm(context.Background()); err != nil || !e.Ready() {
		t.Fatalf("after Warm: ready %v (%v)", e.Ready(), err)
	}
	if len(prompts) != 0 || len(origins) != 0 {
		t.Errorf("Warm is not a request, yet the hooks saw %d", len(prompts))
	}
	origin := time.Now().Add(-time.Hour)
	call := time.Now()
	fin, sum, err := e.GenerateSummary(context.Background(), Request{Prompt: []int64{4, 5, 6, 7}, MaxTokens: 20}, origin)
	elapsed := time.Since(call)
	if err != nil {
		t.Fatal(err)
	}
	if sum.TTFTS < time.Hour.Seconds() || fin.TTFT <= 0 || fin.TTFT > elapsed {
		t.Errorf("summary TTFT %.3f s from an origin an hour ago, Finish.TTFT %s of a %s call", sum.TTFTS, fin.TTFT, elapsed)
	}
	if len(prompts) != 1 || prompts[0] != 4 || steps < 19 || done != 1 || len(origins) != 1 || !origins[0].Equal(origin) {
		t.Errorf("hooks: prompts %v, %d progress calls, done %d, origins %v", prompts, steps, done, origins)
	}
}
