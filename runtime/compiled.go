package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/ladder"
	"github.com/ovtoolkit/ovrun/model"
)

// ErrCompile reports a graph that could not be compiled, even after the
// foreground retry.
var ErrCompile = errors.New("compile failed")

// LadderConfig sets up a CompiledLadder.
type LadderConfig struct {
	Ladder Ladder
	Policy Policy
	// Shape is the KV geometry of the model the compiler compiles.
	Shape KVShape
	// PrefillChunk is the static chunk of the prefill graphs (tokens per
	// prefill call); <= 1 prefills through the decode graph.
	PrefillChunk int
	// Prefill is how prompts are processed (see PrefillMode); "" is graph
	// when PrefillChunk > 1 and decode otherwise.
	Prefill    PrefillMode
	Background BackgroundOptions
	// CompileCost, when set, gives per-rung compile budgets to a one-ahead
	// schedule (see Budgeted).
	CompileCost *compilecost.Profile
	// Clock replaces time.Now.
	Clock func() time.Time
	// KeepRungs keeps every compiled graph (prefill graphs included) for
	// the sequences to come instead of freeing the rungs no open sequence
	// needs: a server's next request starts on the first rung again.
	KeepRungs bool
	// RungIdle, with KeepRungs, frees a rung other than the first that no
	// sequence has used for this long (idle.go); 0 keeps every rung.
	RungIdle time.Duration
	// Note, when set, receives every note the ladder makes (a policy
	// fallback, a compile retry, a budget decision) as it makes it, with the
	// ladder's lock held; Notes lists them afterwards.
	Note func(string)
}

// CompiledLadder is a ladder's compiled rungs, shared by every sequence
// decoding on it: it compiles each rung's decode graph when its Schedule
// says (in the caller for a foreground compile, on one background worker
// thread otherwise), retries a failed compile once in the foreground, keeps
// the compile budgets, hands a compiled rung to the sequences that reach it
// and serializes their use of it, and frees a rung once every open
// sequence has grown past it. It is safe for concurrent use by many
// sequences.
type CompiledLadder struct {
	comp     Compiler
	cfg      LadderConfig
	row      ladder.Row // the policy in effect: grow-remap may fall back to copying
	caps     Ladder     // the rungs: the whole ladder, or only its largest capacity
	fallback bool
	work     *compileWorker

	prefillMode PrefillMode // resolved from cfg.Prefill and cfg.PrefillChunk

	mu      sync.Mutex
	sched   Schedule
	budgets *Budgeted // sched when it budgets (a compile-cost profile), else nil
	rungs   []*rung
	prefill map[int]*rung // prefill graphs by capacity
	seqs    map[*Sequence]int
	records []compileAttempt
	notes   []string

	released int           // idle rungs freed (idle.go)
	idleStop chan struct{} // closed by Close: the idle loop ends
	idleDone chan struct{} // closed when the idle loop has ended
}

// rung is one graph of the ladder: a rung's decode graph, or a prefill graph.
type rung struct {
	index int // rung index; -1 for a prefill graph
	spec  model.GraphSpec

	// use serializes the sequences running the executable (it has one infer
	// request); bound is the cache bound to it now.
	use   sync.Mutex
	bound *KV

	// Guarded by the ladder's mu.
	job      *compileJob // the latest compile; nil before the first and once freed
	users    int         // prefill graphs: sequences prefilling with it
	lastUsed time.Time   // when a sequence was last on it (idle.go)
}

// compileAttempt is one compile as the ladder recorded it.
type compileAttempt struct {
	rung    int // rung index; -1 for a prefill graph
	job     *compileJob
	kind    string
	attempt int
	irBytes int
	origin  Origin
}

// NewCompiledLadder checks the policy and the ladder and starts the
// background compile worker; nothing is compiled until a sequence starts.
// Compiles run under ctx. Close frees everything it compiled.
func NewCompiledLadder(ctx context.Context, comp Compiler, cfg LadderConfig) (*CompiledLadder, error) {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if _, err := ParsePolicy(string(cfg.Policy)); err != nil {
		return nil, err
	}
	if err := ladder.Validate(cfg.Ladder); err != nil {
		return nil, err
	}
	mode, err := resolvePrefill(cfg.Prefill, cfg.PrefillChunk)
	if err != nil {
		return nil, err
	}
	l := &CompiledLadder{comp: comp, cfg: cfg, row: cfg.Policy.Row(), prefill: map[int]*rung{}, seqs: map[*Sequence]int{}, prefillMode: mode}
	if l.row.Store == ladder.StoreRemap && !hostViews(comp) {
		l.row.Store = ladder.StoreCopy
		l.fallback = true
		l.mu.Lock()
		l.notef("grow-remap: this device cannot bind views of host memory as graph inputs; fell back to copy-and-grow (grow-one-ahead's KV path)")
		l.mu.Unlock()
	}
	sched, err := NewSchedule(l.row.Schedule, cfg.CompileCost, cfg.KeepRungs)
	if err != nil {
		return nil, err
	}
	if b, ok := sched.(*Budgeted); ok {
		l.budgets = b
		b.now = cfg.Clock
		b.Cached = func(capacity int) bool { return cached(comp, DecodeSpec(capacity, mode, cfg.PrefillChunk)) }
		b.Reused = func(capacity int) bool { return reuses(comp, DecodeSpec(capacity, mode, cfg.PrefillChunk)) }
	}
	l.sched = sched
	l.caps = l.row.Rungs(cfg.Ladder)
	for i, c := range l.caps {
		l.rungs = append(l.rungs, &rung{index: i, spec: DecodeSpec(c, mode, cfg.PrefillChunk)})
	}
	l.work = newCompileWorker(ctx, comp, cfg.Background, cfg.Clock)
	if cfg.KeepRungs && cfg.RungIdle > 0 {
		l.idleStop, l.idleDone = make(chan struct{}), make(chan struct{})
		go l.idleLoop(ctx)
	}
	return l, nil
}

// shareFirstRung makes rung i, which takes a prompt of n tokens and then
// decodes up to decode tokens, a shared graph when auto mode's rule says
// so (autoShared), on a ladder that is not kept for prompts to come (a
// kept rung serves every request's decoding) and before anything compiled
// the rung; it says why, and returns the estimate of the shared graph's
// slower steps it weighed (0 where it weighed none).
func (l *CompiledLadder) shareFirstRung(i, n, decode int) (why string, shared bool, penalty float64) {
	if l.prefillMode != PrefillAuto || l.cfg.KeepRungs {
		return "", false, 0
	}
	per := specStepTokens(l.comp, DecodeSpec(l.caps[i], PrefillDecode, l.cfg.PrefillChunk))
	if why, shared, penalty = autoShared(l.comp, n, per, min(decode, l.caps[i]-n), l.cfg.PrefillChunk); !shared {
		return "", false, penalty
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.rungs[i]
	if r.job != nil || r.spec.Shared {
		return why, r.spec.Shared, penalty
	}
	r.spec = DecodeSpec(l.caps[i], PrefillShared, l.cfg.PrefillChunk)
	return why, true, penalty
}

// Rungs are the capacities the ladder compiles: the whole ladder, or for
// direct only its largest capacity.
func (l *CompiledLadder) Rungs() Ladder { return l.caps }

// Store is the KV store a sequence on this ladder gets.
func (l *CompiledLadder) Store() ladder.Store { return l.row.Store }

// RemapFallback reports that grow-remap runs with copies because the
// device cannot take views of host memory.
func (l *CompiledLadder) RemapFallback() bool { return l.fallback }

// Notes are the ladder's notes so far.
func (l *CompiledLadder) Notes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.notes...)
}

// BudgetStats are the compile budgets of a budgeted schedule, their times
// as offsets from origin; zero without a compile-cost profile.
func (l *CompiledLadder) BudgetStats(origin time.Time) BudgetStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.budgets == nil {
		return BudgetStats{}
	}
	return l.budgets.Stats(origin)
}

// ThreadError reports a failure to apply the BackgroundOptions to the
// compile thread (the compiles still ran).
func (l *CompiledLadder) ThreadError() error { return l.work.threadError() }

// Close waits for the background compiles (a cancelled context ends them
// at once), records the ones no sequence reached and frees every compiled
// graph. Sequences must be finished first.
func (l *CompiledLadder) Close() error {
	if l.idleStop != nil {
		close(l.idleStop)
		<-l.idleDone
		l.idleStop = nil
	}
	err := l.work.close()
	l.mu.Lock()
	defer l.mu.Unlock()
	// Background compiles that finished after every sequence still belong
	// in the record.
	for _, r := range l.rungs {
		if j := r.job; j != nil && j.background && j.ready() {
			l.observe(r, j)
		}
	}
	for _, r := range l.prefill {
		if j := r.job; j != nil && j.background && j.ready() {
			l.observe(r, j)
		}
	}
	return err
}

// notef records a note; l.mu is held.
func (l *CompiledLadder) notef(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	l.notes = append(l.notes, n)
	if l.cfg.Note != nil {
		l.cfg.Note(n)
	}
}

// observe records a finished compile of r once, and tells the schedule of a
// successful background one; l.mu is held.
func (l *CompiledLadder) observe(r *rung, j *compileJob) {
	if j.seen {
		return
	}
	j.seen = true
	kind := "decode"
	switch {
	case r.index < 0:
		kind = "prefill"
	case r.spec.Shared:
		kind = "shared"
	}
	a := compileAttempt{rung: r.index, job: j, kind: kind, attempt: j.attempt, irBytes: j.irBytes, origin: j.origin}
	for _, n := range j.notes {
		l.notef("%s", n)
	}
	l.records = append(l.records, a)
	if r.index >= 0 && j.background && j.err == nil {
		l.sched.Compiled(launcher{l}, r.index, j.seconds())
		if l.budgets != nil {
			l.budgets.Ready(launcher{l}, r.index, j.end)
		}
	}
}

// startForeground makes r's next compile a foreground one, run by the
// caller with runForeground; l.mu is held.
func (l *CompiledLadder) startForeground(r *rung, attempt int) *compileJob {
	j := l.work.newForeground(r.spec)
	j.attempt = attempt
	r.job = j
	return j
}

// runForeground runs a job made by startForeground and records it.
func (l *CompiledLadder) runForeground(r *rung, j *compileJob) {
	l.work.runForeground(j)
	l.mu.Lock()
	l.observe(r, j)
	l.mu.Unlock()
}

// enter returns rung i's compiled decode graph for a sequence arriving at
// it, and whether it was ready (compiled without error) on arrival. With no
// compile launched it compiles in the caller (a lazy boundary, or a rung
// freed and needed again); otherwise it waits for the compile. waiting,
// when set, is called before the caller blocks. A failed compile gets one
// foreground retry when retry is set or it ran in the background.
func (l *CompiledLadder) enter(ctx context.Context, i int, retry bool, waiting func()) (ready bool, exe Executable, err error) {
	r := l.rungs[i]
	l.mu.Lock()
	j := r.job
	if j == nil && i > 0 && l.budgets != nil && l.budgets.deadline {
		// Budgeted by deadline, a rung reached before any rule launched
		// it (its rate not measured yet, or a rung freed and needed at
		// once) still goes through the worker and its budget.
		l.budgets.Launch(launcher{l}, i, ladder.ReasonBoundary, len(l.seqs) > 1) // others may decode beside it; this one waits
		launcher{l}.Launch(i)
		j = r.job
	}
	if j == nil {
		j = l.startForeground(r, 1)
		l.mu.Unlock()
		if waiting != nil {
			waiting()
		}
		l.runForeground(r, j)
	} else {
		done := j.ready()
		ready = done && j.err == nil
		l.mu.Unlock()
		if !done {
			if waiting != nil {
				waiting()
			}
			t0 := l.cfg.Clock()
			<-j.done
			l.waited(i, l.cfg.Clock().Sub(t0))
		}
		l.mu.Lock()
		l.observe(r, j)
		l.mu.Unlock()
	}
	if j.err != nil && ctx.Err() == nil && (retry || j.background) {
		j = l.retry(r, j)
	}
	if j.err != nil {
		return false, nil, compileFailed(j.err)
	}
	return ready, j.exe, nil
}

// waited records that a sequence or request waited d for rung i's compile.
func (l *CompiledLadder) waited(i int, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.budgets != nil {
		l.budgets.Waited(launcher{l}, i, d.Seconds())
	}
}

// retry compiles r again in the foreground after j failed, unless another
// sequence already did, and returns the new job once it is done.
func (l *CompiledLadder) retry(r *rung, failed *compileJob) *compileJob {
	l.mu.Lock()
	if r.job != failed {
		j := r.job
		l.mu.Unlock()
		if j == nil {
			return failed
		}
		<-j.done
		l.mu.Lock()
		l.observe(r, j)
		l.mu.Unlock()
		return j
	}
	l.notef("compile of rung %d failed (%v); retrying in the foreground", r.spec.Capacity, failed.err)
	j := l.startForeground(r, failed.attempt+1)
	l.mu.Unlock()
	l.runForeground(r, j)
	return j
}

func compileFailed(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrCompile, err)
}

// prefillGraph returns the prefill graph of a capacity, compiling it in the
// caller when no sequence holds one; the caller releases it with
// releasePrefill.
func (l *CompiledLadder) prefillGraph(capacity int) (*rung, Executable, error) {
	l.mu.Lock()
	r := l.prefill[capacity]
	if r == nil {
		r = &rung{index: -1, spec: model.GraphSpec{Capacity: capacity, Chunk: l.cfg.PrefillChunk}}
		l.prefill[capacity] = r
	}
	r.users++
	j := r.job
	if j == nil || (j.ready() && j.err != nil) {
		j = l.startForeground(r, 1)
		l.mu.Unlock()
		l.runForeground(r, j)
	} else {
		l.mu.Unlock()
		<-j.done
		l.mu.Lock()
		l.observe(r, j) // a background compile nobody recorded yet
		l.mu.Unlock()
	}
	if j.err != nil {
		return r, nil, errors.Join(compileFailed(j.err), l.releasePrefill(r))
	}
	return r, j.exe, nil
}

// readyPrefill returns the prefill graph of a capacity, for the caller to
// release with releasePrefill, when it is compiled and ready; nil otherwise.
func (l *CompiledLadder) readyPrefill(capacity int) *rung {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.prefill[capacity]
	if r == nil || r.job == nil || !r.job.ready() || r.job.err != nil || r.job.exe == nil {
		return nil
	}
	l.observe(r, r.job)
	r.users++
	return r
}

// launchPrefill queues a background compile of a capacity's prefill graph,
// unless one is compiled or compiling, for the prompts to come.
func (l *CompiledLadder) launchPrefill(capacity int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.launchPrefillLocked(capacity)
}

// launchPrefillLocked is launchPrefill with l.mu held.
func (l *CompiledLadder) launchPrefillLocked(capacity int) {
	r := l.prefill[capacity]
	if r == nil {
		r = &rung{index: -1, spec: model.GraphSpec{Capacity: capacity, Chunk: l.cfg.PrefillChunk}}
		l.prefill[capacity] = r
	}
	if j := r.job; j != nil && !(j.ready() && j.err != nil) {
		return
	}
	j := l.work.background(r.spec)
	j.attempt = 1
	r.job = j
	l.notef("prefill graph of capacity %d: compiling in the background for the prompts to come", capacity)
}

// compileSeconds is how long rung i's latest compile took, 0 when unknown.
func (l *CompiledLadder) compileSeconds(i int) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if j := l.rungs[i].job; j != nil && j.ready() {
		return j.seconds()
	}
	return 0
}

// releasePrefill ends a sequence's use of a prefill graph; the last user
// frees it (a prompt is processed once).
func (l *CompiledLadder) releasePrefill(r *rung) error {
	if r == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.users--; r.users > 0 || r.job == nil || !r.job.ready() || l.cfg.KeepRungs {
		return nil
	}
	err := l.work.drop(r.job)
	r.job = nil
	return err
}

// foreground is the last rung compiled before a sequence starting at rung
// first decodes.
func (l *CompiledLadder) foreground(first int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sched.Foreground(first, len(l.rungs))
}

// bound tells the schedule that a sequence bound rung i.
func (l *CompiledLadder) bound(i int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sched.Bound(launcher{l}, i)
}

// stepped tells the schedule of a decode step on rung i.
func (l *CompiledLadder) stepped(i int, stepS float64, next, reach int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sched.Stepped(launcher{l}, i, stepS, next, reach)
}

// register adds a sequence starting on rung first: from now on no rung at or
// above it is freed while it is open.
func (l *CompiledLadder) register(q *Sequence, first int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seqs[q] = first
	l.touch(first)
}

// unregister removes a finished sequence. The rungs it used stay compiled
// for the sequences to come.
func (l *CompiledLadder) unregister(q *Sequence) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur, ok := l.seqs[q]; ok {
		l.touch(cur)
	}
	delete(l.seqs, q)
}

// move records that q switched to rung to and frees the rungs below it
// that no open sequence needs any more (the context only grows: a sequence
// never goes back to a smaller rung).
func (l *CompiledLadder) move(q *Sequence, to int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seqs[q] = to
	l.touch(to)
	if l.cfg.KeepRungs {
		return nil
	}
	var errs []error
	for k := range to {
		r := l.rungs[k]
		if r.job == nil || !r.job.ready() || l.needed(k) {
			continue
		}
		errs = append(errs, l.free(r))
	}
	return errors.Join(errs...)
}

// free drops rung r's compiled graph (a rung freed is compiled again when
// it is needed); l.mu is held. The compile is recorded first: one only a
// finished sequence waited for still belongs in the record.
func (l *CompiledLadder) free(r *rung) error {
	l.observe(r, r.job)
	err := l.work.drop(r.job)
	r.job, r.lastUsed = nil, time.Time{}
	return err
}

// needed reports whether an open sequence is on rung k or below; l.mu is held.
func (l *CompiledLadder) needed(k int) bool {
	for _, cur := range l.seqs {
		if cur <= k {
			return true
		}
	}
	return false
}

// state describes rung i's compile for a progress line.
func (l *CompiledLadder) state(i int, now time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.caps[i]
	switch j := l.rungs[i].job; {
	case j == nil:
		return fmt.Sprintf("%d not started", c)
	case j.ready() && j.err != nil:
		return fmt.Sprintf("%d failed", c)
	case j.ready():
		return fmt.Sprintf("%d ready", c)
	default:
		if ns := j.startNS.Load(); ns != 0 {
			return fmt.Sprintf("%d compiling %.1fs", c, now.Sub(time.Unix(0, ns)).Seconds())
		}
		return fmt.Sprintf("%d queued", c)
	}
}

// run executes fn with r's executable, serialized with every other
// sequence using it, after binding kv to it when another cache is bound.
func (r *rung) run(exe Executable, kv *KV, fn func() error) error {
	r.use.Lock()
	defer r.use.Unlock()
	if r.bound != kv {
		if err := exe.Bind(kv); err != nil {
			return err
		}
		r.bound = kv
	}
	return fn()
}

// backgroundJobs are the background compiles launched so far.
func (l *CompiledLadder) backgroundJobs() []*compileJob {
	var out []*compileJob
	for _, j := range l.work.allJobs() {
		if j.background {
			out = append(out, j)
		}
	}
	return out
}

// launcher is the ladder as its schedule sees it; l.mu is held.
type launcher struct{ l *CompiledLadder }

func (a launcher) Rungs() int                      { return len(a.l.rungs) }
func (a launcher) Capacity(i int) int              { return a.l.caps[i] }
func (a launcher) Launched(i int) bool             { return a.l.rungs[i].job != nil }
func (a launcher) Note(format string, args ...any) { a.l.notef(format, args...) }

func (a launcher) Queued(i int) (bool, float64) {
	j := a.l.rungs[i].job
	if j == nil || !j.background || j.ready() {
		return false, 0
	}
	if ns := j.startNS.Load(); ns != 0 {
		return true, a.l.cfg.Clock().Sub(time.Unix(0, ns)).Seconds()
	}
	return true, 0
}

func (a launcher) Launch(i int) {
	r := a.l.rungs[i]
	j := a.l.work.background(r.spec)
	j.attempt = 1
	r.job = j
}

var _ Launcher = launcher{}
