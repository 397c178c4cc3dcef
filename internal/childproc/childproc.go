// Package childproc runs a child process of this binary that does one job
// and prints its result as one JSON line: ovtrace's compile-once
// measurements and ovrun's compile worker. It owns what both need: the
// child dies with its parent (PR_SET_PDEATHSIG from a thread that lives as
// long as the child), a timeout, a resident-memory limit, and errors that
// name the child, how it ended and the last line it wrote to stderr.
//
// The child is forked from the calling goroutine's OS thread, locked for
// the child's whole life: on Linux a child inherits that thread's CPU
// affinity and nice value, and so do all the threads it starts. A caller
// that wants the child confined sets both on its own locked thread first.
package childproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ovtoolkit/ovrun/internal/procfs"
)

// Cmd is one child process.
type Cmd struct {
	Name  string   // what errors call the child, e.g. "compile worker for graph c256"
	Path  string   // the executable
	Args  []string // arguments after the executable's name
	Env   []string // the whole environment; nil inherits this process's
	Stdin []byte   // written to the child's standard input

	Timeout   time.Duration // 0: none
	MemoryMiB int           // kill the child once its resident set exceeds this; 0: no limit
}

// pollEvery is how often the child's resident set is read.
const pollEvery = 20 * time.Millisecond

// stderrKeep is how much of the end of the child's stderr is kept.
const stderrKeep = 64 << 10

// Error is a child that did not exit 0: it failed, crashed, or was killed
// for running past its timeout or its memory limit.
type Error struct {
	Name       string
	Limit      string // "" when the child ended by itself; else the limit that killed it
	State      *os.ProcessState
	LastStderr string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Name)
	if e.Limit != "" {
		fmt.Fprintf(&b, " %s: killed", e.Limit)
	} else {
		fmt.Fprintf(&b, " %s", exitText(e.State))
	}
	if e.LastStderr != "" {
		fmt.Fprintf(&b, "; its last stderr line: %q", e.LastStderr)
	}
	return b.String()
}

// Signaled reports whether the child ended by a signal it did not ask for
// (a crash or a kill from outside) rather than exiting with a status.
func (e *Error) Signaled() bool {
	ws, ok := e.State.Sys().(syscall.WaitStatus)
	return e.Limit == "" && ok && ws.Signaled()
}

// exitText says how a process ended: "exited with status 2", "was killed by signal SIGKILL".
func exitText(st *os.ProcessState) string {
	if st == nil {
		return "did not start"
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("was killed by signal %s (%s)", signalName(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", st.ExitCode())
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGBUS:
		return "SIGBUS"
	}
	return "signal " + strconv.Itoa(int(s))
}

// Run starts the child, waits for it and returns its standard output. A
// cancelled context kills the child and returns the context's error; a
// child that exits non-zero, is killed, or passes a limit is an *Error.
func Run(ctx context.Context, c Cmd) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The child is forked from this thread and PR_SET_PDEATHSIG fires when
	// the forking thread exits: keep both for the child's whole life.
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Env = c.Env
	cmd.Stdin = bytes.NewReader(c.Stdin)
	var stdout bytes.Buffer
	stderr := &tailBuffer{max: stderrKeep}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// A grandchild that holds the output pipes must not hold us past the
	// child's exit.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", c.Name, c.Path, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var timeout <-chan time.Time
	if c.Timeout > 0 {
		t := time.NewTimer(c.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var poll <-chan time.Time
	if c.MemoryMiB > 0 {
		t := time.NewTicker(pollEvery)
		defer t.Stop()
		poll = t.C
	}
	limit := ""
	kill := func(why string) {
		limit = why
		timeout, poll = nil, nil // killed once; wait for the exit
		_ = cmd.Process.Kill()
	}
	var werr error
wait:
	for {
		select {
		case werr = <-done:
			break wait
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-done
			return nil, ctx.Err()
		case <-timeout:
			kill(fmt.Sprintf("ran past its %s timeout", c.Timeout))
		case <-poll:
			if rss := ResidentBytes(cmd.Process.Pid); rss > int64(c.MemoryMiB)<<20 {
				kill(fmt.Sprintf("exceeded its %d MiB memory limit (%d MiB resident)", c.MemoryMiB, rss>>20))
			}
		}
	}
	if werr == nil && limit == "" {
		return stdout.Bytes(), nil
	}
	var exitErr *exec.ExitError
	if werr != nil && !errors.As(werr, &exitErr) {
		return nil, fmt.Errorf("%s: %w", c.Name, werr) // an I/O error, not an exit
	}
	return nil, &Error{Name: c.Name, Limit: limit, State: cmd.ProcessState, LastStderr: LastLine(stderr.String())}
}

// ResidentBytes is a process's resident set (VmRSS), 0 when it cannot be read.
func ResidentBytes(pid int) int64 { return procfs.Status(strconv.Itoa(pid), "VmRSS:") }

// LastLine is the last non-empty line of s, trimmed.
func LastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// DecodeLastJSONLine decodes the last line of out that starts with "{" into v.
func DecodeLastJSONLine(out []byte, v any) error {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "{") {
			continue
		}
		if err := json.Unmarshal([]byte(l), v); err != nil {
			return fmt.Errorf("printed a bad result line: %w", err)
		}
		return nil
	}
	return errors.New("printed no result line")
}

// EnvWithout is env without the variables named.
func EnvWithout(env []string, names ...string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || k == n
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }
