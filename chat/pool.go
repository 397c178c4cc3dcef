package chat

import (
	"bufio"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ovtoolkit/ovrun/internal/childproc"
)

// The parent's side of the sandbox: a pool of worker processes, started
// when first needed and kept idle for the next request. Each runs one
// request at a time, so a render that crashes its worker or runs out of
// time takes no other render with it; the parent kills the worker then
// and the next request starts a fresh one.
//
// No goroutine runs on the parent's side between requests: the pipes are
// read and written with deadlines (a cancelled context moves them to now),
// and a worker's standard error is a memory file read after it died.
// Workers die with the parent: they see their standard input close, and
// one busy in a render sees its parent pid change. (PR_SET_PDEATHSIG would
// fire when the OS thread that forked the worker exits, and Go ends the
// threads of goroutines that exit locked, as the compile workers do.)
type pool struct {
	slots chan struct{} // one per request under way
	mu    sync.Mutex
	idle  []*worker
}

const (
	maxWorkers = 4  // concurrent renders, each in its own worker
	maxKnown   = 16 // templates a worker compiles before it is retired
)

var workers = &pool{slots: make(chan struct{}, maxWorkers)}

// do runs req on a worker that holds the template key (sending src to one
// that does not). An error is the sandbox's: a limit, a crash, the
// context; the template's own errors are in the response.
func (p *pool) do(ctx context.Context, key, src string, req *request) (*response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // a done context costs no worker
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-p.slots }()
	for attempt := 0; ; attempt++ {
		w, err := p.take(ctx)
		if err != nil {
			return nil, err
		}
		req.Key, req.Source = key, ""
		if !w.known[key] {
			req.Source = src
		}
		resp, err := w.exchange(ctx, RenderTimeout, req)
		if err != nil { // w is gone
			// Killed from outside (silently, by a signal) as the request
			// came: once, a fresh worker takes it. A template cannot
			// end its worker that way.
			var ce *childproc.Error
			if attempt == 0 && errors.As(err, &ce) && ce.Signaled() && ce.LastStderr == "" {
				continue
			}
			return nil, err
		}
		if req.Source != "" && resp.Compiled {
			w.known[key] = true
		}
		p.put(w)
		return resp, nil
	}
}

// take is an idle worker that still runs, or a new one.
func (p *pool) take(ctx context.Context) (*worker, error) {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			return startWorker(ctx)
		}
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if !w.exited() {
			return w, nil
		}
		w.stop() // killed from outside while idle
	}
}

func (p *pool) put(w *worker) {
	if len(w.known) > maxKnown {
		w.stop()
		return
	}
	p.mu.Lock()
	p.idle = append(p.idle, w)
	p.mu.Unlock()
}

// stopAll stops the idle workers (the tests' clean-up; a process that
// exits takes its workers with it).
func (p *pool) stopAll() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, w := range idle {
		w.stop()
	}
}

// worker is one worker process.
type worker struct {
	cmd     *exec.Cmd
	in, out *os.File // its standard input and output: pipes
	errf    *os.File // its standard error: a memory file
	stderr  string   // what it wrote there, once stopped
	enc     *gob.Encoder
	dec     *gob.Decoder
	known   map[string]bool // the templates it has compiled
}

// startWorker starts this binary again as a worker and waits for it to
// say it is ready.
func startWorker(ctx context.Context) (*worker, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("template worker: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("template worker: %w", err)
	}
	fd, err := unix.MemfdCreate("ovrun-template-worker-stderr", unix.MFD_CLOEXEC)
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("template worker: memfd_create: %w", err)
	}
	// /proc/self/exe is this program even when its file was replaced
	// since it started.
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"ovrun-template-worker"}
	cmd.Env = append(childproc.EnvWithout(os.Environ(), workerEnv, "GOTRACEBACK", "GOMAXPROCS", "GOMEMLIMIT"),
		workerEnv+"=1", "GOTRACEBACK=none")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.NewFile(uintptr(fd), "stderr")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Ctrl-C reaches the parent alone, which stops it
	err = cmd.Start()
	inR.Close()
	outW.Close()
	w := &worker{cmd: cmd, in: inW, out: outR, errf: cmd.Stderr.(*os.File), known: map[string]bool{}}
	if err != nil {
		w.closeFiles()
		return nil, fmt.Errorf("template worker: start: %w", err)
	}
	w.enc = gob.NewEncoder(w.in)
	w.dec = gob.NewDecoder(bufio.NewReaderSize(w.out, 64<<10))
	resp, err := w.exchange(ctx, workerStartTimeout, nil)
	if err != nil {
		if errors.Is(err, errTime) {
			err = fmt.Errorf("template worker did not start within %v", workerStartTimeout)
		}
		return nil, err
	}
	if !resp.Ready {
		w.stop()
		return nil, errors.New("template worker: no ready message")
	}
	return w, nil
}

// exchange sends req (none: only reads) and reads the answer, within
// timeout and ctx. On an error the worker is stopped and the error says
// why: ctx's error, errTime, the limit a crash ran into, or the crash.
func (w *worker) exchange(ctx context.Context, timeout time.Duration, req *request) (*response, error) {
	deadline := time.Now().Add(timeout)
	w.in.SetWriteDeadline(deadline)
	w.out.SetReadDeadline(deadline)
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		now := time.Now()
		w.in.SetWriteDeadline(now)
		w.out.SetReadDeadline(now)
		close(cancelled)
	})
	var resp response
	var err error
	if req != nil {
		err = w.enc.Encode(req)
	}
	if err == nil {
		err = w.dec.Decode(&resp)
	}
	if !stop() {
		<-cancelled // its deadlines are set before the worker is used again
		if err != nil {
			w.stop()
			return nil, ctx.Err()
		}
	}
	if err == nil {
		return &resp, nil
	}
	w.stop()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, errTime
	}
	return nil, w.crash()
}

// crash says why a stopped worker had died.
func (w *worker) crash() error {
	stderr := w.stderr
	if l := crashLimit(stderr); l != nil {
		return l
	}
	last := childproc.LastLine(stderr)
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "fatal error:") || strings.HasPrefix(l, "panic:") {
			last = strings.TrimSpace(l)
			break
		}
	}
	return &childproc.Error{Name: "template worker", State: w.cmd.ProcessState, LastStderr: last}
}

// exited reports whether the worker has exited, without reaping it.
func (w *worker) exited() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, w.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err != nil || info.Signo != 0
}

// stop kills the worker (a no-op on one that exited), reaps it, keeps
// the start of its standard error and closes its files.
func (w *worker) stop() {
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
	buf := make([]byte, 64<<10)
	n, _ := w.errf.ReadAt(buf, 0)
	w.stderr = string(buf[:n])
	w.closeFiles()
}

func (w *worker) closeFiles() {
	w.in.Close()
	w.out.Close()
	w.errf.Close()
}
