package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ovtoolkit/ovrun/ladder"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testVocab = 50

func testShape() runtime.KVShape {
	return runtime.KVShape{Layers: 1, KVHeads: 2, HeadDim: 4, ElemBytes: 4, Block: 8}
}

func testConfig(caps ...int) BatchConfig {
	return BatchConfig{Ladder: ladder.Ladder(caps), MaxSeqs: 4, MaxBatchTokens: 24, Shape: testShape(),
		Attention: model.AttentionPaged, PrefixCacheBlocks: 16}
}

// newTestEngine starts an engine on f whose fake graphs fail any write
// into a block that is shared or in the prefix cache. Cleanup closes it
// and checks that every graph was closed.
func newTestEngine(t *testing.T, f *fakeCompiler, cfg BatchConfig) *Batched {
	t.Helper()
	b, err := NewBatched(context.Background(), f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.checkWrite = b.pool.checkWritable // the loop goroutine's pool, read there only
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if n := f.open.Load(); n != 0 {
			t.Errorf("%d graphs left open after Close", n)
		}
	})
	return b
}

// checkDrained fails unless every block is back: none used, the rest
// cached or free.
func checkDrained(t *testing.T, b *Batched) {
	t.Helper()
	st := b.Stats()
	if st.Running != 0 || st.Waiting != 0 || st.BlocksUsed != 0 || st.BlocksCached+st.BlocksFree != st.BlocksTotal {
		t.Fatalf("after every request: running %d, waiting %d, blocks used %d, cached %d + free %d of %d",
			st.Running, st.Waiting, st.BlocksUsed, st.BlocksCached, st.BlocksFree, st.BlocksTotal)
	}
}

// stepLog keeps every step an engine's OnStep reports.
type stepLog struct {
	mu    sync.Mutex
	steps []StepInfo
}

func (l *stepLog) record(s StepInfo) {
	l.mu.Lock()
	l.steps = append(l.steps, s)
	l.mu.Unlock()
}

// seen waits (a second at most) until the log holds every step b's Stats
// counts, and returns a copy: the OnStep of a request's last step runs
// after its Generate returned.
func (l *stepLog) seen(t *testing.T, b *Batched) []StepInfo {
	t.Helper()
	want := b.Stats().Steps
	for deadline := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		got := slices.Clone(l.steps)
		l.mu.Unlock()
		if int64(len(got)) >= want || time.Now().After(deadline) {
			return got
		}
	}
}

// collect runs r on b and returns the tokens it emitted.
func collectBatched(ctx context.Context, b *Batched, r Request) ([]int64, Finish, error) {
	var out []int64
	emit := r.Emit
	r.Emit = func(id int64) bool {
		out = append(out, id)
		return emit == nil || emit(id)
	}
	fin, err := b.Generate(ctx, r)
	return out, fin, err
}

// checkSolo fails unless got (the engine's) is what r gives alone.
func checkSolo(t *testing.T, f *fakeCompiler, maxContext int, name string, r Request, got []int64, fin Finish) {
	t.Helper()
	want, reason, err := solo(f, maxContext, r)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) || fin.Reason != reason || fin.Tokens != len(want) {
		t.Fatalf("%s (prompt %d, max %d): batched %v (%s, %d tokens)\nalone %v (%s)", name, len(r.Prompt), r.MaxTokens, got, fin.Reason, fin.Tokens, want, reason)
	}
}

func randTokens(rng *rand.Rand, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = rng.Int64N(testVocab)
	}
	return out
}

func TestBatchedMatchesAlone(t *testing.T) {
	for _, n := range []int{1, 3, 8, 16} {
		t.Run(fmt.Sprintf("%d sequences", n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 7))
			f := newFakeCompiler(testShape(), testVocab)
			f.compileDelay = 5 * time.Millisecond
			f.stepDelay = 20 * time.Microsecond
			cfg := testConfig(32, 64, 128, 256)
			cfg.MaxSeqs, cfg.MaxBatchTokens = 16, 40
			var log stepLog
			cfg.OnStep = log.record
			// Half the requests are queued before the first graph is
			// compiled, so they start in one batch; the rest join later.
			f.gate[32] = make(chan struct{})
			b := newTestEngine(t, f, cfg)

			// Prompts share prefixes, so the prefix cache is at work
			// while sequences run.
			bases := [][]int64{randTokens(rng, 60), randTokens(rng, 60)}
			reqs := make([]Request, n)
			for i := range reqs {
				var prompt []int64
				if rng.IntN(2) == 0 {
					base := bases[rng.IntN(len(bases))]
					prompt = append(slices.Clone(base[:20+rng.IntN(41)]), randTokens(rng, rng.IntN(30))...)
				} else {
					prompt = randTokens(rng, 1+rng.IntN(100)) // some longer than a step
				}
				reqs[i] = Request{Prompt: prompt, MaxTokens: 1 + rng.IntN(220)}
				if rng.IntN(3) == 0 {
					reqs[i].IsEOG = func(id int64) bool { return id == 0 }
				}
			}
			type result struct {
				toks []int64
				fin  Finish
				err  error
			}
			results := make([]result, n)
			// The others join after a random number of steps (or once
			// nothing runs).
			first := (n + 1) / 2
			joins := make([]int64, n)
			for i := first; i < n; i++ {
				joins[i] = rng.Int64N(120)
			}
			var wg sync.WaitGroup
			for i := range reqs {
				wg.Go(func() {
					for st := b.Stats(); i >= first && st.Steps < joins[i] && st.Running > 0; st = b.Stats() {
						time.Sleep(20 * time.Microsecond)
					}
					toks, fin, err := collectBatched(context.Background(), b, reqs[i])
					results[i] = result{toks, fin, err}
				})
				if i == first-1 {
					for st := b.Stats(); st.Running+st.Waiting < first; st = b.Stats() {
						time.Sleep(100 * time.Microsecond)
					}
					close(f.gate[32])
				}
			}
			wg.Wait()
			for i, r := range results {
				if r.err != nil {
					t.Fatalf("request %d: %v", i, r.err)
				}
				checkSolo(t, f, cfg.Ladder.Max(), fmt.Sprintf("request %d", i), reqs[i], r.toks, r.fin)
			}
			checkDrained(t, b)

			// Whether a prompt finds a shared prefix cached depends on when
			// it joins (the CI machine once ran all sharing prompts of the 8
			// in one batch: 56 misses); TestBatchedPrefixCache asserts the hits.
			st := b.Stats()
			if n > 4 && st.PrefixHitBlocks == 0 {
				t.Logf("no prefix cache hits this time (%d misses): every prompt that shares a prefix started before one had filled it", st.PrefixMissBlocks)
			}
			var tokens, most int
			var rungs []int
			for _, s := range log.seen(t, b) {
				tokens += s.Tokens
				most = max(most, s.Seqs)
				if s.Seqs > cfg.MaxSeqs || s.Tokens > cfg.MaxBatchTokens || len(s.SeqIDs) != s.Seqs || len(s.Contexts) != s.Seqs {
					t.Fatalf("step %+v breaks the limits (%d sequences, %d tokens)", s, cfg.MaxSeqs, cfg.MaxBatchTokens)
				}
				if !slices.Contains(rungs, s.Rung) {
					rungs = append(rungs, s.Rung)
				}
			}
			if n := len(log.seen(t, b)); int64(n) != st.Steps || int64(tokens) != st.StepTokens {
				t.Fatalf("OnStep saw %d steps of %d tokens, stats say %d of %d", n, tokens, st.Steps, st.StepTokens)
			}
			// The first step carries the first rung's worth of one prompt
			// and more: every sequence queued together starts at 0.
			if most < min(2, first) {
				t.Fatalf("at most %d sequences in a step of %d queued together", most, first)
			}
			longest := 0 // positions of the longest sequence's K/V
			for i, r := range results {
				longest = max(longest, len(reqs[i].Prompt)+len(r.toks)-1)
			}
			k, _ := cfg.Ladder.RungFor(longest)
			if !slices.Contains(rungs, cfg.Ladder[k]) || (k > 0 && len(rungs) < 2) {
				t.Fatalf("steps ran on rungs %v; the longest sequence (%d positions) needs rung %d, after starting on %d", rungs, longest, cfg.Ladder[k], cfg.Ladder[0])
			}
			if st.KVCommittedBytes <= 0 || st.KVCommittedBytes > st.KVReservedBytes {
				t.Fatalf("kv committed %d of %d reserved", st.KVCommittedBytes, st.KVReservedBytes)
			}
		})
	}
}

func TestBatchedCancelOne(t *testing.T) {
	f := newFakeCompiler(testShape(), testVocab)
	cfg := testConfig(64, 128)
	cfg.PrefixCacheBlocks = 0
	b := newTestEngine(t, f, cfg)
	if err := b.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Alone: its blocks are back as soon as Generate returns.
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	r := Request{Prompt: seqTokens(30, 1), MaxTokens: 60, Emit: func(int64) bool {
		if n++; n == 5 {
			cancel()
		}
		return true
	}}
	fin, err := b.Generate(ctx, r)
	if !errors.Is(err, context.Canceled) || fin.Tokens != 5 {
		t.Fatalf("cancelled after 5 tokens: %v, %d tokens", err, fin.Tokens)
	}
	checkDrained(t, b)

	// Among others: theirs do not change.
	others := []Request{
		{Prompt: seqTokens(40, 3), MaxTokens: 70},
		{Prompt: seqTokens(7, 9), MaxTokens: 50},
		{Prompt: seqTokens(12, 20), MaxTokens: 90},
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	n = 0
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := b.Generate(ctx, r); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled request: %v, want context.Canceled", err)
		}
	})
	got := make([][]int64, len(others))
	fins := make([]Finish, len(others))
	for i := range others {
		wg.Go(func() {
			var err error
			got[i], fins[i], err = collectBatched(context.Background(), b, others[i])
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	for i := range others {
		checkSolo(t, f, cfg.Ladder.Max(), fmt.Sprintf("request %d", i), others[i], got[i], fins[i])
	}
	checkDrained(t, b)
}

func TestBatchedCancelQueued(t *testing.T) {
	f := newFakeCompiler(testShape(), testVocab)
	cfg := testConfig(64)
	cfg.MaxSeqs = 1
	f.gate[64] = make(chan struct{}) // nothing runs: the second request stays queued
	b := newTestEngine(t, f, cfg)
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := b.Generate(context.Background(), Request{Prompt: seqTokens(5, 0), MaxTokens: 3}); err != nil {
			t.Errorf("first request: %v", err)
		}
	})
	for b.Stats().Running < 1 {
		time.Sleep(100 * time.Microsecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		fin, err := b.Generate(ctx, Request{Prompt: seqTokens(5, 0), MaxTokens: 3})
		if fin.Queued <= 0 {
			err = fmt.Errorf("queued %v, want > 0 (and %w)", fin.Queued, err)
		}
		done <- err
	}()
	for b.Stats().Waiting < 1 {
		time.Sleep(100 * time.Microsecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "queued") {
		t.Fatalf("cancelled while queued: %v", err)
	}
	close(f.gate[64])
	wg.Wait()
	checkDrained(t, b)
}

func TestBatchedPrefixCache(t *testing.T) {
	f := newFakeCompiler(testShape(), testVocab)
	cfg := testConfig(64, 128)
	cfg.PrefixCacheBlocks = 32
	b := newTestEngine(t, f, cfg)
	rng := rand.New(rand.NewPCG(3, 3))
	prompt := randTokens(rng, 43) // 5 full blocks before its last token
	run := func(name string, r Request, wantCached int) []int64 {
		t.Helper()
		got, fin, err := collectBatched(context.Background(), b, r)
		if err != nil {
			t.Fatal(err)
		}
		if fin.Cached != wantCached {
			t.Fatalf("%s: %d prompt tokens cached, want %d", name, fin.Cached, wantCached)
		}
		checkSolo(t, f, cfg.Ladder.Max(), name, r, got, fin)
		return got
	}

	run("first", Request{Prompt: prompt, MaxTokens: 20}, 0)
	st := b.Stats()
	if st.PrefixHitBlocks != 0 || st.PrefixMissBlocks != 5 || st.PrefixMissTokens != 43 {
		t.Fatalf("first request: hits %d, misses %d blocks %d tokens", st.PrefixHitBlocks, st.PrefixMissBlocks, st.PrefixMissTokens)
	}
	// Prompt and answer hold 62 tokens of K/V: 7 full blocks cached.
	if st.BlocksCached != 7 {
		t.Fatalf("%d blocks cached after the first request, want 7", st.BlocksCached)
	}
	answer := run("same prompt", Request{Prompt: prompt, MaxTokens: 20}, 40)
	st = b.Stats()
	if st.PrefixHitBlocks != 5 || st.PrefixHitTokens != 40 {
		t.Fatalf("second request: %d blocks, %d tokens hit, want 5 and 40", st.PrefixHitBlocks, st.PrefixHitTokens)
	}
	// A prompt of whole blocks still computes its last token: 4 of 5.
	run("whole blocks", Request{Prompt: prompt[:40], MaxTokens: 3}, 32)
	// The next chat turn shares the history, the answer included.
	turn := append(append(slices.Clone(prompt), answer...), 7, 8, 9, 10, 11)
	run("next turn", Request{Prompt: turn, MaxTokens: 5}, 56)
	// Identical prompts at once share blocks as they fill (the fake fails
	// any write into a shared block).
	other := randTokens(rng, 50)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			r := Request{Prompt: other, MaxTokens: 10 + 5*i}
			got, fin, err := collectBatched(context.Background(), b, r)
			if err != nil {
				t.Errorf("concurrent %d: %v", i, err)
				return
			}
			want, _, _ := solo(f, cfg.Ladder.Max(), r)
			if !slices.Equal(got, want) || fin.Tokens != len(want) {
				t.Errorf("concurrent %d: %v, alone %v", i, got, want)
			}
		})
	}
	wg.Wait()
	checkDrained(t, b)
}

func TestBatchedPrefixCacheLRU(t *testing.T) {
	f := newFakeCompiler(testShape(), testVocab)
	cfg := testConfig(64)
	cfg.PrefixCacheBlocks = 4
	b := newTestEngine(t, f, cfg)
	rng := rand.New(rand.NewPCG(4, 4))
	a, c := randTokens(rng, 43), randTokens(rng, 43)
	steps := []struct {
		prompt    []int64
		cached    int   // prompt tokens cached
		blocks    int   // blocks cached after it
		evictions int64 // in all, after it
	}{
		{a, 0, 4, 1},  // 5 full blocks, the cap is 4: the tail goes
		{a, 32, 4, 2}, // the 4 kept; the fifth is computed again and evicted again
		{c, 0, 4, 7},  // c's 5 evict a's 4 and c's own tail
		{a, 0, 4, 12}, // a was evicted
	}
	for i, s := range steps {
		r := Request{Prompt: s.prompt, MaxTokens: 1}
		got, fin, err := collectBatched(context.Background(), b, r)
		if err != nil {
			t.Fatal(err)
		}
		checkSolo(t, f, cfg.Ladder.Max(), fmt.Sprintf("request %d", i), r, got, fin)
		st := b.Stats()
		if fin.Cached != s.cached || st.BlocksCached != s.blocks || st.PrefixEvictions != s.evictions {
			t.Fatalf("request %d: cached %d tokens, %d blocks, %d evictions; want %d, %d, %d", i, fin.Cached, st.BlocksCached, st.PrefixEvictions, s.cached, s.blocks, s.evictions)
		}
	}
	checkDrained(t, b)
}

func TestBatchedSampling(t *testing.T) {
	f := newFakeCompiler(testShape(), testVocab)
	cfg := testConfig(64, 128)
	b := newTestEngine(t, f, cfg)
	reqs := make([]Request, 6)
	for i := range reqs {
		reqs[i] = Request{Prompt: seqTokens(10+7*i, i), MaxTokens: 40,
			Sampling: Sampling{Temperature: 0.7 + 0.1*float64(i%3), TopK: []int{-1, 0, 8}[i%3], TopP: []float64{1, 0, 0.9}[i%3], Seed: uint64(100 + i), Seeded: true}}
	}
	reqs[5].Prompt = reqs[4].Prompt // same prompt, other seed: other tokens
	got := make([][]int64, len(reqs))
	fins := make([]Finish, len(reqs))
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() {
			var err error
			if got[i], fins[i], err = collectBatched(context.Background(), b, reqs[i]); err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	for i := range reqs {
		checkSolo(t, f, cfg.Ladder.Max(), fmt.Sprintf("request %d", i), reqs[i], got[i], fins[i])
	}
	if slices.Equal(got[4], got[5]) {
		t.Fatal("two seeds gave the same 40 tokens: the sampler is not sampling")
	}
	checkDrained(t, b)
}

func TestBatchedCompileFailure(t *testing.T) {
	tests := []struct {
		name     string
		failures int // of rung 128's compile
		wantErr  bool
	}{
		{"retried", 1, false},
		{"failed twice", 2, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCompiler(testShape(), testVocab)
			f.fail[128] = tc.failures
			cfg := testConfig(32, 64, 128)
			b := newTestEngine(t, f, cfg)
			short := []Request{{Prompt: seqTokens(10, 0), MaxTokens: 15}, {Prompt: seqTokens(30, 5), MaxTokens: 30}}
			long := []Request{{Prompt: seqTokens(20, 2), MaxTokens: 100}, {Prompt: seqTokens(3, 9), MaxTokens: 120}}
			all := append(slices.Clone(short), long...)
			got := make([][]int64, len(all))
			fins := make([]Finish, len(all))
			errs := make([]error, len(all))
			var wg sync.WaitGroup
			for i := range all {
				wg.Go(func() { got[i], fins[i], errs[i] = collectBatched(context.Background(), b, all[i]) })
			}
			wg.Wait()
			for i := range all {
				if i >= len(short) && tc.wantErr {
					if !errors.Is(errs[i], errFakeCompile) || fins[i].Tokens != 65-len(all[i].Prompt) {
						t.Fatalf("request %d needs rung 128: %v after %d tokens; want the compile error after %d", i, errs[i], fins[i].Tokens, 65-len(all[i].Prompt))
					}
					continue
				}
				if errs[i] != nil {
					t.Fatalf("request %d: %v", i, errs[i])
				}
				checkSolo(t, f, cfg.Ladder.Max(), fmt.Sprintf("request %d", i), all[i], got[i], fins[i])
			}
			rs := b.Stats().Rungs[2]
			want := RungReady
			if tc.wantErr {
				want = RungFailed
			}
			if rs.State != want || rs.Tries != 2 || f.compiles(128) != 2 || (tc.wantErr != (rs.Err != "")) {
				t.Fatalf("rung 128: %+v after %d compiles; want %s after 2 tries", rs, f.compiles(128), want)
			}
			checkDrained(t, b)
		})
	}
}

func TestBatchedStepFailure(t *testing.T) {
	f := newFakeCompiler(testShape(), testVocab)
	f.failStep = func(call int) bool { return call == 3 }
	cfg := testConfig(64)
	b := newTestEngine(t, f, cfg)
	r := Request{Prompt: seqTokens(10, 1), MaxTokens: 10}
	if _, err := b.Generate(context.Background(), r); !errors.Is(err, errFakeStep) {
		t.Fatalf("request whose step fails: %v, want the step's error", err)
	}
	checkDrained(t, b)
	got, fin, err := collectBatched(context.Background(), b, r)
	if err != nil {
		t.Fatalf("the engine goes on after a failed step: %v", err)
	}
	checkSolo(t, f, cfg.Ladder.Max(), "after the failure", r, got, fin)
}

func TestBatchedClose(t *testing.T) {
	f := newFakeCompiler(testShape(), testVocab)
	f.stepDelay = 200 * time.Microsecond
	f.gate[256] = make(chan struct{}) // never opens: rung 256 compiles until Close cancels it
	cfg := testConfig(64, 256)
	b := newTestEngine(t, f, cfg)
	started := make(chan struct{}, 8)
	errs := make(chan error, 8)
	for i := range 6 { // 4 run, 2 queue
		go func() {
			once := false
			_, err := b.Generate(context.Background(), Request{Prompt: seqTokens(5+i, i), MaxTokens: 250, Emit: func(int64) bool {
				if !once {
					once = true
					started <- struct{}{}
				}
				return true
			}})
			errs <- err
		}()
	}
	for range 4 {
		<-started
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Fatalf("request in flight at Close: %v, want ErrClosed", err)
		}
	}
	if _, err := b.Generate(context.Background(), Request{Prompt: seqTokens(3, 0), MaxTokens: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Generate after Close: %v, want ErrClosed", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if st := b.Stats(); st.KVCommittedBytes != -1 || st.BlocksUsed != 0 {
		t.Fatalf("stats after Close: %d committed, %d blocks used", st.KVCommittedBytes, st.BlocksUsed)
	}
	goleak.VerifyNone(t)
}

func TestBatchedStops(t *testing.T) {
	f := newFakeCompiler(testShape(), testVocab)
	cfg := testConfig(32, 64)
	b := newTestEngine(t, f, cfg)
	n := 0
	tests := []struct {
		name   string
		r      Request
		reason string
		tokens int
	}{
		{"max tokens", Request{Prompt: seqTokens(5, 0), MaxTokens: 7}, ReasonLength, 7},
		{"largest context", Request{Prompt: seqTokens(60, 0), MaxTokens: 100}, ReasonLength, 4},
		{"emit says stop", Request{Prompt: seqTokens(5, 0), MaxTokens: 20, Emit: func(int64) bool { n++; return n < 3 }}, ReasonStop, 3},
		{"end of generation", Request{Prompt: seqTokens(5, 0), MaxTokens: 20, IsEOG: func(int64) bool { return true }}, ReasonStop, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fin, err := b.Generate(context.Background(), tc.r)
			if err != nil || fin.Reason != tc.reason || fin.Tokens != tc.tokens || fin.Prompt != len(tc.r.Prompt) || fin.TTFT <= 0 {
				t.Fatalf("got %+v, %v; want %s after %d tokens", fin, err, tc.reason, tc.tokens)
			}
		})
	}
	_, err := b.Generate(context.Background(), Request{Prompt: seqTokens(64, 0), MaxTokens: 1})
	if !errors.Is(err, ErrPromptTooLong) {
		t.Fatalf("a prompt of the largest context: %v, want ErrPromptTooLong", err)
	}
	if _, err := b.Generate(context.Background(), Request{Prompt: seqTokens(3, 0), MaxTokens: 1, Sampling: Sampling{Temperature: 1, TopK: -5}}); err == nil {
		t.Fatal("a bad top-k is accepted")
	}
	checkDrained(t, b)
}

func TestBatchedWarm(t *testing.T) {
	f := newFakeCompiler(testShape(), testVocab)
	f.compileDelay = time.Millisecond
	b := newTestEngine(t, f, testConfig(32, 64))
	if b.Ready() || len(f.specs) != 0 {
		t.Fatal("ready (or compiling) before Warm")
	}
	if err := b.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := b.Stats().Rungs
	if !b.Ready() || st[0].State != RungReady || st[0].Compile <= 0 || st[1].State != RungIdle {
		t.Fatalf("after Warm: ready %v, rungs %+v", b.Ready(), st)
	}
	want := model.GraphSpec{Capacity: 32, Chunk: 24, Attention: model.AttentionPaged, Shared: true, Batch: 4}
	if f.specs[0] != want {
		t.Fatalf("compiled %+v, want %+v", f.specs[0], want)
	}
}

func TestBatchedNotBatchedCompiler(t *testing.T) {
	f := newFakeCompiler(testShape(), testVocab)
	f.notBatched = true
	b := newTestEngine(t, f, testConfig(32))
	err := b.Warm(context.Background())
	if err == nil || !strings.Contains(err.Error(), "does not compile batched graphs") || f.compiles(32) != 1 {
		t.Fatalf("warm with a compiler of plain graphs: %v after %d compiles", err, f.compiles(32))
	}
	if _, err := b.Generate(context.Background(), Request{Prompt: seqTokens(3, 0), MaxTokens: 2}); err == nil || !strings.Contains(err.Error(), "batched") {
		t.Fatalf("generate: %v", err)
	}
	checkDrained(t, b)
}

func TestNewBatchedRejects(t *testing.T) {
	tests := []struct {
		name string
		edit func(*BatchConfig)
		want string
	}{
		{"no sequences", func(c *BatchConfig) { c.MaxSeqs = 0 }, "max sequences"},
		{"fewer tokens than sequences", func(c *BatchConfig) { c.MaxBatchTokens = 3 }, "max batch tokens"},
		{"single-slot blocks", func(c *BatchConfig) { c.Shape.Block = 1 }, "kv block"},
		{"no layers", func(c *BatchConfig) { c.Shape.Layers = 0 }, "kv shape"},
		{"bounded attention", func(c *BatchConfig) { c.Attention = model.AttentionBounded }, "paged"},
		{"negative cache", func(c *BatchConfig) { c.PrefixCacheBlocks = -1 }, "prefix cache"},
		{"descending ladder", func(c *BatchConfig) { c.Ladder = ladder.Ladder{64, 32} }, "ascending"},
		{"empty ladder", func(c *BatchConfig) { c.Ladder = nil }, "empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(32, 64)
			tc.edit(&cfg)
			b, err := NewBatched(context.Background(), newFakeCompiler(testShape(), testVocab), cfg)
			if err == nil {
				b.Close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
	if _, err := NewBatched(context.Background(), nil, testConfig(32)); err == nil {
		t.Fatal("accepted a nil compiler")
	}
}
