package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/ladder"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// The static form (static.go): a graph per rung and batch size, one token
// per sequence a step, each sequence in a slot of its rung's caches.

func staticShape() runtime.KVShape {
	return runtime.KVShape{Layers: 1, KVHeads: 2, HeadDim: 4, ElemBytes: 4, Block: 1}
}

func staticConfig(maxSeqs int, caps ...int) BatchConfig {
	return BatchConfig{Ladder: ladder.Ladder(caps), MaxSeqs: maxSeqs, MaxBatchTokens: maxSeqs,
		Shape: staticShape(), Attention: model.AttentionStatic}
}

func TestStaticBatches(t *testing.T) {
	for _, c := range []struct {
		max  int
		want []int
	}{{1, []int{1}}, {2, []int{1, 2}}, {6, []int{1, 2, 4, 6}}, {8, []int{1, 2, 4, 8}}, {16, []int{1, 2, 4, 8, 16}}} {
		if got := staticBatches(c.max); !slices.Equal(got, c.want) {
			t.Errorf("staticBatches(%d) = %v, want %v", c.max, got, c.want)
		}
	}
	st := &staticStore{batches: staticBatches(6)}
	for n, want := range map[int]int{1: 0, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3} {
		if got := st.batchFor(n); got != want {
			t.Errorf("batchFor(%d) = %d, want %d", n, got, want)
		}
	}
}

// TestStaticMatchesAlone runs 1 to 16 sequences joining at random steps,
// prompts of 1 to 40 tokens fed a token a step beside the others' decode
// steps, answers long enough to cross rungs 16, 32 and 64 mid-batch, a few
// cancelled half way: every sequence that finishes gives exactly the
// tokens it gives alone, no step carries more sequences than its graph's
// batch, and afterwards no slot is held.
func TestStaticMatchesAlone(t *testing.T) {
	for _, n := range []int{1, 3, 8, 16} {
		t.Run(fmt.Sprintf("%d sequences", n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 11))
			f := newFakeCompiler(staticShape(), testVocab)
			f.compileDelay = 2 * time.Millisecond
			cfg := staticConfig(16, 16, 32, 64, 128)
			var log stepLog
			cfg.OnStep = log.record
			b := newTestEngine(t, f, cfg)
			reqs := make([]Request, n)
			joins := make([]int64, n)
			cancelAt := make([]int, n) // tokens after which the client goes away; 0: never
			for i := range reqs {
				reqs[i] = Request{Prompt: randTokens(rng, 1+rng.IntN(40)), MaxTokens: 1 + rng.IntN(110)}
				if rng.IntN(3) == 0 {
					reqs[i].IsEOG = func(id int64) bool { return id == 0 }
				}
				if i > 0 {
					joins[i] = rng.Int64N(80)
				}
				if n > 2 && i%5 == 2 {
					cancelAt[i] = 1 + rng.IntN(10)
				}
			}
			type result struct {
				toks []int64
				fin  Finish
				err  error
			}
			results := make([]result, n)
			var wg sync.WaitGroup
			for i := range reqs {
				wg.Go(func() {
					for st := b.Stats(); st.Steps < joins[i] && st.Running > 0; st = b.Stats() {
						time.Sleep(20 * time.Microsecond)
					}
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					r := reqs[i]
					if cancelAt[i] > 0 {
						made := 0
						r.Emit = func(int64) bool {
							if made++; made == cancelAt[i] {
								cancel()
							}
							return true
						}
					}
					toks, fin, err := collectBatched(ctx, b, r)
					results[i] = result{toks, fin, err}
				})
			}
			wg.Wait()
			for i, r := range results {
				if cancelAt[i] > 0 {
					if r.err == nil && r.fin.Tokens > cancelAt[i] {
						t.Fatalf("request %d: cancelled after %d tokens, went on to %d", i, cancelAt[i], r.fin.Tokens)
					}
					if r.err != nil && !errors.Is(r.err, context.Canceled) {
						t.Fatalf("request %d: %v", i, r.err)
					}
					continue
				}
				if r.err != nil {
					t.Fatalf("request %d: %v", i, r.err)
				}
				checkSolo(t, f, cfg.Ladder.Max(), fmt.Sprintf("request %d", i), reqs[i], r.toks, r.fin)
			}
			checkDrained(t, b)
			st := b.Stats()
			if st.LiveTokens != 0 {
				t.Fatalf("%d live tokens after every request", st.LiveTokens)
			}
			ready := map[int]bool{}
			for _, r := range st.Rungs {
				if r.State == RungReady {
					ready[r.Batch] = true
				}
			}
			if n >= 8 && len(ready) < 3 {
				t.Fatalf("%d sequences ran on batch sizes %v only", n, ready)
			}
			var rungs []int
			for _, s := range log.seen(t, b) {
				if s.Seqs != s.Tokens || s.Seqs > cfg.MaxSeqs || len(s.SeqIDs) != s.Seqs {
					t.Fatalf("step %+v: want one token per sequence, at most %d", s, cfg.MaxSeqs)
				}
				if !slices.Contains(rungs, s.Rung) {
					rungs = append(rungs, s.Rung)
				}
			}
			if n >= 3 && len(rungs) < 3 {
				t.Fatalf("steps ran on rungs %v: the test should cross rungs", rungs)
			}
		})
	}
}

// TestStaticCompileAhead follows one sequence, then a second: the variant
// for one sequence at the first rung compiles before anything runs; the
// rung's two-sequence variant is queued while the first sequence runs
// alone (its batch is full), and the next rung's variant once it is past
// half of its rung, both before any sequence needs them.
func TestStaticCompileAhead(t *testing.T) {
	f := newFakeCompiler(staticShape(), testVocab)
	cfg := staticConfig(4, 16, 32)
	var log stepLog
	cfg.OnStep = log.record
	b := newTestEngine(t, f, cfg)
	if err := b.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !b.Ready() {
		t.Fatal("not ready after Warm")
	}
	if _, _, err := collectBatched(context.Background(), b, Request{Prompt: randTokens(rand.New(rand.NewPCG(1, 1)), 4), MaxTokens: 20}); err != nil {
		t.Fatal(err)
	}
	compiled := func() []string {
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []string
		for _, s := range f.specs {
			out = append(out, s.Name())
		}
		return out
	}
	got := compiled()
	for _, want := range []string{"batch-static-c16-s1", "batch-static-c16-s2", "batch-static-c32-s1"} {
		if !slices.Contains(got, want) {
			t.Fatalf("compiled %v, want %s among them", got, want)
		}
	}
	if got[0] != "batch-static-c16-s1" {
		t.Fatalf("first compile %s, want the first rung for one sequence", got[0])
	}
	var seen [][2]int // (rung, sequences) of every step
	for _, s := range log.seen(t, b) {
		seen = append(seen, [2]int{s.Rung, s.Seqs})
	}
	if len(seen) != 4+20-1 { // the prompt a token a step, then 19 decode steps
		t.Fatalf("%d steps, want %d: %v", len(seen), 4+20-1, seen)
	}
	if seen[0] != [2]int{16, 1} || seen[len(seen)-1] != [2]int{32, 1} {
		t.Fatalf("steps %v: want the first on rung 16 and the last on 32", seen)
	}
	for _, r := range b.Stats().Rungs {
		if r.Batch > 2 && r.State != RungIdle {
			t.Fatalf("variant %d x %d is %s: one sequence at a time needs batches of 1 and 2 only", r.Capacity, r.Batch, r.State)
		}
	}
}

// TestStaticCompileFailure: a rung whose variants fail to compile fails
// the sequences that reach it, with the compile error; the sequences that
// fit the first rung finish, and the engine goes on serving.
func TestStaticCompileFailure(t *testing.T) {
	f := newFakeCompiler(staticShape(), testVocab)
	f.fail[32] = 100
	b := newTestEngine(t, f, staticConfig(4, 16, 32))
	rng := rand.New(rand.NewPCG(3, 3))
	short := Request{Prompt: randTokens(rng, 3), MaxTokens: 8}
	long := Request{Prompt: randTokens(rng, 5), MaxTokens: 25}
	var wg sync.WaitGroup
	var errShort, errLong error
	var gotShort []int64
	var finShort Finish
	wg.Go(func() { gotShort, finShort, errShort = collectBatched(context.Background(), b, short) })
	wg.Go(func() { _, _, errLong = collectBatched(context.Background(), b, long) })
	wg.Wait()
	if errShort != nil {
		t.Fatalf("short request: %v", errShort)
	}
	checkSolo(t, f, 32, "short", short, gotShort, finShort)
	if !errors.Is(errLong, errFakeCompile) {
		t.Fatalf("long request: %v, want the compile failure", errLong)
	}
	checkDrained(t, b)
	if _, _, err := collectBatched(context.Background(), b, short); err != nil {
		t.Fatalf("after the failure: %v", err)
	}
}

func TestNewBatchedRejectsStatic(t *testing.T) {
	f := newFakeCompiler(staticShape(), testVocab)
	for name, mut := range map[string]func(*BatchConfig){
		"prefix cache": func(c *BatchConfig) { c.PrefixCacheBlocks = 4 },
		"blocks":       func(c *BatchConfig) { c.Shape.Block = 32 },
		"no layers":    func(c *BatchConfig) { c.Shape.Layers = 0 },
	} {
		cfg := staticConfig(4, 16, 32)
		mut(&cfg)
		if b, err := NewBatched(context.Background(), f, cfg); err == nil {
			b.Close()
			t.Errorf("%s: no error", name)
		}
	}
}
