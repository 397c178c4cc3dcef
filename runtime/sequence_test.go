package runtime

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// TestConcurrentSequencesShareOneLadder runs four sequences at once on one
// compiled ladder, under every policy: their prompts start them on three
// different rungs, they cross boundaries while the others decode, and each
// must predict exactly what it predicts alone. Every rung is compiled once
// for all of them, and closing the sequences and the ladder frees every
// graph and every KV byte. Run it with -race.
func TestConcurrentSequencesShareOneLadder(t *testing.T) {
	ladderCaps := Ladder{32, 64, 128, 256}
	prompts := []int{5, 40, 100, 7} // first rungs 32, 64, 128, 32
	const decode = 120
	for _, p := range Policies {
		t.Run(string(p), func(t *testing.T) {
			want := make([][]int64, len(prompts))
			for i, n := range prompts {
				s, err := fakeRun(t, newFakeCompiler(testShape, 97, nil), RunConfig{Ladder: ladderCaps, Policy: p,
					Prompt: SeededTokens(uint64(i+1), n, 97), DecodeTokens: decode, PrefillChunk: 16})
				if err != nil {
					t.Fatal(err)
				}
				want[i] = s.Predictions
			}

			f := newFakeCompiler(testShape, 97, nil)
			l, err := NewCompiledLadder(context.Background(), f, LadderConfig{Ladder: ladderCaps, Policy: p, Shape: testShape, PrefillChunk: 16})
			if err != nil {
				t.Fatal(err)
			}
			seqs := make([]*Sequence, len(prompts))
			for i, n := range prompts {
				if seqs[i], err = l.NewSequence(SequenceConfig{Prompt: SeededTokens(uint64(i+1), n, 97), DecodeTokens: decode}); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			errs := make([]error, len(seqs))
			for i, q := range seqs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = q.Run(context.Background())
				}()
			}
			wg.Wait()
			for i, q := range seqs {
				s := q.Summary()
				if errs[i] != nil || s.FinishReason != "length" || s.DecodedTokens != decode {
					t.Fatalf("sequence %d: finish %q after %d steps (%v)", i, s.FinishReason, s.DecodedTokens, errs[i])
				}
				if !slices.Equal(s.Predictions, want[i]) {
					t.Errorf("sequence %d (prompt %d) predicts differently next to the others", i, prompts[i])
				}
				if err := q.Close(); err != nil {
					t.Error(err)
				}
			}
			for _, c := range l.Rungs() {
				if n := f.compiled(c); n != 1 {
					t.Errorf("rung %d compiled %d times for four sequences, want once", c, n)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if n := f.open.Load(); n != 0 {
				t.Errorf("%d executables left open", n)
			}
			if n := MappedKVBytes(); n != 0 {
				t.Errorf("%d bytes of KV still mapped", n)
			}
		})
	}
}

// TestLadderFreesRungsNoSequenceNeeds drives two sequences by hand: a rung
// stays compiled while one of them may still decode on it, is freed once
// both have grown past it, and is compiled again for a new sequence that
// starts on it.
func TestLadderFreesRungsNoSequenceNeeds(t *testing.T) {
	ctx := context.Background()
	f := newFakeCompiler(testShape, 50, nil)
	l, err := NewCompiledLadder(ctx, f, LadderConfig{Ladder: Ladder{16, 32, 64}, Policy: GrowOneAhead, Shape: testShape})
	if err != nil {
		t.Fatal(err)
	}
	newSeq := func(seed uint64) *Sequence {
		q, err := l.NewSequence(SequenceConfig{Prompt: SeededTokens(seed, 4, 50), DecodeTokens: 40})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return q
	}
	// stepTo decodes until the sequence's input position reaches pos.
	stepTo := func(q *Sequence, pos int) {
		for len(q.fed) < pos+1 {
			if err := q.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	a, b := newSeq(1), newSeq(2)
	stepTo(a, 20) // a is on rung 32
	if a.cur != 1 || b.cur != 0 {
		t.Fatalf("a on rung %d, b on rung %d; want 1 and 0", a.cur, b.cur)
	}
	if n := f.liveGraphs(16); n != 1 {
		t.Fatalf("rung 16 has %d live graphs while b decodes on it, want 1", n)
	}
	stepTo(b, 20)
	if n := f.liveGraphs(16); n != 0 {
		t.Errorf("rung 16 has %d live graphs once both grew past it, want 0", n)
	}
	if n := f.liveGraphs(32); n != 1 {
		t.Errorf("rung 32 has %d live graphs, want 1", n)
	}
	c := newSeq(3) // starts on rung 16 again
	if n := f.compiled(16); n != 2 || f.liveGraphs(16) != 1 {
		t.Errorf("rung 16 compiled %d times with %d live graphs after a new sequence started on it, want 2 and 1", n, f.liveGraphs(16))
	}
	for _, q := range []*Sequence{a, b, c} {
		if err := q.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := f.open.Load(); n != 0 || MappedKVBytes() != 0 {
		t.Errorf("%d executables open, %d KV bytes mapped after Close", n, MappedKVBytes())
	}
}

// A failed background compile seen by two sequences at once is retried
// once, by whichever reaches the boundary first.
func TestConcurrentSequencesRetryAFailedCompileOnce(t *testing.T) {
	ctx := context.Background()
	f := newFakeCompiler(testShape, 50, nil)
	f.fail[32] = 1
	l, err := NewCompiledLadder(ctx, f, LadderConfig{Ladder: Ladder{16, 32, 64}, Policy: GrowOneAhead, Shape: testShape})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []*Sequence
	for i := range 3 {
		q, err := l.NewSequence(SequenceConfig{Prompt: SeededTokens(uint64(i+1), 4, 50), DecodeTokens: 50})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, q)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(seqs))
	for i, q := range seqs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = q.Run(ctx) }()
	}
	wg.Wait()
	for i, q := range seqs {
		if errs[i] != nil || q.Summary().FinishReason != "length" {
			t.Errorf("sequence %d: finish %q (%v)", i, q.Summary().FinishReason, errs[i])
		}
		if err := q.Close(); err != nil {
			t.Error(err)
		}
	}
	if n := f.compiled(32); n != 2 {
		t.Errorf("rung 32 compiled %d times: want the failed background compile and one retry", n)
	}
	notes := fmt.Sprint(l.Notes())
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	s := &Summary{Rungs: make([]RungSummary, 3)}
	l.record(s, l.cfg.Clock())
	if got := s.Rungs[1]; !got.Compiled || got.CompileAttempts != 2 || !got.Foreground {
		t.Errorf("rung 32 record %+v, want compiled on the foreground retry (attempt 2); notes %s", got, notes)
	}
}

// TestSequenceOfThePromptsPredictionOnly asks for no decode step: the
// sequence ends after the prompt with its one prediction (a chat or server
// request for one new token), the same token a longer run predicts first;
// a negative count is refused, and Run, which measures decoding, still
// wants at least one step.
func TestSequenceOfThePromptsPredictionOnly(t *testing.T) {
	prompt := SeededTokens(3, 10, 97)
	long, err := fakeRun(t, newFakeCompiler(testShape, 97, nil), RunConfig{Ladder: Ladder{32, 64}, Policy: "grow-one-ahead",
		Prompt: prompt, DecodeTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewCompiledLadder(context.Background(), newFakeCompiler(testShape, 97, nil),
		LadderConfig{Ladder: Ladder{32, 64}, Policy: "grow-one-ahead", Shape: testShape})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.NewSequence(SequenceConfig{Prompt: prompt, DecodeTokens: -1}); err == nil {
		t.Error("a negative number of decode steps was accepted")
	}
	q, err := l.NewSequence(SequenceConfig{Prompt: prompt})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := q.Finish(nil)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if s.FinishReason != "length" || s.DecodedTokens != 0 || !slices.Equal(s.Predictions, long.Predictions[:1]) {
		t.Errorf("finish %q after %d steps, predictions %v; want length after 0 with %v", s.FinishReason, s.DecodedTokens, s.Predictions, long.Predictions[:1])
	}
	if _, err := fakeRun(t, newFakeCompiler(testShape, 97, nil), RunConfig{Ladder: Ladder{32, 64}, Policy: "grow-one-ahead",
		Prompt: prompt}); err == nil {
		t.Error("Run accepted 0 decode steps")
	}
}
