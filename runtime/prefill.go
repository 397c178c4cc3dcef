package runtime

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/model"
)

// PrefillMode is how a sequence processes its prompt (`--prefill`): through
// a prefill graph of PrefillChunk tokens per call, compiled before the
// first token (graph); through the first rung's decode graph, one token per
// call (decode); chosen per prompt between those two (auto); or through
// rungs whose one graph takes 1 to PrefillChunk tokens per call, for the
// prompt and for decoding (shared: a dynamic token axis, CPU and GPU).
// Every mode gives the same tokens; they differ in what the first token
// waits for and in what decoding costs.
type PrefillMode string

// The prefill modes.
const (
	PrefillAuto   PrefillMode = "auto"
	PrefillGraph  PrefillMode = "graph"
	PrefillDecode PrefillMode = "decode"
	PrefillShared PrefillMode = "shared"
)

// The defaults of the commands' --prefill and --prefill-chunk. auto is the
// default because the paired campaigns in docs/benchmarks.md ("Prefill and decode
// compiled apart") measured it cutting the time to first token of 16-token
// prompts by 43-46% with no measurable loss for 512-token prompts. 128
// tokens a call (64 before 2026-12-02) put a 512-token SmolLM2 prompt
// through a shared graph 16% (bf16) to 37% (f32) faster, and through a
// prefill graph 5-15% faster at about the same compile time
// (docs/design.md, "One graph for the prompt and decoding").
const (
	DefaultPrefill      = PrefillAuto
	DefaultPrefillChunk = 128
)

// PagedPrefillChunk is the commands' --prefill-chunk where it is not given
// and the graphs attend paged: a paged graph's token axis is dynamic
// anyway, so a bigger chunk costs no compile time, and 512-token prompts
// went through in one call faster than in four (bin/ovrun generate
// --prompt-tokens 512 --capacity 1024, two rounds on a CPU with AMX:
// small f32 0.19-0.25 -> 0.19-0.20 s, SmolLM2 bf16 0.44-0.54 -> 0.37 s,
// qwen2.5-0.5b bf16 1.10 -> 0.73-0.94 s; peak RSS +0-19 MiB).
const PagedPrefillChunk = 512

// PrefillModes lists the modes' names.
func PrefillModes() []string {
	return []string{string(PrefillAuto), string(PrefillGraph), string(PrefillDecode), string(PrefillShared)}
}

// ParsePrefillMode accepts a mode name.
func ParsePrefillMode(s string) (PrefillMode, error) {
	for _, m := range PrefillModes() {
		if s == m {
			return PrefillMode(s), nil
		}
	}
	return "", fmt.Errorf("prefill mode %q: want one of %s", s, strings.Join(PrefillModes(), ", "))
}

// What a prompt went through (Summary.PrefillUsed).
const (
	PrefillUsedGraph  = "graph"        // the prefill graph, from the first token
	PrefillUsedDecode = "decode"       // the decode graph, every token
	PrefillUsedSwitch = "decode+graph" // the decode graph first, then the prefill graph for the rest
	PrefillUsedShared = "shared"       // the rung's shared graph, in chunks
)

// autoShared is auto mode's choice of a shared graph for a rung that takes
// a prompt of n tokens and then decodes decoded tokens: on a compiler that
// compiles shared graphs, where compilecost.SharedPays with the compiler's
// estimate of the shared graph's slower steps; it says why, and returns the
// estimate it weighed (0 on a compiler without shared graphs).
func autoShared(comp Compiler, n, per, decoded, chunk int) (why string, shared bool, penalty float64) {
	if !sharedGraphs(comp) {
		return "", false, 0
	}
	penalty = sharedPenalty(comp)
	if !compilecost.SharedPays(n, per, chunk, decoded, penalty) {
		return "", false, penalty
	}
	return fmt.Sprintf("%s; the rung compiles as a shared graph (up to %d tokens per call)", compilecost.SharedWhy(n, per, chunk, decoded, penalty), chunk), true, penalty
}

// DecodeSpec is the spec of the graph a rung of this capacity decodes
// with: one token per call, or in prefill mode shared 1 to chunk tokens.
func DecodeSpec(capacity int, mode PrefillMode, chunk int) model.GraphSpec {
	if mode == PrefillShared {
		return model.GraphSpec{Capacity: capacity, Chunk: chunk, Shared: true}
	}
	return model.GraphSpec{Capacity: capacity, Chunk: 1}
}

// resolvePrefill is the mode a ladder runs: the zero value is graph when a
// prefill chunk is set (the behaviour before modes existed), and with a
// chunk of 1 or less there is no prefill graph to choose.
func resolvePrefill(mode PrefillMode, chunk int) (PrefillMode, error) {
	switch {
	case mode == "" && chunk > 1:
		return PrefillGraph, nil
	case mode == "" || (mode == PrefillAuto && chunk <= 1):
		return PrefillDecode, nil
	case (mode == PrefillGraph || mode == PrefillShared) && chunk <= 1:
		return "", fmt.Errorf("prefill mode %s needs a prefill chunk above 1, got %d", mode, chunk)
	}
	if _, err := ParsePrefillMode(string(mode)); err != nil {
		return "", err
	}
	return mode, nil
}

// choosePrefill records what the prompt goes through and why.
func (q *Sequence) choosePrefill(used, format string, args ...any) {
	q.s.PrefillUsed = used
	q.s.PrefillReason = fmt.Sprintf(format, args...)
}

// startPrefill decides, before the first rung is compiled, what can be
// decided without running the prompt: graph and decode modes, and in auto
// mode a prefill graph another sequence already compiled. Otherwise auto
// decides while the prompt runs (prefillAuto). It reports whether the
// prefill graph is to be compiled first.
func (q *Sequence) startPrefill() (compileFirst bool) {
	capacity := q.l.caps[q.cur]
	q.s.PrefillMode = string(q.l.prefillMode)
	if q.l.cfg.Prefill != "" {
		q.s.PrefillMode = string(q.l.cfg.Prefill)
	}
	switch q.l.prefillMode {
	case PrefillGraph:
		q.choosePrefill(PrefillUsedGraph, "prefill mode graph: the prefill graph (%d tokens per call) is compiled before the first token", q.l.cfg.PrefillChunk)
		return true
	case PrefillShared:
		q.choosePrefill(PrefillUsedShared, "prefill mode shared: the prompt goes through the first rung's graph, up to %d tokens per call; no prefill graph is compiled", q.l.cfg.PrefillChunk)
		return false
	case PrefillDecode:
		if q.l.cfg.Prefill == PrefillDecode {
			q.choosePrefill(PrefillUsedDecode, "prefill mode decode: the prompt goes through the decode graph")
		} else {
			q.choosePrefill(PrefillUsedDecode, "no prefill graph: the prefill chunk is %d", q.l.cfg.PrefillChunk)
		}
		return false
	}
	why, shared, penalty := q.l.shareFirstRung(q.cur, len(q.cfg.Prompt), q.cfg.DecodeTokens)
	q.s.SharedStepPenalty = penalty
	if shared {
		q.choosePrefill(PrefillUsedShared, "%s", why)
		return false
	}
	if r := q.l.readyPrefill(capacity); r != nil {
		q.pre = r
		q.choosePrefill(PrefillUsedGraph, "the prefill graph of capacity %d was already compiled", capacity)
		return false
	}
	if len(q.cfg.Prompt) == 1 {
		q.choosePrefill(PrefillUsedDecode, "a one-token prompt is one decode step")
		q.bgPre = q.l.cfg.KeepRungs
		return false
	}
	q.auto = true
	return false
}

// prefillEstimate is the predicted compile time of the prefill graph of a
// capacity, compiled after the decode graph (the order auto mode uses), and
// where the prediction comes from, as an autoFeed of the ladder's chunk.
func (q *Sequence) prefillEstimate() autoFeed {
	capacity, chunk := q.l.caps[q.cur], q.l.cfg.PrefillChunk
	if p := q.l.cfg.CompileCost; p != nil {
		if s, ok := p.PredictKind(compilecost.Kind{Graph: compilecost.GraphPrefill, Chunk: chunk, Successor: true}, capacity); ok {
			return autoFeed{est: s, source: "from the compile-cost profile"}
		}
	}
	if s := q.l.compileSeconds(q.cur); s > 0 {
		return fromDecodeGraph(q.exe, s, model.GraphSpec{Capacity: capacity, Chunk: chunk}, q.l.comp)
	}
	return autoFeed{source: "unknown: no compile-cost profile and no decode compile measured"}
}

// fromDecodeGraph is what auto mode takes the prefill graph pre to cost
// before its first call when no compile-cost profile predicts it, and
// where that comes from: the decode graph's compile time decS (the same
// model's; a prefill graph's compile takes at least as long), unless the
// decode graph dec was imported from the compiled-rung cache. An import
// says nothing of a compile: its time decS is then only a lower bound,
// and exact, asked for where that bound pays, looks further (building
// pre's IR to find its cache key takes SmolLM2 11 ms): decS where pre is
// cached too, else the decode graph's compile time as its cache entry
// records it, else nothing (+Inf: the prefill graph never pays). A warm
// SmolLM2 start had imported its decode graph in 0.11 s, taken that as the
// prefill graph's cost, and compiled it for 1.0 s and 120 MiB for 14
// prompt tokens that the decode graph took in 0.12 s.
func fromDecodeGraph(dec Executable, decS float64, pre model.GraphSpec, comp Compiler) autoFeed {
	o, ok := dec.(OriginReporter)
	if !ok || o.Origin().Source != OriginImported {
		return autoFeed{est: decS, source: fmt.Sprintf("taken to be at least the %.2f s the decode graph's compile took", decS)}
	}
	exact := func() (float64, string) {
		if c, ok := comp.(CacheChecker); ok && c.Cached(pre) {
			return decS, fmt.Sprintf("taken to be at least the %.2f s the decode graph's import took: the prefill graph is cached too", decS)
		}
		if s := o.Origin().CompiledS; s > 0 {
			return s, fmt.Sprintf("taken to be at least the %.2f s the decode graph's compile took, as the rung cache recorded it", s)
		}
		return math.Inf(1), "unknown: the decode graph was imported and the prefill graph is not cached"
	}
	return autoFeed{est: decS, source: fmt.Sprintf("at least the %.2f s the decode graph's import took", decS), exact: exact}
}

// prefillAuto feeds the prompt through the first rung's decode graph a
// call at a time (one token, or a kernel graph's StepTokens). After every
// call (from the second on: the first call pays one-time costs) it
// compares the rest of the prompt through the decode graph, at the
// measured call time, with compiling the prefill graph
// and running the rest through it; when the prefill graph wins it is
// compiled (in the foreground: the first token waits for it) and takes the
// rest of the prompt. A short prompt never waits for a prefill graph; on a
// shared ladder (KeepRungs) the prefill graph is then compiled in the
// background for the prompts to come (bgPre, after the next rung's
// compile, which has a deadline). It returns the compile time spent.
func (q *Sequence) prefillAuto(ctx context.Context) (compileS float64, err error) {
	prompt, chunk := q.cfg.Prompt, q.l.cfg.PrefillChunk
	r, exe := q.l.rungs[q.cur], q.exe
	feed := q.prefillEstimate()
	feed.chunk, feed.per = chunk, StepTokens(exe)
	failed := false // the prefill graph failed to compile: the decode graph takes the rest
	for k := 0; k < len(prompt); k += feed.calls() {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		end := min(k+feed.calls(), len(prompt))
		var dt float64
		err := r.run(exe, q.kv, func() error {
			t0 := q.now()
			logits, err := promptStep(exe, prompt, k, end)
			dt = q.now().Sub(t0).Seconds()
			if logits != nil {
				q.logits = append(q.logits[:0], logits...)
			}
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("prompt tokens %d..%d through the decode graph: %w", k, end-1, err)
		}
		q.s.PrefillDecodeTokens = end
		why, pays := feed.fed(k, end, dt, len(prompt))
		if !pays || failed {
			continue
		}
		q.choosePrefill(PrefillUsedSwitch, "%s", why)
		t0 := q.now()
		pr, pexe, err := q.l.prefillGraph(q.l.caps[q.cur])
		compileS += q.now().Sub(t0).Seconds()
		if err != nil {
			if ctx.Err() != nil {
				return compileS, err
			}
			// The decode graph can take the rest: a failed prefill graph
			// costs time, not the run.
			failed = true
			q.note("prefill graph failed to compile (%v); the rest of the prompt goes through the decode graph", err)
			q.choosePrefill(PrefillUsedDecode, "the prefill graph failed to compile after %d prompt tokens; the decode graph took the rest", end)
			continue
		}
		q.pre = pr
		err = pr.run(pexe, q.kv, func() error {
			logits, err := PrefillFrom(pexe, prompt, end)
			q.logits = append(q.logits[:0], logits...)
			return err
		})
		return compileS, err
	}
	if failed {
		return compileS, nil
	}
	q.choosePrefill(PrefillUsedDecode, "%s", feed.stayedReason(len(prompt)))
	q.bgPre = q.l.cfg.KeepRungs
	return 0, nil
}

// autoFeed is auto mode's account of a prompt fed through the decode graph
// a call at a time (per tokens each, StepTokens), shared by sequences and
// Generate: the mean call time (the first call pays one-time costs and is
// left out) and, after each call, whether the prefill graph now pays for
// the rest (prefillGraphPays) and why.
type autoFeed struct {
	per    int     // tokens per decode call (0: 1)
	chunk  int     // tokens per prefill call
	est    float64 // the prefill graph's compile, estimated, s
	source string  // where est comes from
	// exact, when set, is a costlier estimate of which est is a lower
	// bound: asked for once, when est says the prefill graph pays.
	exact   func() (float64, string)
	stepSum float64
	steps   int
	first   float64 // the first call's time, s: the pace when it was the only one
}

// calls is a's tokens per decode call.
func (a *autoFeed) calls() int { return max(a.per, 1) }

// fed records the time dt of the decode call that took prompt tokens
// s..end-1 of n; when the prefill graph should take the tokens left, pays
// is true and why says so.
func (a *autoFeed) fed(s, end int, dt float64, n int) (why string, pays bool) {
	if s > 0 {
		a.stepSum += dt
		a.steps++
	} else {
		a.first = dt
	}
	rest := n - end
	if rest == 0 || a.steps == 0 {
		return "", false
	}
	step := a.stepSum / float64(a.steps)
	feed, graph, pays := prefillGraphPays(rest, a.calls(), a.chunk, step, a.est)
	if pays && a.exact != nil {
		a.est, a.source = a.exact()
		a.exact = nil
		feed, graph, pays = prefillGraphPays(rest, a.calls(), a.chunk, step, a.est)
	}
	if !pays {
		return "", false
	}
	return fmt.Sprintf("after %d prompt tokens through the decode graph (%s), the %d left would take %.2f s there against %.2f s to compile the prefill graph (%.2f s, %s) and run them through it",
		end, a.pace(), rest, feed, graph, a.est, a.source), true
}

// pace is the mean decode call's time, as a prompt's tokens saw it (the
// first call's where it was the only one).
func (a *autoFeed) pace() string {
	ms := 1000 * a.stepSum / float64(max(a.steps, 1))
	if a.steps == 0 {
		ms = 1000 * a.first
	}
	if a.calls() == 1 {
		return fmt.Sprintf("%.1f ms each", ms)
	}
	return fmt.Sprintf("%.1f ms a call of up to %d", ms, a.calls())
}

// stayedReason says why all n prompt tokens stayed on the decode graph.
func (a *autoFeed) stayedReason(n int) string {
	if math.IsInf(a.est, 1) {
		return fmt.Sprintf("the %d prompt tokens went through the decode graph (%s): what compiling the prefill graph would cost is %s",
			n, a.pace(), a.source)
	}
	return fmt.Sprintf("the %d prompt tokens went through the decode graph (%s) in less time than the prefill graph would take to compile (%.2f s, %s)",
		n, a.pace(), a.est, a.source)
}

// prefillGraphPays is auto mode's one rule: the rest of a prompt goes
// through the decode graph in calls of per tokens at step seconds a call
// (feed) unless compiling the prefill graph (est seconds) and running the
// rest through it in chunks, each taken to cost one decode call (graph),
// is faster.
func prefillGraphPays(rest, per, chunk int, step, est float64) (feed, graph float64, pays bool) {
	feed = float64(compilecost.PromptCalls(rest, per)) * step
	graph = est + float64(compilecost.PromptCalls(rest, chunk))*step
	return feed, graph, feed > graph
}

// PrefillFrom feeds prompt[start:] through exe in calls of StepTokens, at
// their positions, and returns the logits after the last prompt token; the
// cache must already hold the rows of positions before start.
func PrefillFrom(exe Executable, prompt []int64, start int) ([]float32, error) {
	chunk := StepTokens(exe)
	var logits []float32
	for s := start; s < len(prompt); s += chunk {
		var err error
		if logits, err = promptStep(exe, prompt, s, min(s+chunk, len(prompt))); err != nil {
			return nil, err
		}
	}
	return logits, nil
}

// promptStep runs the prompt's tokens s..end-1 through exe: Step for the
// call that ends the prompt, whose logits are the prompt's, Feed before it
// (nil logits).
func promptStep(exe Executable, prompt []int64, s, end int) ([]float32, error) {
	if end < len(prompt) {
		return nil, Feed(exe, prompt[s:end], s)
	}
	return exe.Step(prompt[s:end], s)
}

// Feed runs ids through exe from position start as Step does, for a
// caller that reads no logits (a prompt's tokens before its last): through
// Feeder.Feed where exe has it.
func Feed(exe Executable, ids []int64, start int) error {
	if f, ok := exe.(Feeder); ok {
		return f.Feed(ids, start)
	}
	_, err := exe.Step(ids, start)
	return err
}
