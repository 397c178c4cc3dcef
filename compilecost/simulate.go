package compilecost

import (
	"fmt"
	"slices"

	"github.com/ovtoolkit/ovrun/ladder"
)

// SimRung is the predicted timeline of one rung. Times ending in _start_s
// or _end_s are offsets from process start; the rest are durations.
type SimRung struct {
	// Capacity is the rung's capacity.
	Capacity int `json:"capacity"`
	// CompileS is the compile time.
	CompileS float64 `json:"compile_s"`
	// CompileStartS is when the compile started.
	CompileStartS float64 `json:"compile_start_s"`
	// CompileEndS is when the compile finished (the graph was ready).
	CompileEndS float64 `json:"compile_end_s"`
	// Foreground reports a blocking compile: up front, or at a lazy
	// boundary. Background compiles run while another rung decodes.
	Foreground bool `json:"foreground"`
	// Lookahead is how many rungs ahead a background compile was launched
	// (0 for foreground compiles).
	Lookahead int `json:"lookahead,omitempty"`
	// Deadline is the one-ahead deadline of a background compile.
	Deadline *Deadline `json:"deadline,omitempty"`
	// ReadyAtBoundary reports that the graph was compiled when the first
	// step needing it arrived (always true for the first rung).
	ReadyAtBoundary bool `json:"ready_at_boundary"`
	// WaitS is the boundary wait for this rung's graph.
	WaitS float64 `json:"wait_s"`
	// MigrateS is the time to move KV into this rung.
	MigrateS float64 `json:"migrate_s"`
	// MigrateBytes is the live KV moved into this rung (0 for grow-remap
	// and for the first rung).
	MigrateBytes int64 `json:"migrate_bytes"`
	// FirstStep is the first decode step (0-based) run on this rung, -1 if none.
	FirstStep int `json:"first_step"`
	// LastStep is the last decode step run on this rung, -1 if none.
	LastStep int `json:"last_step"`
	// DecodeStartS is when the rung's decode window began.
	DecodeStartS float64 `json:"decode_start_s"`
	// DecodeEndS is when its last step ended (the boundary, or the end).
	DecodeEndS float64 `json:"decode_end_s"`
	// DecodeS is the time inside its decode steps.
	DecodeS float64 `json:"decode_s"`
	// TokensPerS is its steps divided by DecodeS (0 when none ran).
	TokensPerS float64 `json:"tokens_per_s"`
}

// SimResult is the predicted timeline and totals of one run. When the
// config is invalid only the echoed inputs and Error are set.
type SimResult struct {
	// Policy echoes SimConfig.Policy.
	Policy string `json:"policy"`
	// Ladder echoes SimConfig.Ladder.
	Ladder []int `json:"ladder"`
	// PromptTokens echoes SimConfig.PromptTokens.
	PromptTokens int `json:"prompt_tokens"`
	// DecodeTokens echoes SimConfig.DecodeTokens.
	DecodeTokens int `json:"decode_tokens"`
	// Steps is the number of tokens decoded.
	Steps int `json:"steps"`
	// FinishReason is "length" when Steps reached DecodeTokens and
	// "capacity" when the largest rung filled first.
	FinishReason string `json:"finish_reason,omitempty"`
	// ForegroundCompileS is compile time on the path to the first decoded token.
	ForegroundCompileS float64 `json:"foreground_compile_s"`
	// CriticalPathS is process start to the end of the last decoded token
	// (the end of prefill when nothing is decoded).
	CriticalPathS float64 `json:"critical_path_s"`
	// PrefillS is the prefill time.
	PrefillS float64 `json:"prefill_s"`
	// Prefill echoes SimConfig.Prefill; PrefillUsed is what the prompt
	// goes through (graph or decode) and PrefillReason why.
	Prefill       string `json:"prefill,omitempty"`
	PrefillUsed   string `json:"prefill_used,omitempty"`
	PrefillReason string `json:"prefill_reason,omitempty"`
	// PrefillCompileS is the prefill graph's compile, part of
	// ForegroundCompileS (0 when it is not compiled or not modelled).
	PrefillCompileS float64 `json:"prefill_compile_s"`
	// TTFTS is the time to the first token: the foreground compiles and the
	// prefill (the model's loading is not modelled).
	TTFTS float64 `json:"ttft_s"`
	// DecodeS is the time inside decode steps.
	DecodeS float64 `json:"decode_s"`
	// BoundaryWaitS is the total time steps waited at boundaries for graphs.
	BoundaryWaitS float64 `json:"boundary_wait_s"`
	// MigrateS is the total time moving KV at boundaries.
	MigrateS float64 `json:"migrate_s"`
	// BackgroundCompileS is the total time of background compiles.
	BackgroundCompileS float64 `json:"background_compile_s"`
	// OverlappedS is background compile time that ran while decode steps ran.
	OverlappedS float64 `json:"successor_compile_overlapped_s"`
	// KVReservedAvgBytes is allocated KV integrated over the decode (first
	// decode step to last token, waits and migrates included) divided by its
	// duration. With no decode steps it is the KV allocated at prefill.
	KVReservedAvgBytes float64 `json:"kv_reserved_avg_bytes"`
	// KVReservedPeakBytes is the most KV allocated at once, including the
	// moment old and new buffers coexist during a copy.
	KVReservedPeakBytes int64 `json:"kv_reserved_peak_bytes"`
	// KVLiveAvgBytes is the time-weighted average of the KV the tokens so far
	// need (a step counts the token it writes), over the same span as
	// KVReservedAvgBytes; with no decode steps, the prompt's KV.
	KVLiveAvgBytes float64 `json:"kv_live_avg_bytes"`
	// Rungs is the per-rung timeline, ascending capacity: the rungs the
	// policy compiles (all of the ladder for pyramid and grow-eager, the
	// largest for direct, the rungs the request reaches otherwise).
	Rungs []SimRung `json:"rungs"`
	// Notes explains scheduling decisions and missed deadlines.
	Notes []string `json:"notes,omitempty"`
	// Error is set, and nothing else computed, when the config is invalid.
	Error string `json:"error,omitempty"`
}

// Simulate predicts the timeline of cfg.Policy on one request.
//
// It follows the runtime: each policy's row of ladder.Rows names its
// compile schedule and KV store, and background compiles follow ladder's
// launch rule. Up-front compiles (of the first rung the prompt needs and
// every larger one) run one after another from time 0, then prefill on the
// first rung, then decode. Background compiles (grow-one-ahead, grow-remap)
// run one at a time, in launch order: rung j+1 is launched when rung j is
// bound (the first background compile when the first rung is bound, so it
// overlaps prefill; in auto prefill mode after the prompt), and rung j+2 at
// once, two ahead, when the rule says so after ladder.RateSteps steps of
// rung j (SimConfig.Lookahead = k >= 1
// replaces the rule: rung j is launched when rung j-k is bound). At a
// boundary the step waits until the successor's graph is ready, the
// successor is bound, KV is migrated (MigrateS; none for grow-remap) and
// decode continues. Lazy compiles the successor at the boundary. Decode
// steps take DecodeStepS of the current rung (of the largest for direct),
// times BackgroundSlowdown while a background compile runs.
func Simulate(cfg SimConfig) SimResult {
	res := SimResult{
		Policy:       cfg.Policy,
		Ladder:       slices.Clone(cfg.Ladder),
		PromptTokens: cfg.PromptTokens,
		DecodeTokens: cfg.DecodeTokens,
	}
	if err := cfg.Validate(); err != nil {
		res.Error = err.Error()
		return res
	}
	p, err := newPlan(cfg)
	if err == nil {
		err = p.run(&res)
	}
	if err != nil {
		out := SimResult{Policy: res.Policy, Ladder: res.Ladder, PromptTokens: res.PromptTokens, DecodeTokens: res.DecodeTokens}
		out.Error = err.Error()
		return out
	}
	return res
}

// plan holds the derived quantities of a validated config.
type plan struct {
	cfg          SimConfig
	row          ladder.Row // the policy's schedule and store
	ladder       []int      // the rungs decode may use (just the largest for direct)
	compile      []float64  // compile time per ladder index, compiled after another graph
	firstCompile []float64  // compile time per ladder index as the first compile of the process
	decodeStep   []float64  // decode step time per ladder index
	steps        int        // tokens decoded

	used, reason   string  // what the prompt goes through, and why
	prefillS       float64 // the prompt's time through it
	prefillCompile float64 // the prefill graph's compile, 0 when not compiled
	prefillFirst   bool    // the prefill graph compiles before the first rung
	r0, rEnd       int     // first and last rung decoded on
}

func newPlan(cfg SimConfig) (*plan, error) {
	p := &plan{cfg: cfg, row: ladder.Policy(cfg.Policy).Row()}
	p.ladder = p.row.Rungs(cfg.Ladder)
	maxCap := p.ladder[len(p.ladder)-1]
	p.steps = min(cfg.DecodeTokens, maxCap-cfg.PromptTokens)
	var ok bool
	if p.r0, ok = RungFor(p.ladder, cfg.PromptTokens+1); !ok {
		return nil, fmt.Errorf("%w: no rung holds the prompt", ErrInvalidSimConfig)
	}
	p.rEnd = p.r0
	if p.steps > 0 {
		p.rEnd, _ = RungFor(p.ladder, cfg.PromptTokens+p.steps)
	}
	for _, c := range p.ladder {
		p.firstCompile = append(p.firstCompile, cfg.CompileS(c))
		succ := cfg.CompileS
		if cfg.CompileSuccessorS != nil {
			succ = cfg.CompileSuccessorS
		}
		p.compile = append(p.compile, succ(c))
		p.decodeStep = append(p.decodeStep, cfg.DecodeStepS(c))
	}
	p.choosePrefill()
	if cfg.ReuseGraphs {
		last := p.r0 // the last rung that compiles
		if p.used == PrefillShared && cfg.Prefill != PrefillShared {
			last++ // the decode graph after the shared first rung
		}
		for j := last + 1; j < len(p.compile); j++ {
			p.compile[j], p.firstCompile[j] = 0, 0
		}
	}
	return p, nil
}

// choosePrefill resolves the prefill mode: what the prompt goes through,
// how long it takes, and whether the prefill graph compiles first or after
// the first rung.
func (p *plan) choosePrefill() {
	cfg := p.cfg
	viaDecode := float64(cfg.PromptTokens) * p.decodeStep[p.r0]
	succ := cfg.PrefillCompileSuccessorS
	if succ == 0 {
		succ = cfg.PrefillCompileS
	}
	decoded := min(p.steps, p.ladder[p.r0]-cfg.PromptTokens)
	switch {
	case cfg.Prefill == PrefillShared:
		p.share("prefill mode shared: the first rung is one graph that takes the prompt in chunks (taken to cost the prefill time) and decodes")
	case cfg.Prefill == PrefillAuto && cfg.SharedGraphs && SharedPays(cfg.PromptTokens, 1, cfg.chunk(), decoded, cfg.sharedPenalty()):
		p.share(SharedWhy(cfg.PromptTokens, 1, cfg.chunk(), decoded, cfg.sharedPenalty()))
	}
	if p.used != "" {
		return
	}
	switch cfg.Prefill {
	case PrefillDecode:
		p.used, p.prefillS = PrefillDecode, viaDecode
		p.reason = "prefill mode decode"
	case PrefillAuto:
		if graph := succ + cfg.PrefillS; viaDecode <= graph {
			p.used, p.prefillS = PrefillDecode, viaDecode
			p.reason = fmt.Sprintf("auto: %d prompt tokens through the decode graph take %.2f s, compiling the prefill graph and running them through it %.2f s", cfg.PromptTokens, viaDecode, graph)
		} else {
			p.used, p.prefillS, p.prefillCompile = PrefillGraph, cfg.PrefillS, succ
			p.reason = fmt.Sprintf("auto: %d prompt tokens through the decode graph would take %.2f s, compiling the prefill graph after the first rung and running them through it %.2f s", cfg.PromptTokens, viaDecode, graph)
			if succ == 0 {
				p.reason = "auto: the prefill graph, its compile not modelled (none given: an older profile)"
			}
		}
	default:
		p.used, p.prefillS, p.prefillCompile, p.prefillFirst = PrefillGraph, cfg.PrefillS, cfg.PrefillCompileS, true
		p.reason = "prefill mode graph: the prefill graph compiles before the first rung"
		if cfg.PrefillCompileS == 0 {
			p.reason += " (its compile is not modelled: none given)"
		}
	}
}

// share makes the first rung a shared graph: no prefill graph, the prompt
// in its chunks (PrefillS), and its decode steps SharedPenalty longer.
func (p *plan) share(reason string) {
	p.used, p.prefillS, p.reason = PrefillShared, p.cfg.PrefillS, reason
	p.decodeStep[p.r0] *= 1 + p.cfg.sharedPenalty()
}

// chunk is the most prompt tokens a call of the prefill or a shared graph
// takes: PrefillChunk, or the whole prompt.
func (cfg SimConfig) chunk() int {
	if cfg.PrefillChunk > 0 {
		return cfg.PrefillChunk
	}
	return max(cfg.PromptTokens, 1)
}

// sharedPenalty is SharedPenalty, or the default where none is given.
func (cfg SimConfig) sharedPenalty() float64 {
	if cfg.SharedPenalty > 0 {
		return cfg.SharedPenalty
	}
	return DefaultSharedStepPenalty
}

// first and last return the decode steps run on rung j; count their number.
func (p *plan) first(j int) int {
	if j == p.r0 {
		return 0
	}
	return p.ladder[j-1] - p.cfg.PromptTokens
}

func (p *plan) last(j int) int { return min(p.ladder[j]-p.cfg.PromptTokens-1, p.steps-1) }

func (p *plan) count(j int) int { return max(p.last(j)-p.first(j)+1, 0) }

// slowdown returns the decode step multiplier while a background compile runs.
func (p *plan) slowdown() float64 { return max(p.cfg.BackgroundSlowdown, 1) }

// copies reports whether the policy moves KV at a boundary: a copying
// store, or pyramid's repack (see Policies).
func (p *plan) copies() bool {
	return p.row.Store == ladder.StoreCopy || p.row.Policy == ladder.Pyramid
}

// migrate returns the migrate time from rung j to rung j+1; live KV at a
// boundary is exactly the old rung's capacity.
func (p *plan) migrate(j int) (float64, error) {
	if !p.copies() || p.cfg.MigrateS == nil {
		return 0, nil
	}
	from, to := p.ladder[j], p.ladder[j+1]
	m := p.cfg.MigrateS(from, to, from)
	if !finiteNonNeg(m) {
		return 0, fmt.Errorf("%w: migrate time %v from %d to %d is not a finite non-negative time", ErrInvalidSimConfig, m, from, to)
	}
	return m, nil
}

// reserved returns the KV bytes allocated while rung j is current.
func (p *plan) reserved(j int) int64 {
	if p.row.Store == ladder.StoreMax {
		return int64(p.cfg.Ladder[len(p.cfg.Ladder)-1]) * p.cfg.KVBytesPerToken
	}
	return int64(p.ladder[j]) * p.cfg.KVBytesPerToken
}

func (p *plan) background() bool { return p.row.Schedule == ladder.OneAhead }

// interval is a busy span of the background compiler.
type interval struct{ start, end float64 }

// advance returns when work seconds of decode, started at t, finish, given
// that decode runs f times slower inside the busy intervals (sorted,
// disjoint).
func advance(t, work float64, busy []interval, f float64) float64 {
	if f <= 1 {
		return t + work
	}
	for _, iv := range busy {
		if iv.end <= t {
			continue
		}
		if iv.start > t {
			free := iv.start - t
			if work <= free {
				return t + work
			}
			work -= free
			t = iv.start
		}
		room := (iv.end - t) / f
		if work <= room {
			return t + work*f
		}
		work -= room
		t = iv.end
	}
	return t + work
}

// overlap returns the length of [a, b] covered by busy.
func overlap(a, b float64, busy []interval) float64 {
	var s float64
	for _, iv := range busy {
		s += max(0, min(b, iv.end)-max(a, iv.start))
	}
	return s
}

// run fills res with the timeline.
func (p *plan) run(res *SimResult) error {
	cfg := p.cfg
	bpt := float64(cfg.KVBytesPerToken)
	P := cfg.PromptTokens
	res.Steps = p.steps
	res.FinishReason = "length"
	if p.steps < cfg.DecodeTokens {
		res.FinishReason = "capacity"
	}
	res.PrefillS = p.prefillS
	res.Prefill, res.PrefillUsed, res.PrefillReason, res.PrefillCompileS = cfg.Prefill, p.used, p.reason, p.prefillCompile

	rungs := map[int]*SimRung{} // by ladder index
	newRung := func(j int) *SimRung {
		r := &SimRung{Capacity: p.ladder[j], CompileS: p.compile[j], FirstStep: -1, LastStep: -1}
		rungs[j] = r
		return r
	}

	// Up-front compiles: the first rung, and for an up-front schedule every
	// larger one (the runtime never compiles a rung below the first).
	var t float64
	upFront := []int{p.r0}
	if p.row.Schedule == ladder.UpFront {
		upFront = upFront[:0]
		for j := p.r0; j < len(p.ladder); j++ {
			upFront = append(upFront, j)
		}
	}
	// The first compile of the process costs its first-compile time; every
	// later one its successor time. The prefill graph compiles first in
	// graph mode, after the first rung when auto chooses it.
	firstDone := false
	if p.prefillFirst && p.prefillCompile > 0 {
		t += p.prefillCompile
		firstDone = true
	}
	for _, j := range upFront {
		r := newRung(j)
		r.Foreground = true
		if !firstDone {
			r.CompileS = p.firstCompile[j]
			firstDone = true
		}
		r.CompileStartS, r.CompileEndS = t, t+r.CompileS
		t = r.CompileEndS
	}
	if !p.prefillFirst {
		t += p.prefillCompile
	}
	res.ForegroundCompileS = t

	// Background schedule: one ahead (or SimConfig.Lookahead ahead) at each
	// bind; the rule's two-ahead launches are made while decoding, below.
	var deadlines map[int]Deadline
	if p.background() {
		ds, err := p.deadlines()
		if err != nil {
			return err
		}
		deadlines = map[int]Deadline{}
		for _, d := range ds {
			j, _ := RungFor(p.ladder, d.Capacity)
			deadlines[j] = d
		}
	}
	ahead := max(cfg.Lookahead, 1)
	bind := map[int]float64{p.r0: t}
	var busy []interval
	nextBG := p.r0 + 1
	var bgFree float64 // when the background compiler is next idle
	launch := func(j, ahead int, at float64) {
		r := newRung(j)
		r.Lookahead = ahead
		d := deadlines[j]
		r.Deadline = &d
		r.CompileStartS = max(at, bgFree)
		r.CompileEndS = r.CompileStartS + p.compile[j]
		bgFree = r.CompileEndS
		busy = append(busy, interval{r.CompileStartS, r.CompileEndS})
		res.BackgroundCompileS += p.compile[j]
		nextBG++
	}
	scheduleBackground := func(current int) {
		for p.background() && nextBG <= p.rEnd {
			j := nextBG
			anchor := max(j-ahead, p.r0)
			if anchor > current {
				return
			}
			if d := deadlines[j]; cfg.Lookahead == 0 && !d.Met {
				why := "stays one ahead"
				if j-2 < p.r0 {
					why = "no earlier rung to launch from"
				}
				res.Notes = append(res.Notes, fmt.Sprintf("rung %d: one-ahead deadline misses by %.2f s; %s", d.Capacity, -d.SlackS, why))
			}
			launch(j, ahead, bind[anchor])
		}
	}
	// twoAhead applies the launch rule on rung j, decoding from start: once
	// ladder.RateSteps steps are measured, rung j+2 goes two ahead when its
	// compile does not fit rung j+1's window.
	twoAhead := func(j int, start float64) {
		two := j + 2
		if !p.background() || cfg.Lookahead != 0 || nextBG != two || two > p.rEnd || p.count(j) < ladder.RateSteps {
			return
		}
		at := advance(start, float64(ladder.RateSteps)*p.decodeStep[j], busy, p.slowdown())
		step := (at - start) / ladder.RateSteps
		if !ladder.LaunchTwoAhead(p.ladder, j, step, p.compile[two]) {
			return
		}
		note := fmt.Sprintf("rung %d: predicted compile %.2f s exceeds rung %d's %.2f s decode window; launching it two ahead",
			p.ladder[two], p.compile[two], p.ladder[j+1], ladder.TwoAheadWindow(p.ladder, j, step))
		if d := deadlines[two]; !d.Met {
			note = fmt.Sprintf("rung %d: one-ahead deadline misses by %.2f s; launching two ahead", d.Capacity, -d.SlackS)
		}
		res.Notes = append(res.Notes, note)
		launch(two, 2, at)
	}

	// Prefill, then decode rung by rung.
	rungs[p.r0].ReadyAtBoundary = true
	t += p.prefillS
	res.TTFTS = t
	if cfg.Prefill == PrefillAuto {
		bind[p.r0] = t // auto binds the first rung once the prompt is done
	}
	decodeStart := t
	var reservedInt, liveInt float64
	peak := p.reserved(p.r0)
	for j := p.r0; j <= p.rEnd; j++ {
		scheduleBackground(j)
		twoAhead(j, t)
		r := rungs[j]
		r.DecodeStartS = t
		n, f0 := p.count(j), p.first(j)
		if n > 0 {
			r.FirstStep, r.LastStep = f0, p.last(j)
		}
		step := p.decodeStep[j]
		prev := t
		for k := range n {
			end := advance(r.DecodeStartS, float64(k+1)*step, busy, p.slowdown())
			liveInt += (end - prev) * float64(P+f0+k+1) * bpt
			prev = end
		}
		t = prev
		r.DecodeEndS = t
		r.DecodeS = t - r.DecodeStartS
		if r.DecodeS > 0 {
			r.TokensPerS = float64(n) / r.DecodeS
		}
		res.DecodeS += r.DecodeS
		res.OverlappedS += overlap(r.DecodeStartS, r.DecodeEndS, busy)
		reservedInt += r.DecodeS * float64(p.reserved(j))
		if j == p.rEnd {
			break
		}

		// Boundary into rung j+1: wait for the graph, bind, migrate.
		next := rungs[j+1]
		if cfg.Policy == PolicyLazy {
			next = newRung(j + 1)
			next.Foreground = true
			next.CompileStartS, next.CompileEndS = t, t+p.compile[j+1]
		}
		live := float64(p.ladder[j]) * bpt // the old rung is full
		if wait := next.CompileEndS - t; wait > deadlineTol {
			next.WaitS = wait
			res.BoundaryWaitS += wait
			reservedInt += wait * float64(p.reserved(j))
			liveInt += wait * live
			t = next.CompileEndS
			if p.background() {
				res.Notes = append(res.Notes, fmt.Sprintf("rung %d: not ready at boundary; waited %.2f s", next.Capacity, wait))
			}
		} else {
			next.ReadyAtBoundary = true
		}
		bind[j+1] = t
		m, err := p.migrate(j)
		if err != nil {
			return err
		}
		next.MigrateS = m
		res.MigrateS += m
		var during int64
		switch {
		case p.copies() && cfg.Policy != PolicyPyramid:
			next.MigrateBytes = int64(p.ladder[j]) * cfg.KVBytesPerToken
			during = p.reserved(j) + p.reserved(j+1)
		case cfg.Policy == PolicyPyramid:
			next.MigrateBytes = int64(p.ladder[j]) * cfg.KVBytesPerToken
			during = p.reserved(j)
		default: // remap: the new mapping replaces the old at once
			during = p.reserved(j + 1)
		}
		peak = max(peak, during)
		reservedInt += m * float64(during)
		liveInt += m * live
		t += m
	}
	res.CriticalPathS = t
	res.KVReservedPeakBytes = peak
	if span := t - decodeStart; span > 0 {
		res.KVReservedAvgBytes = reservedInt / span
		res.KVLiveAvgBytes = liveInt / span
	} else {
		res.KVReservedAvgBytes = float64(p.reserved(p.r0))
		res.KVLiveAvgBytes = float64(P) * bpt
	}
	for j := range p.ladder {
		if r, ok := rungs[j]; ok {
			res.Rungs = append(res.Rungs, *r)
		}
	}
	return nil
}
