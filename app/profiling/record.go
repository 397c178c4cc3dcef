package profiling

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/profile"
)

// Profiler back ends.
const (
	BackendPerf      = "perf"
	BackendCallgrind = "callgrind"
)

// ErrProfilerUnavailable is wrapped when a profiler is missing or cannot
// record on this machine.
var ErrProfilerUnavailable = errors.New("profiler unavailable")

// RecordConfig describes one profiled run.
type RecordConfig struct {
	// Backend is BackendPerf or BackendCallgrind.
	Backend string
	// Command is the program and its arguments.
	Command []string
	// Env is the command's environment (nil: this process's).
	Env []string
	// Stdout and Stderr receive the command's output (nil: discarded).
	Stdout, Stderr io.Writer
	// RawDir receives the profiler's raw output (perf.data or
	// callgrind.out); empty uses a temporary folder removed afterwards.
	RawDir string

	// CallGraph is perf's --call-graph mode (default "dwarf": full stacks
	// through code built without frame pointers, from .eh_frame).
	CallGraph string
	// Frequency is perf's sampling frequency in Hz (default 999).
	Frequency int
	// Inline asks perf script for inlined frames (slow: runs addr2line).
	Inline bool
	// Window, when set, is called with the command's standard output after
	// it exits. For perf it returns the time window (seconds on
	// CLOCK_MONOTONIC, which perf is told to record with) of the samples to
	// keep, or ok = false to keep all; callgrind ignores the window.
	Window func(stdout []byte) (from, to float64, ok bool)

	// ToggleCollect restricts callgrind to the inside of the functions
	// matching this pattern (--toggle-collect; empty: the whole run).
	ToggleCollect string
	// Callgrind tunes the conversion of callgrind's output.
	Callgrind CallgraphOptions
}

// Record runs the command under the profiler and returns its profile with
// the command line, back end and source in the comments. A command that
// fails is an error, and no profile is returned.
func Record(ctx context.Context, cfg RecordConfig) (*profile.Profile, error) {
	if len(cfg.Command) == 0 {
		return nil, errors.New("no command to profile")
	}
	dir := cfg.RawDir
	if dir == "" {
		d, err := os.MkdirTemp("", "ovtrace-profile-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	var p *profile.Profile
	var err error
	switch cfg.Backend {
	case BackendPerf:
		p, err = recordPerf(ctx, cfg, dir)
	case BackendCallgrind:
		p, err = recordCallgrind(ctx, cfg, dir)
	default:
		return nil, fmt.Errorf("unknown profiler back end %q: want %s or %s", cfg.Backend, BackendPerf, BackendCallgrind)
	}
	if err != nil {
		return nil, err
	}
	SetMeta(p, MetaBackend, cfg.Backend)
	SetMeta(p, MetaCommand, strings.Join(cfg.Command, " "))
	return p, nil
}

// PerfPath finds perf: on PATH, else Debian's versioned /usr/bin/perf_X.Y.
func PerfPath() (string, error) {
	if p, err := exec.LookPath("perf"); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob("/usr/bin/perf_*")
	sort.Strings(matches)
	if len(matches) > 0 {
		return matches[len(matches)-1], nil
	}
	return "", fmt.Errorf("%w: perf not found (install Debian's linux-perf: make profilers)", ErrProfilerUnavailable)
}

// CheckPerf reports whether perf can record the software clock here
// (running `perf record -e cpu-clock true` once per process) and returns
// its path.
func CheckPerf() (string, error) { return checkPerf() }

var checkPerf = sync.OnceValues(func() (string, error) {
	perf, err := PerfPath()
	if err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp("", "ovtrace-perf-check-*.data")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, perf, "record", "-q", "-e", "cpu-clock", "-o", tmp.Name(), "--", "true").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%w: `perf record -e cpu-clock true` fails here: %s", ErrProfilerUnavailable, lastLine(out, err))
	}
	return perf, nil
})

func recordPerf(ctx context.Context, cfg RecordConfig, dir string) (*profile.Profile, error) {
	perf, err := CheckPerf()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "perf.data")
	callGraph := cfg.CallGraph
	if callGraph == "" {
		callGraph = "dwarf"
	}
	freq := cfg.Frequency
	if freq <= 0 {
		freq = 999
	}
	args := []string{"record", "-q", "-e", "cpu-clock", "-F", fmt.Sprint(freq), "-k", "CLOCK_MONOTONIC", "-o", data}
	if callGraph != "none" {
		args = append(args, "--call-graph", callGraph)
	}
	args = append(args, "--")
	args = append(args, cfg.Command...)
	stdout, err := runProfiled(ctx, cfg, perf, args)
	if err != nil {
		return nil, err
	}
	var opt PerfOptions
	if cfg.Window != nil {
		if from, to, ok := cfg.Window(stdout); ok {
			opt.From, opt.To = from, to
		}
	}
	sargs := []string{"script", "-i", data, "-F", PerfScriptFields}
	if !cfg.Inline {
		sargs = append(sargs, "--no-inline")
	}
	script := exec.CommandContext(ctx, perf, sargs...)
	script.Env = append(os.Environ(), "DEBUGINFOD_URLS=")
	var serr bytes.Buffer
	script.Stderr = &serr
	pipe, err := script.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := script.Start(); err != nil {
		return nil, fmt.Errorf("perf script: %w", err)
	}
	p, perr := ParsePerfScript(pipe, opt)
	if perr != nil {
		io.Copy(io.Discard, pipe)
	}
	if err := script.Wait(); err != nil {
		return nil, fmt.Errorf("perf script: %s", lastLine(serr.Bytes(), err))
	}
	if perr != nil {
		return nil, perr
	}
	if opt.To > 0 {
		SetMeta(p, "window", fmt.Sprintf("%.6f-%.6f s CLOCK_MONOTONIC (%.3f s)", opt.From, opt.To, opt.To-opt.From))
	}
	return p, nil
}

func recordCallgrind(ctx context.Context, cfg RecordConfig, dir string) (*profile.Profile, error) {
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		return nil, fmt.Errorf("%w: valgrind not found (apt-get install valgrind)", ErrProfilerUnavailable)
	}
	out := filepath.Join(dir, "callgrind.out")
	args := []string{"--tool=callgrind", "--callgrind-out-file=" + out}
	if cfg.ToggleCollect != "" {
		args = append(args, "--collect-atstart=no", "--toggle-collect="+cfg.ToggleCollect)
	}
	args = append(args, "--")
	args = append(args, cfg.Command...)
	// Go's asynchronous preemption signals trip callgrind's signal
	// bookkeeping (an assertion in vgCallgrind_post_signal); turn them off.
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	cfg.Env = append(cfg.Env, "GODEBUG="+goDebugNoPreempt(cfg.Env))
	stdout, err := runProfiled(ctx, cfg, vg, args)
	if err != nil {
		return nil, err
	}
	if cfg.Window != nil {
		cfg.Window(stdout)
	}
	f, err := os.Open(out)
	if err != nil {
		return nil, fmt.Errorf("callgrind wrote no output: %w", err)
	}
	defer f.Close()
	g, err := ParseCallgrind(f)
	if err != nil {
		return nil, err
	}
	p, err := g.Profile(cfg.Callgrind)
	if err != nil {
		return nil, err
	}
	if cfg.ToggleCollect != "" {
		SetMeta(p, "collect", "inside "+cfg.ToggleCollect)
	}
	return p, nil
}

// goDebugNoPreempt returns GODEBUG's value with asyncpreemptoff=1 added.
func goDebugNoPreempt(env []string) string {
	cur := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			cur = v
		}
	}
	if cur == "" {
		return "asyncpreemptoff=1"
	}
	return cur + ",asyncpreemptoff=1"
}

// runProfiled runs the profiler and returns the command's standard output.
func runProfiled(ctx context.Context, cfg RecordConfig, tool string, args []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Env = cfg.Env
	var stdout, stderr bytes.Buffer
	cmd.Stdout = teeOrBuffer(&stdout, cfg.Stdout)
	cmd.Stderr = teeOrBuffer(&stderr, cfg.Stderr)
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%s %s: %s", filepath.Base(tool), strings.Join(cfg.Command, " "), lastLine(stderr.Bytes(), err))
	}
	return stdout.Bytes(), nil
}

func teeOrBuffer(buf *bytes.Buffer, w io.Writer) io.Writer {
	if w == nil {
		return buf
	}
	return io.MultiWriter(buf, w)
}

// lastLine is the last non-empty line of a command's output, or err.
func lastLine(out []byte, err error) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && !strings.HasPrefix(l, "==") {
			return l + " (" + err.Error() + ")"
		}
	}
	return err.Error()
}
