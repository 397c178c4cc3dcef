package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/model"
)

// ErrCompile reports a graph that could not be compiled, even after the
// foreground retry.
var ErrCompile = errors.New("compile failed")

// RunConfig is one decode across a ladder.
type RunConfig struct {
	Ladder       Ladder
	Policy       Policy
	Prompt       []int64
	DecodeTokens int     // decode steps
	Forced       []int64 // teacher-forced inputs, one per decode step; nil decodes greedily
	Verify       bool    // compare the first step after every switch with a control that never switched
	PrefillChunk int     // tokens per prefill call; <= 1 prefills through the decode graph
	Background   BackgroundOptions
	Decoding     // token choice, end-of-generation and streaming; greedy by default

	// ProcessStart is the origin of every *_start_s / *_end_s offset.
	ProcessStart time.Time
	// Progress, when set, is called after every decode step and while
	// waiting at a boundary.
	Progress func(Progress)
	// CompileCost, when set, gives per-rung compile budgets: successor
	// deadlines are predicted from it and a rung that cannot be compiled
	// within its one-ahead window is launched two ahead.
	CompileCost *compilecost.Profile
	// Clock replaces time.Now (tests use a simulated clock to check the
	// time-weighted KV accounting against analytic values).
	Clock func() time.Time
}

// Progress is the state of a run for a live display.
type Progress struct {
	Step, Total int
	Capacity    int
	TokensPerS  float64 // decode rate of the current rung
	Next        string  // state of the next rung's compile
	Waiting     bool    // blocked at a boundary
}

// run holds the state of one Run call.
type run struct {
	cfg   RunConfig
	comp  Compiler
	shape KVShape
	ctx   context.Context
	sch   *scheduler
	s     *Summary

	policy  Policy // the policy in effect (grow-remap may fall back)
	rungs   []int
	jobs    []*compileJob
	prefJob *compileJob // prefill graph of the first rung, when used
	cur     int
	buf     *KVBuffer
	kv      *KV
	exe     Executable
	meter   kvMeter
	fed     []int64 // every token fed so far: prompt, then decode inputs
	stopped bool    // the last prediction ended the generation

	decodeWindows [][2]time.Time
	windowStart   time.Time
	verifyS       float64
	control       *verifier
	lastSample    time.Time
	budgets       *budgets
}

// Run decodes cfg.DecodeTokens steps across the ladder under cfg.Policy and
// returns the summary. On failure or cancellation the summary is still
// returned, complete up to the last decoded token, with FinishReason and
// Error set.
func Run(ctx context.Context, comp Compiler, shape KVShape, cfg RunConfig) (*Summary, error) {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.ProcessStart.IsZero() {
		cfg.ProcessStart = cfg.Clock()
	}
	r := &run{cfg: cfg, policy: cfg.Policy, comp: comp, shape: shape, ctx: ctx, budgets: newBudgets(cfg.CompileCost), s: &Summary{
		Policy: string(cfg.Policy), Ladder: cfg.Ladder, PromptTokens: len(cfg.Prompt),
		DecodeTokens: cfg.DecodeTokens, TeacherForced: cfg.Forced != nil,
		Predictions: []int64{}, Rungs: []RungSummary{}, Boundaries: []BoundarySummary{},
		Compiles: []CompileRecord{}, KVTimeline: []KVSample{}, KVMeasured: "allocated",
	}}
	r.s.RunStartS = r.off(r.now())
	if err := r.validate(); err != nil {
		r.s.FinishReason, r.s.Error = "error", err.Error()
		return r.s, err
	}
	r.sch = newScheduler(ctx, comp, cfg.Background, len(r.rungs)+2, cfg.Clock)
	err := r.execute()
	err = errors.Join(err, r.release())
	if terr := r.sch.threadError(); terr != nil {
		r.note("background compile thread options not applied: %v", terr)
	}
	r.finish(err)
	return r.s, err
}

func (r *run) validate() error {
	c := r.cfg
	if _, err := ParsePolicy(string(c.Policy)); err != nil {
		return err
	}
	if len(c.Ladder) == 0 {
		return errors.New("the ladder is empty")
	}
	if len(c.Prompt) == 0 {
		return errors.New("the prompt is empty")
	}
	if c.DecodeTokens < 1 {
		return fmt.Errorf("decode tokens must be at least 1, got %d", c.DecodeTokens)
	}
	if c.Forced != nil && len(c.Forced) < c.DecodeTokens {
		return fmt.Errorf("%d teacher-forced tokens for %d decode steps", len(c.Forced), c.DecodeTokens)
	}
	// The first decode step writes position len(prompt): it needs one slot more.
	first, ok := c.Ladder.RungFor(len(c.Prompt) + 1)
	if !ok {
		return fmt.Errorf("%w: a prompt of %d tokens plus one decoded token needs %d slots; the largest rung holds %d",
			ErrCapacity, len(c.Prompt), len(c.Prompt)+1, c.Ladder.Max())
	}
	if c.Policy == GrowRemap {
		if v, ok := r.comp.(interface{ HostViews() bool }); ok && !v.HostViews() {
			r.policy = GrowOneAhead
			r.s.RemapFallback = true
			r.note("grow-remap: this device cannot bind views of host memory as graph inputs; fell back to copy-and-grow (grow-one-ahead's KV path)")
		}
	}
	if c.Policy == Direct {
		r.rungs = []int{c.Ladder.Max()}
		r.cur = 0
	} else {
		r.rungs = append([]int(nil), c.Ladder...)
		r.cur = first
	}
	r.jobs = make([]*compileJob, len(r.rungs))
	for _, capacity := range r.rungs {
		r.s.Rungs = append(r.s.Rungs, RungSummary{Capacity: capacity, FirstStep: -1, LastStep: -1})
	}
	if need := len(c.Prompt) + c.DecodeTokens; need > c.Ladder.Max() {
		r.note("prompt %d + decode %d tokens need %d slots; the largest rung holds %d, so decoding stops at capacity",
			len(c.Prompt), c.DecodeTokens, need, c.Ladder.Max())
	}
	return nil
}

func (r *run) now() time.Time { return r.cfg.Clock() }

func (r *run) off(t time.Time) float64 { return t.Sub(r.cfg.ProcessStart).Seconds() }

func (r *run) note(format string, args ...any) {
	r.s.Notes = append(r.s.Notes, fmt.Sprintf(format, args...))
}

func (r *run) decodeSpec(i int) model.GraphSpec {
	return model.GraphSpec{Capacity: r.rungs[i], Chunk: 1}
}

// execute is the run proper: foreground compiles, prefill, decode loop.
func (r *run) execute() error {
	if err := r.compileForeground(); err != nil {
		return err
	}
	if err := r.allocate(); err != nil {
		return err
	}
	r.launchSuccessor()
	if err := r.prefill(); err != nil {
		return err
	}
	return r.decode()
}

// compileForeground compiles what each policy needs before the first token.
func (r *run) compileForeground() error {
	t0 := r.now()
	defer func() { r.s.ForegroundCompileS = r.now().Sub(t0).Seconds() }()
	if r.cfg.PrefillChunk > 1 {
		j := r.sch.foreground(model.GraphSpec{Capacity: r.rungs[r.cur], Chunk: r.cfg.PrefillChunk})
		r.record(j, "prefill", 1)
		r.prefJob = j
		if j.err != nil {
			return r.compileFailed(j)
		}
	}
	last := r.cur
	if r.policy.upFront() {
		last = len(r.rungs) - 1
	}
	for i := r.cur; i <= last; i++ {
		j := r.sch.foreground(r.decodeSpec(i))
		r.jobs[i] = j
		r.recordRung(i, j, 1)
		if j.err != nil {
			return r.compileFailed(j)
		}
	}
	return nil
}

func (r *run) compileFailed(j *compileJob) error {
	if errors.Is(j.err, context.Canceled) {
		return j.err
	}
	return fmt.Errorf("%w: %w", ErrCompile, j.err)
}

// record adds a compile attempt to the summary.
func (r *run) record(j *compileJob, kind string, attempt int) {
	c := CompileRecord{Capacity: j.spec.Capacity, Chunk: j.spec.Chunk, Kind: kind, Foreground: !j.background,
		Attempt: attempt, StartS: r.off(j.start), EndS: r.off(j.end), CompileS: j.seconds()}
	if j.err != nil {
		c.Error = j.err.Error()
	}
	if x, ok := j.exe.(interface{ IRBytes() int }); ok {
		c.IRBytes = x.IRBytes()
	}
	r.s.Compiles = append(r.s.Compiles, c)
}

// recordRung copies a finished decode-graph compile into the rung summary.
func (r *run) recordRung(i int, j *compileJob, attempt int) {
	r.record(j, "decode", attempt)
	rs := &r.s.Rungs[i]
	rs.Compiled = j.err == nil
	rs.CompileS, rs.CompileStartS, rs.CompileEndS = j.seconds(), r.off(j.start), r.off(j.end)
	rs.Foreground = !j.background
	rs.CompileAttempts = attempt
	rs.CompileError = ""
	if j.err != nil {
		rs.CompileError = j.err.Error()
	}
}

// allocate reserves the KV for the first rung: the largest capacity for
// shared-buffer policies (committed, except for grow-remap), else the
// first rung's.
func (r *run) allocate() error {
	capacity, commit := r.rungs[r.cur], true
	if r.policy.sharedKV() {
		capacity = r.rungs[len(r.rungs)-1]
		commit = r.policy != GrowRemap
	}
	if r.policy == GrowRemap {
		r.s.KVMeasured = "committed"
	}
	buf, err := AllocKV(r.shape, capacity, commit)
	if err != nil {
		return err
	}
	r.buf = buf
	if r.kv, err = buf.View(r.rungs[r.cur]); err != nil {
		return err
	}
	r.setReserved(r.now(), r.reservedBytes())
	return nil
}

// reservedBytes is the KV the policy holds: allocated sizes, or for
// grow-remap the pages actually resident.
func (r *run) reservedBytes() int64 {
	if r.policy == GrowRemap {
		if n, err := r.buf.Committed(); err == nil {
			return n
		}
	}
	return r.buf.Bytes()
}

func (r *run) setReserved(t time.Time, bytes int64) {
	r.meter.setReserved(t, bytes)
	r.sample(t, true)
}

// sample appends a KV timeline point, at most about every 10 ms unless forced.
func (r *run) sample(t time.Time, force bool) {
	if !force && t.Sub(r.lastSample) < 10*time.Millisecond {
		return
	}
	r.lastSample = t
	r.s.KVTimeline = append(r.s.KVTimeline, KVSample{TS: r.off(t), ReservedBytes: r.meter.reserved, LiveBytes: r.meter.live})
}

// launchSuccessor queues the next rung's compile for background policies.
func (r *run) launchSuccessor() {
	next := r.cur + 1
	if !r.policy.background() || next >= len(r.rungs) || r.jobs[next] != nil {
		return
	}
	r.jobs[next] = r.sch.background(r.decodeSpec(next))
	r.budgetLaunch(next)
}

func (r *run) prefill() error {
	exe := r.jobs[r.cur].exe
	if r.prefJob != nil {
		exe = r.prefJob.exe
	}
	if err := exe.Bind(r.kv); err != nil {
		return err
	}
	t0 := r.now()
	r.s.PrefillStartS = r.off(t0)
	logits, err := Prefill(exe, r.cfg.Prompt)
	if err != nil {
		return err
	}
	t1 := r.now()
	r.s.PrefillEndS = r.off(t1)
	r.s.PrefillS = t1.Sub(t0).Seconds()
	if err := checkFinite(r.comp, logits, "after the prompt"); err != nil {
		return err
	}
	r.fed = append(r.fed, r.cfg.Prompt...)
	r.stopped = r.predict(logits)
	r.exe = r.jobs[r.cur].exe
	if err := r.exe.Bind(r.kv); err != nil {
		return err
	}
	if err := r.sch.drop(r.prefJob); err != nil { // prompts are processed once
		return err
	}
	r.meter.setLive(t1, int64(len(r.fed))*r.shape.TokenBytes())
	r.meter.begin(t1)
	r.setReserved(t1, r.reservedBytes())
	r.windowStart = t1
	r.s.Rungs[r.cur].DecodeStartS = r.off(t1)
	return nil
}

// decode runs the decode steps, switching rungs at boundaries.
func (r *run) decode() error {
	P := len(r.cfg.Prompt)
	if r.stopped {
		r.s.FinishReason = "stop"
		return nil
	}
	for i := 1; i <= r.cfg.DecodeTokens; i++ {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		p := P + i - 1 // position of this step's input token
		verify := false
		if p >= r.rungs[r.cur] {
			if r.cur+1 == len(r.rungs) {
				r.s.FinishReason = "capacity"
				r.note("stopped after %d of %d decode steps: the largest rung (%d) is full", i-1, r.cfg.DecodeTokens, r.rungs[r.cur])
				return nil
			}
			if err := r.boundary(i); err != nil {
				return err
			}
			verify = r.cfg.Verify
		}
		tok := r.s.Predictions[i-1]
		if r.cfg.Forced != nil {
			tok = r.cfg.Forced[i-1]
		}
		t0 := r.now()
		logits, err := r.exe.Step([]int64{tok}, p)
		t1 := r.now()
		if err != nil {
			return fmt.Errorf("decode step %d at position %d: %w", i, p, err)
		}
		if err := checkFinite(r.comp, logits, fmt.Sprintf("at decode step %d", i)); err != nil {
			return err
		}
		rs := &r.s.Rungs[r.cur]
		rs.DecodeS += t1.Sub(t0).Seconds()
		r.s.DecodeS += t1.Sub(t0).Seconds()
		if rs.FirstStep < 0 {
			rs.FirstStep = i
		}
		rs.LastStep = i
		r.s.DecodedTokens = i
		r.fed = append(r.fed, tok)
		r.stopped = r.predict(logits)
		if verify {
			if err := r.verifyStep(i, logits); err != nil {
				return err
			}
		}
		r.meter.setLive(t1, int64(len(r.fed))*r.shape.TokenBytes())
		if r.policy == GrowRemap {
			r.meter.setReserved(t1, r.reservedBytes())
		}
		r.sample(t1, false)
		r.planAhead()
		r.progress(i, false)
		if r.stopped {
			r.s.FinishReason = "stop"
			return nil
		}
	}
	r.s.FinishReason = "length"
	return nil
}

// predict records the token chosen after logits and reports whether it ends
// the generation (never in a teacher-forced run, whose inputs are fixed).
func (r *run) predict(logits []float32) bool {
	tok, stop := r.cfg.choose(logits)
	r.s.Predictions = append(r.s.Predictions, tok)
	return stop && r.cfg.Forced == nil
}

func (r *run) progress(step int, waiting bool) {
	if r.cfg.Progress == nil {
		return
	}
	rs := r.s.Rungs[r.cur]
	p := Progress{Step: step, Total: r.cfg.DecodeTokens, Capacity: r.rungs[r.cur], Waiting: waiting}
	if rs.DecodeS > 0 && rs.FirstStep > 0 {
		p.TokensPerS = float64(rs.LastStep-rs.FirstStep+1) / rs.DecodeS
	}
	if next := r.cur + 1; next < len(r.rungs) {
		switch j := r.jobs[next]; {
		case j == nil:
			p.Next = fmt.Sprintf("%d not started", r.rungs[next])
		case j.ready() && j.err != nil:
			p.Next = fmt.Sprintf("%d failed", r.rungs[next])
		case j.ready():
			p.Next = fmt.Sprintf("%d ready", r.rungs[next])
		default:
			if ns := j.startNS.Load(); ns == 0 {
				p.Next = fmt.Sprintf("%d queued", r.rungs[next])
			} else {
				p.Next = fmt.Sprintf("%d compiling %.1fs", r.rungs[next], r.now().Sub(time.Unix(0, ns)).Seconds())
			}
		}
	}
	r.cfg.Progress(p)
}

// release waits for background compiles and frees executables and KV.
func (r *run) release() error {
	var errs []error
	if r.control != nil {
		errs = append(errs, r.control.close())
	}
	if r.sch != nil {
		errs = append(errs, r.sch.close())
	}
	errs = append(errs, r.buf.Free())
	return errors.Join(errs...)
}
