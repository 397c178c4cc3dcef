package runtime

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ovtoolkit/ovrun/model"
)

// compileJob is one graph compile, foreground or background.
type compileJob struct {
	spec       model.GraphSpec
	background bool
	done       chan struct{}
	startNS    atomic.Int64  // start time for readers that do not wait for done
	started    chan struct{} // closed when the compile starts

	// Guarded by the owning ladder's lock.
	attempt int  // 1, then 2 for the foreground retry
	seen    bool // recorded

	// Set before done is closed.
	exe        Executable
	err        error
	start, end time.Time
	// What the executable said of itself, kept for the record after it
	// is closed (a background compile no sequence reached).
	origin  Origin
	irBytes int
	notes   []string
}

func newJob(spec model.GraphSpec, background bool) *compileJob {
	return &compileJob{spec: spec, background: background, done: make(chan struct{}), started: make(chan struct{})}
}

// startedCh is closed when the job starts running.
func (j *compileJob) startedCh() chan struct{} { return j.started }

func (j *compileJob) ready() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// seconds is the compile's duration (0 while it runs).
func (j *compileJob) seconds() float64 {
	if j.end.IsZero() {
		return 0
	}
	return j.end.Sub(j.start).Seconds()
}

// BackgroundOptions control how background compiles share the machine with
// decode. On two cores they compete; these knobs trade compile latency for
// decode speed.
type BackgroundOptions struct {
	// CPUs pins the compiling thread (and threads it creates) to these CPUs.
	// Empty leaves the affinity alone.
	CPUs []int
	// Nice is added to the compiling thread's scheduling priority (0..19).
	Nice int
}

// compileWorker runs background compiles one at a time, in launch order, on
// a dedicated OS thread; foreground compiles run in the caller. It keeps
// every job it ran so that close can free what they compiled.
type compileWorker struct {
	comp   Compiler
	ctx    context.Context
	cancel context.CancelCauseFunc // ends ctx with ErrLadderClosed at close
	opts   BackgroundOptions
	now    func() time.Time
	wake   chan struct{} // one token: the queue changed
	wg     sync.WaitGroup

	mu     sync.Mutex
	queue  []*compileJob
	closed bool
	jobs   []*compileJob
	// threadErr records a failure to apply BackgroundOptions.
	threadErr error
}

func newCompileWorker(ctx context.Context, comp Compiler, opts BackgroundOptions, now func() time.Time) *compileWorker {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &compileWorker{comp: comp, ctx: ctx, cancel: cancel, opts: opts, now: now, wake: make(chan struct{}, 1)}
	w.wg.Add(1)
	go w.loop()
	return w
}

func (w *compileWorker) loop() {
	defer w.wg.Done()
	goruntime.LockOSThread() // the thread's affinity and priority stay ours; it exits with the goroutine
	if err := applyThreadOptions(w.opts); err != nil {
		w.mu.Lock()
		w.threadErr = err
		w.mu.Unlock()
	}
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			closed := w.closed
			w.mu.Unlock()
			if closed {
				return
			}
			<-w.wake
			continue
		}
		j := w.queue[0]
		w.queue = w.queue[1:]
		w.mu.Unlock()
		w.run(j)
	}
}

func (w *compileWorker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *compileWorker) run(j *compileJob) {
	defer close(j.done)
	j.start = w.now()
	j.startNS.Store(j.start.UnixNano())
	close(j.startedCh())
	if err := w.ctx.Err(); err != nil {
		j.err = context.Cause(w.ctx)
	} else {
		j.exe, j.err = w.comp.Compile(w.ctx, j.spec)
		if j.err != nil && w.ctx.Err() != nil {
			j.err = context.Cause(w.ctx) // stopped, not failed
		}
	}
	j.end = w.now()
	if j.err == nil {
		j.origin, j.irBytes, j.notes = originOf(j.exe), irBytes(j.exe), compileNotes(j.exe)
	}
}

// track keeps j for close; a job tracked after close is refused.
func (w *compileWorker) track(j *compileJob) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.New("compile after the ladder was closed")
	}
	w.jobs = append(w.jobs, j)
	return nil
}

// newForeground makes a foreground compile of spec for runForeground; after
// close it is a finished job with an error.
func (w *compileWorker) newForeground(spec model.GraphSpec) *compileJob {
	j := newJob(spec, false)
	if err := w.track(j); err != nil {
		j.err = err
		close(j.started)
		close(j.done)
	}
	return j
}

// runForeground compiles a job from newForeground in the calling goroutine.
func (w *compileWorker) runForeground(j *compileJob) {
	if !j.ready() {
		w.run(j)
	}
}

// background queues spec for the worker thread and returns at once; a
// graph the compiler makes by reusing one (Reuser) is made right here.
func (w *compileWorker) background(spec model.GraphSpec) *compileJob {
	j := newJob(spec, true)
	if err := w.track(j); err != nil {
		j.err = err
		close(j.started)
		close(j.done)
		return j
	}
	if reuses(w.comp, spec) {
		w.run(j)
		return j
	}
	w.mu.Lock()
	w.queue = append(w.queue, j)
	w.mu.Unlock()
	w.signal()
	return j
}

// drop closes a finished job's executable early, once nothing will run it
// again (a rung every sequence has grown past, a prefill graph).
func (w *compileWorker) drop(j *compileJob) error {
	if j == nil || !j.ready() {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if j.exe == nil {
		return nil
	}
	err := j.exe.Close()
	j.exe = nil
	return err
}

// ErrLadderClosed ends the background compiles a closing ladder no longer
// needs: a queued one never starts, a running one stops where the compiler
// can stop (a compile worker is killed; OpenVINO cannot interrupt a compile
// in this process, which finishes first).
var ErrLadderClosed = errors.New("stopped: the ladder closed before it finished (no sequence needed it)")

// close stops the worker: queued jobs end at once with ErrLadderClosed, a
// running one as above; then it closes every executable that was compiled.
func (w *compileWorker) close() error {
	w.cancel(ErrLadderClosed)
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.signal()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	for _, j := range w.jobs {
		if j.exe != nil {
			errs = append(errs, j.exe.Close())
			j.exe = nil
		}
	}
	return errors.Join(errs...)
}

// allJobs is every job tracked so far, in launch order.
func (w *compileWorker) allJobs() []*compileJob {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*compileJob(nil), w.jobs...)
}

// threadError reports a failure to apply BackgroundOptions to the worker.
func (w *compileWorker) threadError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.threadErr
}

// applyThreadOptions sets the calling OS thread's CPU affinity and nice value.
func applyThreadOptions(o BackgroundOptions) error {
	tid := unix.Gettid()
	if len(o.CPUs) > 0 {
		var set unix.CPUSet // up to 1024 CPUs
		for _, c := range o.CPUs {
			if c < 0 || c >= maxCPU {
				return fmt.Errorf("compile cpu %d out of range", c)
			}
			set.Set(c)
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("pin compile thread to cpus %v: %w", o.CPUs, err)
		}
	}
	if o.Nice != 0 {
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, o.Nice); err != nil {
			return fmt.Errorf("set compile thread nice %d: %w", o.Nice, err)
		}
	}
	return nil
}

// PinCurrentThread pins the calling goroutine's OS thread to cpus; the
// caller must hold runtime.LockOSThread.
func PinCurrentThread(cpus []int) error {
	return applyThreadOptions(BackgroundOptions{CPUs: cpus})
}
