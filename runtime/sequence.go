package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ovtoolkit/ovrun/ladder"
)

// SequenceConfig is one generation on a CompiledLadder.
type SequenceConfig struct {
	Prompt       []int64
	DecodeTokens int     // decode steps after the prompt's prediction (0: that prediction only)
	Forced       []int64 // teacher-forced inputs, one per decode step; nil decodes with Decoding
	Verify       bool    // compare the first step after every switch with a control that never switched
	Decoding             // token choice, end-of-generation and streaming; greedy by default
	// ProcessStart is the origin of the summary's *_start_s / *_end_s
	// offsets; zero means the sequence's creation.
	ProcessStart time.Time
	// Progress, when set, is called after every decode step and while
	// waiting at a boundary.
	Progress func(Progress)
}

// Progress is the state of a run for a live display.
type Progress struct {
	Step, Total int
	Capacity    int
	TokensPerS  float64 // decode rate of the current rung
	Next        string  // state of the next rung's compile
	Waiting     bool    // blocked at a boundary
}

// Sequence is one generation on a CompiledLadder: its KV store, the
// positions and tokens fed so far, the rung it decodes on and its boundary
// switches, recorded in its Summary. A sequence is driven by one goroutine
// (Start, then Step until done, or Run); different sequences on one ladder
// may run concurrently.
type Sequence struct {
	l     *CompiledLadder
	cfg   SequenceConfig
	s     *Summary
	clock func() time.Time

	store   KVStore
	cur     int // rung index
	kv      *KV
	exe     Executable
	pre     *rung // prefill graph while the prompt is processed
	auto    bool  // prefill mode auto: decided while the prompt runs
	bgPre   bool  // queue the prefill graph's compile after the first token, for later prompts
	fed     []int64
	logits  []float32 // the last step's logits (a copy: the graph is shared)
	step    int       // decode steps done
	stopped bool      // the last prediction ended the generation
	started bool
	done    bool

	meter         kvMeter
	lastSample    time.Time
	decodeWindows [][2]time.Time
	windowStart   time.Time
	verifyS       float64
	control       *verifier
}

// NewSequence checks cfg against the ladder and registers the sequence;
// Close unregisters it.
func (l *CompiledLadder) NewSequence(cfg SequenceConfig) (*Sequence, error) {
	s := &Summary{Schema: SummarySchema, Policy: string(l.cfg.Policy), Ladder: l.cfg.Ladder, PromptTokens: len(cfg.Prompt),
		DecodeTokens: cfg.DecodeTokens, TeacherForced: cfg.Forced != nil,
		Predictions: []int64{}, Rungs: []RungSummary{}, Boundaries: []BoundarySummary{},
		Compiles: []CompileRecord{}, KVTimeline: []KVSample{}, KVMeasured: Allocated, RemapFallback: l.fallback}
	return l.newSequence(cfg, s)
}

// newSequence is NewSequence recording into s.
func (l *CompiledLadder) newSequence(cfg SequenceConfig, s *Summary) (*Sequence, error) {
	q := &Sequence{l: l, cfg: cfg, s: s, clock: l.cfg.Clock}
	if q.cfg.ProcessStart.IsZero() {
		q.cfg.ProcessStart = q.clock()
	}
	if len(cfg.Prompt) == 0 {
		return nil, errors.New("the prompt is empty")
	}
	if cfg.DecodeTokens < 0 {
		return nil, fmt.Errorf("decode tokens must not be negative, got %d", cfg.DecodeTokens)
	}
	if cfg.Forced != nil && len(cfg.Forced) < cfg.DecodeTokens {
		return nil, fmt.Errorf("%d teacher-forced tokens for %d decode steps", len(cfg.Forced), cfg.DecodeTokens)
	}
	// The first decode step writes position len(prompt): it needs one slot more.
	first, ok := l.caps.RungFor(len(cfg.Prompt) + 1)
	if !ok {
		return nil, fmt.Errorf("%w: a prompt of %d tokens plus one decoded token needs %d slots; the largest rung holds %d",
			ErrCapacity, len(cfg.Prompt), len(cfg.Prompt)+1, l.caps.Max())
	}
	q.cur = first
	for _, c := range l.caps {
		s.Rungs = append(s.Rungs, RungSummary{Capacity: c, FirstStep: -1, LastStep: -1})
	}
	if need := len(cfg.Prompt) + cfg.DecodeTokens; need > l.caps.Max() {
		q.note("prompt %d + decode %d tokens need %d slots; the largest rung holds %d, so decoding stops at capacity",
			len(cfg.Prompt), cfg.DecodeTokens, need, l.caps.Max())
	}
	l.register(q, first)
	return q, nil
}

// Summary is the sequence's record: its decode, waits, switches, KV and
// predictions. The compiles are the ladder's; Run adds them.
func (q *Sequence) Summary() *Summary { return q.s }

// Done reports that the sequence finished (Summary().FinishReason says why).
func (q *Sequence) Done() bool { return q.done }

func (q *Sequence) now() time.Time { return q.clock() }

func (q *Sequence) off(t time.Time) float64 { return t.Sub(q.cfg.ProcessStart).Seconds() }

func (q *Sequence) note(format string, args ...any) {
	q.s.Notes = append(q.s.Notes, fmt.Sprintf(format, args...))
}

// Run starts the sequence, unless Start already did, and decodes until it
// is done.
func (q *Sequence) Run(ctx context.Context) error {
	if !q.started {
		if err := q.Start(ctx); err != nil {
			return err
		}
	}
	for !q.done {
		if err := q.Step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Start compiles what the schedule needs before the first token (waiting
// for graphs other sequences compile), allocates the KV store and prefills
// the prompt: the first prediction is made.
func (q *Sequence) Start(ctx context.Context) error {
	if q.started {
		return errors.New("the sequence was already started")
	}
	q.started = true
	if err := q.compileForeground(ctx); err != nil {
		return err
	}
	if err := q.allocate(); err != nil {
		return err
	}
	q.progress(0, false) // its KV is reserved from now, through the prefill
	// Binding the first rung launches the next one's background compile.
	// It overlaps the prompt, except in auto mode, which may still compile
	// the prefill graph for the prompt: there the first token comes first.
	if !q.auto {
		q.l.bound(q.cur)
	}
	if err := q.prefill(ctx); err != nil {
		return err
	}
	if q.auto {
		q.l.bound(q.cur)
	}
	if q.bgPre {
		q.l.launchPrefill(q.l.caps[q.cur])
	}
	switch {
	case q.stopped:
		q.s.FinishReason, q.done = "stop", true
	case q.cfg.DecodeTokens == 0: // the prompt's prediction was all that was asked for
		q.s.FinishReason, q.done = "length", true
	}
	return nil
}

// compileForeground compiles, or waits for, what the schedule needs before
// the first token.
func (q *Sequence) compileForeground(ctx context.Context) error {
	t0 := q.now()
	defer func() { q.s.ForegroundCompileS = q.now().Sub(t0).Seconds() }()
	if q.startPrefill() {
		r, _, err := q.l.prefillGraph(q.l.caps[q.cur])
		if err != nil {
			return err
		}
		q.pre = r
	}
	last := q.l.foreground(q.cur)
	for i := q.cur; i <= last; i++ {
		_, exe, err := q.l.enter(ctx, i, false, nil)
		if err != nil {
			return err
		}
		if i == q.cur {
			q.exe = exe
		}
	}
	return nil
}

// allocate opens the KV store on the first rung.
func (q *Sequence) allocate() error {
	store, err := NewKVStore(q.l.row.Store, q.l.cfg.Shape, q.l.caps.Max())
	if err != nil {
		return err
	}
	q.store = store
	q.s.KVMeasured = store.Accounting()
	if q.kv, err = store.Open(q.l.caps[q.cur]); err != nil {
		return err
	}
	q.setReserved(q.now(), store.Reserved())
	return nil
}

func (q *Sequence) setReserved(t time.Time, bytes int64) {
	q.meter.setReserved(t, bytes)
	q.sample(t, true)
}

// sample appends a KV timeline point, at most about every 10 ms unless forced.
func (q *Sequence) sample(t time.Time, force bool) {
	if !force && t.Sub(q.lastSample) < 10*time.Millisecond {
		return
	}
	q.lastSample = t
	q.s.KVTimeline = append(q.s.KVTimeline, KVSample{TS: q.off(t), ReservedBytes: q.meter.reserved, LiveBytes: q.meter.live})
}

// prefill runs the prompt through the prefill graph or the first rung's
// decode graph, or in auto mode through the decode graph until the prefill
// graph is worth compiling (prefillAuto), and makes the first prediction.
func (q *Sequence) prefill(ctx context.Context) error {
	t0 := q.now()
	q.s.PrefillStartS = q.off(t0)
	var compileS float64
	var err error
	if q.auto {
		compileS, err = q.prefillAuto(ctx)
	} else {
		r, exe := q.l.rungs[q.cur], q.exe
		switch {
		case q.pre != nil:
			r, exe = q.pre, q.pre.job.exe
		case !r.spec.Shared:
			q.s.PrefillDecodeTokens = len(q.cfg.Prompt)
		}
		err = r.run(exe, q.kv, func() error {
			logits, err := Prefill(exe, q.cfg.Prompt)
			q.logits = append(q.logits[:0], logits...)
			return err
		})
	}
	// A prefill graph compiled while the prompt ran is foreground compile:
	// the first token waited for it.
	q.s.ForegroundCompileS += compileS
	if err != nil {
		return err
	}
	t1 := q.now()
	q.s.PrefillEndS = q.off(t1)
	q.s.TTFTS = q.s.PrefillEndS
	q.s.PrefillS = t1.Sub(t0).Seconds() - compileS
	if err := checkFinite(q.l.comp, q.logits, "after the prompt"); err != nil {
		return err
	}
	q.fed = append(q.fed, q.cfg.Prompt...)
	q.stopped = q.predict(q.logits)
	if err := q.l.rungs[q.cur].run(q.exe, q.kv, func() error { return nil }); err != nil { // bind the decode graph
		return err
	}
	pre := q.pre
	q.pre = nil
	if err := q.l.releasePrefill(pre); err != nil { // prompts are processed once
		return err
	}
	q.meter.setLive(t1, int64(len(q.fed))*q.l.cfg.Shape.TokenBytes())
	q.meter.begin(t1)
	q.setReserved(t1, q.store.Reserved())
	q.windowStart = t1
	q.s.Rungs[q.cur].DecodeStartS = q.off(t1)
	return nil
}

// Step decodes one token, switching to the next rung first when the
// current one is full. It marks the sequence done (length, stop, capacity)
// when there is nothing more to decode.
func (q *Sequence) Step(ctx context.Context) error {
	if q.done {
		return nil
	}
	if !q.started {
		return errors.New("step before the sequence was started")
	}
	i := q.step + 1
	if err := ctx.Err(); err != nil {
		return err
	}
	p := len(q.cfg.Prompt) + i - 1 // position of this step's input token
	verify := false
	if p >= q.l.caps[q.cur] {
		if q.cur+1 == len(q.l.caps) {
			q.s.FinishReason, q.done = "capacity", true
			q.note("stopped after %d of %d decode steps: the largest rung (%d) is full", i-1, q.cfg.DecodeTokens, q.l.caps[q.cur])
			return nil
		}
		if err := q.boundary(ctx, i); err != nil {
			return err
		}
		verify = q.cfg.Verify
	}
	tok := q.s.Predictions[i-1]
	if q.cfg.Forced != nil {
		tok = q.cfg.Forced[i-1]
	}
	var t0, t1 time.Time // inside the graph's lock: waiting for another sequence is not decode time
	err := q.l.rungs[q.cur].run(q.exe, q.kv, func() error {
		t0 = q.now()
		logits, err := q.exe.Step([]int64{tok}, p)
		t1 = q.now()
		q.logits = append(q.logits[:0], logits...)
		return err
	})
	if err != nil {
		return fmt.Errorf("decode step %d at position %d: %w", i, p, err)
	}
	if err := checkFinite(q.l.comp, q.logits, fmt.Sprintf("at decode step %d", i)); err != nil {
		return err
	}
	rs := &q.s.Rungs[q.cur]
	rs.DecodeS += t1.Sub(t0).Seconds()
	q.s.DecodeS += t1.Sub(t0).Seconds()
	if rs.FirstStep < 0 {
		rs.FirstStep = i
	}
	rs.LastStep = i
	q.step = i
	q.s.DecodedTokens = i
	q.fed = append(q.fed, tok)
	q.stopped = q.predict(q.logits)
	if verify {
		if err := q.verifyStep(ctx, i); err != nil {
			return err
		}
	}
	q.meter.setLive(t1, int64(len(q.fed))*q.l.cfg.Shape.TokenBytes())
	if q.store.Accounting() == Committed {
		q.meter.setReserved(t1, q.store.Reserved())
	}
	q.sample(t1, false)
	q.l.stepped(q.cur, q.stepTime(), len(q.fed), len(q.cfg.Prompt)+q.cfg.DecodeTokens)
	q.progress(i, false)
	switch {
	case q.stopped:
		q.s.FinishReason, q.done = "stop", true
	case i == q.cfg.DecodeTokens:
		q.s.FinishReason, q.done = "length", true
	}
	return nil
}

// predict records the token chosen after logits and reports whether it ends
// the generation (never in a teacher-forced run, whose inputs are fixed).
func (q *Sequence) predict(logits []float32) bool {
	tok, stop := q.cfg.choose(logits)
	q.s.Predictions = append(q.s.Predictions, tok)
	return stop && q.cfg.Forced == nil
}

// stepTime is the measured seconds per decode step of the current rung, 0
// before enough steps.
func (q *Sequence) stepTime() float64 {
	rs := q.s.Rungs[q.cur]
	if rs.FirstStep < 0 || rs.LastStep-rs.FirstStep < ladder.RateSteps-1 || rs.DecodeS <= 0 {
		return 0
	}
	return rs.DecodeS / float64(rs.LastStep-rs.FirstStep+1)
}

func (q *Sequence) progress(step int, waiting bool) {
	if q.cfg.Progress == nil {
		return
	}
	rs := q.s.Rungs[q.cur]
	p := Progress{Step: step, Total: q.cfg.DecodeTokens, Capacity: q.l.caps[q.cur], Waiting: waiting}
	if rs.DecodeS > 0 && rs.FirstStep > 0 {
		p.TokensPerS = float64(rs.LastStep-rs.FirstStep+1) / rs.DecodeS
	}
	if next := q.cur + 1; next < len(q.l.caps) {
		p.Next = q.l.state(next, q.now())
	}
	q.cfg.Progress(p)
}

// boundary switches from the current rung to the next before decode step
// step: it waits for the next rung's graph, grows the KV store into it and
// binds it.
func (q *Sequence) boundary(ctx context.Context, step int) error {
	next := q.cur + 1
	arrive := q.now()
	q.closeWindow(arrive)
	rs := &q.s.Rungs[next]
	rs.WaitStartS = q.off(arrive)
	ready, exe, err := q.l.enter(ctx, next, true, func() { q.progress(step-1, true) })
	rs.ReadyAtBoundary = ready
	if err != nil {
		return err
	}
	waited := q.now()
	rs.WaitS = waited.Sub(arrive).Seconds()
	q.s.BoundaryWaitS += rs.WaitS

	// Move the live KV into the next rung's cache.
	rs.MigrateStartS = q.off(waited)
	kv, n, err := q.store.Grow(q.l.caps[next], len(q.fed), func(b int64) { q.setReserved(q.now(), b) })
	if err != nil {
		return err
	}
	rs.MigrateBytes = n
	from := q.cur
	q.cur, q.kv, q.exe = next, kv, exe
	if err := q.l.rungs[next].run(exe, kv, func() error { return nil }); err != nil { // bind
		return err
	}
	done := q.now()
	// The context only grows: the smaller graph is never used again by this
	// sequence, and freeing it (once no other needs it) returns its memory.
	if err := q.l.move(q, next); err != nil {
		return err
	}
	rs.MigrateS = done.Sub(waited).Seconds()
	q.s.MigrateS += rs.MigrateS
	q.s.MigrateBytes += rs.MigrateBytes
	q.s.Boundaries = append(q.s.Boundaries, BoundarySummary{From: q.l.caps[from], To: q.l.caps[next], Step: step})
	q.windowStart = done
	rs.DecodeStartS = q.off(done)
	q.l.bound(next)
	return nil
}

// closeWindow ends the current rung's decode window at t.
func (q *Sequence) closeWindow(t time.Time) {
	if q.windowStart.IsZero() {
		return
	}
	q.decodeWindows = append(q.decodeWindows, [2]time.Time{q.windowStart, t})
	q.s.Rungs[q.cur].DecodeEndS = q.off(t)
	q.windowStart = time.Time{}
}

// finish closes the decode window and fills the sequence's totals at end.
func (q *Sequence) finish(end time.Time) {
	s := q.s
	q.closeWindow(end)
	s.EndS = q.off(end)
	s.CriticalPathS = end.Sub(q.cfg.ProcessStart).Seconds() - q.verifyS
	s.VerifyS = q.verifyS
	if q.meter.running {
		s.KVReservedAvgBytes, s.KVLiveAvgBytes = q.meter.averages(end)
		q.sample(end, true)
	}
	s.KVReservedPeakBytes = q.meter.peak
	s.KVLiveFinalBytes = int64(len(q.fed)) * q.l.cfg.Shape.TokenBytes()
	for i := range s.Rungs {
		rs := &s.Rungs[i]
		if rs.DecodeS > 0 {
			rs.TokensPerS = float64(rs.LastStep-rs.FirstStep+1) / rs.DecodeS
		}
	}
}

// Finish closes the books of a sequence that ended (or failed with err) on
// a shared ladder, as Run does for its one sequence: end time, KV and decode
// totals, the ladder's compiles so far, the finish reason. A server calls
// it per request, before Close.
func (q *Sequence) Finish(err error) *Summary {
	end := q.now()
	q.finish(end)
	finish(q.s, q.l, q, end, err)
	return q.s
}

// Close frees the sequence's KV and verifier and unregisters it from the
// ladder (whose graphs stay compiled for other sequences).
func (q *Sequence) Close() error {
	var errs []error
	if q.control != nil {
		errs = append(errs, q.control.close())
		q.control = nil
	}
	errs = append(errs, q.l.releasePrefill(q.pre))
	q.pre = nil
	if q.store != nil {
		errs = append(errs, q.store.Close())
		q.store = nil
	}
	q.l.unregister(q)
	return errors.Join(errs...)
}
