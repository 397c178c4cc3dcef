package main

// Regression tests for hostile and careless input (issue #12), through the
// binary (this test binary runs main when beMain is set): a one-line error,
// a non-zero exit, no panic, no hang, nothing changed beside the output.

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// ovtraceMain runs main in a child process and returns stderr and the exit
// code; the child must finish within limit.
func ovtraceMain(t *testing.T, limit time.Duration, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), beMain+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("ovtrace %v did not finish within %v", args, limit)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return stderr.String(), cmd.ProcessState.ExitCode()
}

func assertOneLine(t *testing.T, stderr string, code int, want string) {
	t.Helper()
	if code == 0 {
		t.Fatalf("exit 0, want failure (stderr %q)", stderr)
	}
	if n := strings.Count(strings.TrimRight(stderr, "\n"), "\n"); n != 0 {
		t.Errorf("stderr has %d lines:\n%s", n+1, stderr)
	}
	if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
		t.Errorf("panic:\n%s", stderr)
	}
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr %q does not mention %q", stderr, want)
	}
}

// smallProfile writes a valid one-sample profile.
func smallProfile(t *testing.T, path string) {
	t.Helper()
	fn := &profile.Function{ID: 1, Name: "ov::a_function_with_a_long_name_indeed"}
	loc := &profile.Location{ID: 1, Line: []profile.Line{{Function: fn}}}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "cpu-clock", Unit: "nanoseconds"}},
		Sample:     []*profile.Sample{{Location: []*profile.Location{loc}, Value: []int64{10}}},
		Location:   []*profile.Location{loc}, Function: []*profile.Function{fn},
	}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTopAndDiffNarrowWidth(t *testing.T) {
	pb := filepath.Join(t.TempDir(), "p.pb.gz")
	smallProfile(t, pb)
	for _, w := range []string{"0", "1", "2", "-3"} {
		stderr, code := ovtraceMain(t, 20*time.Second, "top", pb, "--width", w)
		assertOneLine(t, stderr, code, "--width "+w+": want 8..")
		stderr, code = ovtraceMain(t, 20*time.Second, "diff", pb, pb, "--width="+w)
		assertOneLine(t, stderr, code, "--width "+w+": want 8..")
	}
	if out, err := ovtrace(t, "top", pb, "--width", "8"); err != nil || !strings.Contains(out, "ov::a...") {
		t.Errorf("--width 8: %v\n%s", err, out)
	}
}

// TestTopRefusesAGzipBomb: 300 MiB of zeros in a 300 KiB file (gzip
// members of 1 MiB each) stops at the 256 MiB expansion limit.
func TestTopRefusesAGzipBomb(t *testing.T) {
	var member bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	zw.Write(make([]byte, 1<<20))
	zw.Close()
	bomb := filepath.Join(t.TempDir(), "bomb.pb.gz")
	f, err := os.Create(bomb)
	if err != nil {
		t.Fatal(err)
	}
	for range 300 {
		f.Write(member.Bytes())
	}
	f.Close()
	stderr, code := ovtraceMain(t, 60*time.Second, "top", bomb)
	assertOneLine(t, stderr, code, "file too large: more than 256.0 MiB")
}

func TestProfileInputsAndOutputsThatAreNotRegularFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	stderr, code := ovtraceMain(t, 10*time.Second, "top", fifo)
	assertOneLine(t, stderr, code, "named pipe")
	stderr, code = ovtraceMain(t, 10*time.Second, "top", "/dev/zero")
	assertOneLine(t, stderr, code, "character device")
	stderr, code = ovtraceMain(t, 10*time.Second, "profile", "--out", "/dev/null", "--", "true")
	assertOneLine(t, stderr, code, "refusing to replace /dev/null")
	stderr, code = ovtraceMain(t, 10*time.Second, "compile", "--model", tiny(t), "--ladder", "32", "--json", fifo)
	assertOneLine(t, stderr, code, "named pipe")
	stderr, code = ovtraceMain(t, 10*time.Second, "compile", "--model", tiny(t), "--ladder", "32,2000000000")
	assertOneLine(t, stderr, code, "--ladder 2000000000")
	stderr, code = ovtraceMain(t, 10*time.Second, "plan", "--compile-cost", "/dev/zero", "--decode-rate", "10", "--prompt-tokens", "4", "--decode-tokens", "4")
	assertOneLine(t, stderr, code, "character device")
	if fi, err := os.Lstat("/dev/null"); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatal("/dev/null is no longer a character device")
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Errorf("%d entries left, want the FIFO alone", len(es))
	}
}
