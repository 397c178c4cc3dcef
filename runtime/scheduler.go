package runtime

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/ovtoolkit/ovrun/model"
)

// compileJob is one graph compile, foreground or background.
type compileJob struct {
	spec       model.GraphSpec
	background bool
	done       chan struct{}
	startNS    atomic.Int64  // start time for readers that do not wait for done
	started    chan struct{} // closed when the compile starts

	// Set before done is closed.
	exe        Executable
	err        error
	start, end time.Time
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

// scheduler runs background compiles one at a time, in launch order, on a
// dedicated OS thread; foreground compiles run in the caller.
type scheduler struct {
	comp  Compiler
	ctx   context.Context
	opts  BackgroundOptions
	queue chan *compileJob
	wg    sync.WaitGroup

	mu   sync.Mutex
	jobs []*compileJob
	// threadErr records a failure to apply BackgroundOptions.
	threadErr error
	// hook, when set, is told when a job starts and ends.
	hook func(j *compileJob, started bool)
	now  func() time.Time
}

func newScheduler(ctx context.Context, comp Compiler, opts BackgroundOptions, maxJobs int, now func() time.Time) *scheduler {
	s := &scheduler{comp: comp, ctx: ctx, opts: opts, queue: make(chan *compileJob, maxJobs+1), now: now}
	s.wg.Add(1)
	go s.worker()
	return s
}

func (s *scheduler) worker() {
	defer s.wg.Done()
	goruntime.LockOSThread() // the thread's affinity and priority stay ours; it exits with the goroutine
	if err := applyThreadOptions(s.opts); err != nil {
		s.mu.Lock()
		s.threadErr = err
		s.mu.Unlock()
	}
	for j := range s.queue {
		s.run(j)
	}
}

func (s *scheduler) track(j *compileJob) {
	s.mu.Lock()
	s.jobs = append(s.jobs, j)
	s.mu.Unlock()
}

func (s *scheduler) run(j *compileJob) {
	defer close(j.done)
	j.start = s.now()
	j.startNS.Store(j.start.UnixNano())
	close(j.startedCh())
	if s.hook != nil {
		s.hook(j, true)
	}
	if err := s.ctx.Err(); err != nil {
		j.err = err
	} else {
		j.exe, j.err = s.comp.Compile(s.ctx, j.spec)
	}
	j.end = s.now()
	if s.hook != nil {
		s.hook(j, false)
	}
}

// foreground compiles spec in the calling goroutine.
func (s *scheduler) foreground(spec model.GraphSpec) *compileJob {
	j := &compileJob{spec: spec, done: make(chan struct{}), started: make(chan struct{})}
	s.track(j)
	s.run(j)
	return j
}

// background queues spec for the worker and returns at once.
func (s *scheduler) background(spec model.GraphSpec) *compileJob {
	j := &compileJob{spec: spec, background: true, done: make(chan struct{}), started: make(chan struct{})}
	s.track(j)
	s.queue <- j
	return j
}

// drop closes a finished job's executable early, once nothing will run it
// again (a rung the context has grown past, the prefill graph).
func (s *scheduler) drop(j *compileJob) error {
	if j == nil || !j.ready() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.exe == nil {
		return nil
	}
	err := j.exe.Close()
	j.exe = nil
	return err
}

// close stops the worker after the queued jobs (a cancelled context makes
// them finish at once), then closes every executable that was compiled.
func (s *scheduler) close() error {
	close(s.queue)
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, j := range s.jobs {
		if j.exe != nil {
			errs = append(errs, j.exe.Close())
			j.exe = nil
		}
	}
	return joinErrs(errs)
}

// threadError reports a failure to apply BackgroundOptions to the worker.
func (s *scheduler) threadError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.threadErr
}

// applyThreadOptions sets the calling OS thread's CPU affinity and nice value.
func applyThreadOptions(o BackgroundOptions) error {
	tid := syscall.Gettid()
	if len(o.CPUs) > 0 {
		var mask [16]uint64 // up to 1024 CPUs
		for _, c := range o.CPUs {
			if c < 0 || c >= 64*len(mask) {
				return fmt.Errorf("compile cpu %d out of range", c)
			}
			mask[c/64] |= 1 << (c % 64)
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, uintptr(tid), unsafe.Sizeof(mask), uintptr(unsafe.Pointer(&mask[0]))); e != 0 {
			return fmt.Errorf("pin compile thread to cpus %v: %w", o.CPUs, e)
		}
	}
	if o.Nice != 0 {
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, o.Nice); err != nil {
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
