package runtime

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/model"
)

// timedCompiler is a backend whose compiles and steps take fixed times on
// the clock of a synctest bubble, where a background compile and the decode
// loop run concurrently in virtual time, exactly as the simulator assumes
// (no contention between them).
type timedCompiler struct {
	compile, step map[int]time.Duration // by capacity
}

func (c *timedCompiler) Compile(ctx context.Context, spec model.GraphSpec) (Executable, error) {
	time.Sleep(c.compile[spec.Capacity])
	return &timedExe{c: c, spec: spec, logits: make([]float32, 8)}, nil
}

type timedExe struct {
	c      *timedCompiler
	spec   model.GraphSpec
	logits []float32
}

func (e *timedExe) Spec() model.GraphSpec { return e.spec }
func (e *timedExe) Close() error          { return nil }

func (e *timedExe) Bind(kv *KV) error {
	if kv.Capacity != e.spec.Capacity {
		return fmt.Errorf("bind %d slots to %s", kv.Capacity, e.spec.Name())
	}
	return nil
}

func (e *timedExe) Step(ids []int64, start int) ([]float32, error) {
	time.Sleep(e.c.step[e.spec.Capacity])
	return e.logits, nil
}

// TestSimulatorPredictsTheRuntime runs every policy on the timed backend in
// virtual time and checks that compilecost.Simulate, given the same costs,
// predicts the runtime's timeline: when each rung's compile starts and ends
// (launches one and two ahead included), whether a boundary found its graph
// ready and how long it waited, each rung's decode window, the foreground
// compile and the critical path.
func TestSimulatorPredictsTheRuntime(t *testing.T) {
	caps := Ladder{32, 64, 128, 256}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	step := map[int]time.Duration{32: ms(1), 64: ms(2), 128: ms(3), 256: ms(4)}
	waits := func(s *Summary) bool { return s.BoundaryWaitS > 0 }
	noWait := func(s *Summary) bool { return s.BoundaryWaitS == 0 }
	twoAhead := func(s *Summary) bool {
		return slices.ContainsFunc(s.Budgets, func(b Budget) bool { return b.Lookahead == 2 })
	}
	scenarios := []struct {
		name           string
		compile        map[int]time.Duration
		prompt, decode int
		shows          func(*Summary) bool // what a background policy's run must show
	}{
		// Every successor compiles well within its window.
		{name: "successors ready", compile: map[int]time.Duration{32: ms(50.3), 64: ms(9.1), 128: ms(20.7), 256: ms(30.9)}, prompt: 10, decode: 200, shows: noWait},
		// Rung 64 (45.1 ms) misses rung 32's 22 ms window: a wait.
		{name: "late successor", compile: map[int]time.Duration{32: ms(50.3), 64: ms(45.1), 128: ms(20.7), 256: ms(30.9)}, prompt: 10, decode: 200, shows: waits},
		// Rungs 128 and 256 do not fit the 32 and 128 ms windows the rule
		// sees: both go two ahead, and the boundaries wait less.
		{name: "two ahead", compile: map[int]time.Duration{32: ms(50.3), 64: ms(9.1), 128: ms(70.7), 256: ms(290.9)}, prompt: 10, decode: 200, shows: twoAhead},
		// The prompt starts on rung 64: rung 32 is never compiled.
		{name: "prompt past the first rung", compile: map[int]time.Duration{32: ms(50.3), 64: ms(9.1), 128: ms(120.7), 256: ms(30.9)}, prompt: 40, decode: 210, shows: noWait},
	}
	secs := func(d time.Duration) float64 { return d.Seconds() }
	for _, sc := range scenarios {
		profile := &compilecost.Profile{Model: "timed", Device: "CPU"}
		for _, c := range caps {
			profile.Rungs = append(profile.Rungs, compilecost.Rung{Capacity: c, CompileS: []float64{secs(sc.compile[c])}})
		}
		for _, p := range Policies {
			t.Run(sc.name+"/"+string(p), func(t *testing.T) {
				first, _ := p.Row().Rungs(caps).RungFor(sc.prompt + 1)
				want := compilecost.Simulate(compilecost.SimConfig{
					Ladder: caps, PromptTokens: sc.prompt, DecodeTokens: sc.decode, Policy: string(p),
					CompileS:    func(c int) float64 { return secs(sc.compile[c]) },
					DecodeStepS: func(c int) float64 { return secs(step[c]) },
					PrefillS:    float64(sc.prompt) * secs(step[p.Row().Rungs(caps)[first]]),
				})
				if want.Error != "" {
					t.Fatal(want.Error)
				}
				var got *Summary
				synctest.Test(t, func(t *testing.T) {
					var err error
					got, err = Run(context.Background(), &timedCompiler{compile: sc.compile, step: step}, testShape, RunConfig{
						Ladder: caps, Policy: p, Prompt: SeededTokens(1, sc.prompt, 8), DecodeTokens: sc.decode, CompileCost: profile})
					if err != nil {
						t.Fatal(err)
					}
				})
				compareTimelines(t, got, want)
				if p.Background() && !sc.shows(got) {
					t.Errorf("the run does not show what the scenario is for: waited %.4f s, budgets %+v", got.BoundaryWaitS, got.Budgets)
				}
			})
		}
	}
}

func compareTimelines(t *testing.T, got *Summary, want compilecost.SimResult) {
	t.Helper()
	const tol = 1e-6 // seconds: the simulator adds floats, the bubble counts nanoseconds
	check := func(what string, g, w float64) {
		t.Helper()
		if math.Abs(g-w) > tol {
			t.Errorf("%s: runtime %.6f s, simulator %.6f s", what, g, w)
		}
	}
	check("foreground compile", got.ForegroundCompileS, want.ForegroundCompileS)
	check("critical path", got.CriticalPathS, want.CriticalPathS)
	check("decode", got.DecodeS, want.DecodeS)
	check("boundary wait", got.BoundaryWaitS, want.BoundaryWaitS)
	check("compile overlapped with decode", got.SuccessorCompileOverlappedS, want.OverlappedS)
	if got.DecodedTokens != want.Steps {
		t.Errorf("runtime decoded %d tokens, simulator %d", got.DecodedTokens, want.Steps)
	}
	twoAhead := map[int]bool{}
	for _, b := range got.Budgets {
		twoAhead[b.Capacity] = b.Lookahead == 2
	}
	byCap := map[int]RungSummary{}
	for _, r := range got.Rungs {
		byCap[r.Capacity] = r
	}
	for i, w := range want.Rungs {
		g, ok := byCap[w.Capacity]
		if !ok || !g.Compiled {
			t.Errorf("rung %d: the simulator compiles it, the runtime did not", w.Capacity)
			continue
		}
		at := fmt.Sprintf("rung %d ", w.Capacity)
		check(at+"compile start", g.CompileStartS, w.CompileStartS)
		check(at+"compile end", g.CompileEndS, w.CompileEndS)
		if g.Foreground != w.Foreground {
			t.Errorf("%sforeground: runtime %v, simulator %v", at, g.Foreground, w.Foreground)
		}
		if w.Lookahead > 0 && twoAhead[w.Capacity] != (w.Lookahead == 2) {
			t.Errorf("%slaunched two ahead: runtime %v, simulator lookahead %d", at, twoAhead[w.Capacity], w.Lookahead)
		}
		if w.FirstStep < 0 {
			continue // compiled, never decoded on
		}
		if i > 0 && w.FirstStep > 0 && g.ReadyAtBoundary != w.ReadyAtBoundary {
			t.Errorf("%sready at its boundary: runtime %v, simulator %v", at, g.ReadyAtBoundary, w.ReadyAtBoundary)
		}
		check(at+"wait", g.WaitS, w.WaitS)
		check(at+"decode start", g.DecodeStartS, w.DecodeStartS)
		check(at+"decode end", g.DecodeEndS, w.DecodeEndS)
		if g.FirstStep != w.FirstStep+1 || g.LastStep != w.LastStep+1 { // the simulator counts steps from 0
			t.Errorf("%ssteps %d..%d, simulator %d..%d (from 0)", at, g.FirstStep, g.LastStep, w.FirstStep, w.LastStep)
		}
	}
	for c, g := range byCap {
		if g.Compiled && g.CompileStartS < want.CriticalPathS && !simulated(want, c) {
			t.Errorf("rung %d: the runtime compiled it during the run, the simulator does not", c)
		}
	}
}

func simulated(r compilecost.SimResult, capacity int) bool {
	for _, w := range r.Rungs {
		if w.Capacity == capacity {
			return true
		}
	}
	return false
}

// A run ends with its last token: a successor launched for a rung the run
// never reaches is waited for before the process exits, but is not on the
// critical path (the simulator agrees: it does not model that rung).
func TestCriticalPathEndsAtTheLastToken(t *testing.T) {
	ms := time.Millisecond
	tc := &timedCompiler{compile: map[int]time.Duration{32: 10 * ms, 64: 10 * ms, 128: 500 * ms},
		step: map[int]time.Duration{32: ms, 64: ms, 128: ms}}
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		s, err := Run(context.Background(), tc, testShape, RunConfig{Ladder: Ladder{32, 64, 128}, Policy: GrowOneAhead,
			Prompt: SeededTokens(1, 10, 8), DecodeTokens: 30})
		if err != nil {
			t.Fatal(err)
		}
		// 10 ms compile, 10 ms prefill, 30 steps; rung 64 compiled behind.
		if want := 0.050; math.Abs(s.CriticalPathS-want) > 1e-9 || math.Abs(s.EndS-want) > 1e-9 {
			t.Errorf("critical path %.4f s, end %.4f s; want %.3f s", s.CriticalPathS, s.EndS, want)
		}
		if r := s.Rungs[2]; !r.Compiled || r.CompileEndS < 0.5 || time.Since(start) < 500*ms {
			t.Errorf("rung 128 %+v, run returned after %v: want its compile finished before Run returned", r, time.Since(start))
		}
	})
}
