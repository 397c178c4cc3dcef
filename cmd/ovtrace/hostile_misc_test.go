package main

// Hostile profiles given to top and diff, through the binary: a truncated
// gzip names its file, sums that pass the int64 limit are held there and
// said so, and control characters in names never reach the terminal raw.

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/ovtoolkit/ovrun/internal/testenv"
)

// ovtraceOut runs main in a child process and returns its standard output,
// standard error and exit code; the child must finish within limit.
func ovtraceOut(t *testing.T, limit time.Duration, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), beMain+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("ovtrace %v did not finish within %v", args, limit)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// writeProfile writes a gzipped profile of one sample per (name, value).
func writeProfile(t *testing.T, path, object string, names []string, values []int64) {
	t.Helper()
	m := &profile.Mapping{ID: 1, File: object}
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "instructions", Unit: "count"}}, Mapping: []*profile.Mapping{m}}
	for i, name := range names {
		fn := &profile.Function{ID: uint64(i + 1), Name: name}
		loc := &profile.Location{ID: uint64(i + 1), Mapping: m, Line: []profile.Line{{Function: fn}}}
		p.Function, p.Location = append(p.Function, fn), append(p.Location, loc)
		p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{loc}, Value: []int64{values[i]}})
	}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTopNamesATruncatedGzip(t *testing.T) {
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole.pb.gz")
	writeProfile(t, whole, "/usr/lib/libapp.so", []string{"f", "g"}, []int64{1, 2})
	// Recompress at level 0 so that half the file is half the stream.
	b, _ := os.ReadFile(whole)
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var raw, gz bytes.Buffer
	raw.ReadFrom(zr)
	zw, _ := gzip.NewWriterLevel(&gz, gzip.NoCompression)
	zw.Write(raw.Bytes())
	zw.Close()
	cut := filepath.Join(dir, "cut.pb.gz")
	os.WriteFile(cut, gz.Bytes()[:gz.Len()/2], 0o644)
	_, stderr, code := ovtraceOut(t, 20*time.Second, "top", cut)
	assertOneLine(t, stderr, code, cut+": the gzip stream is truncated")
	_, stderr, code = ovtraceOut(t, 20*time.Second, "diff", whole, cut)
	assertOneLine(t, stderr, code, cut+": the gzip stream is truncated")
}

func TestTopAndDiffHoldOverflowingSums(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pb.gz"), filepath.Join(dir, "b.pb.gz")
	half := int64(math.MaxInt64/2 + 1)
	writeProfile(t, a, "/usr/lib/libapp.so", []string{"f", "g", "h"}, []int64{half, half, half})
	writeProfile(t, b, "/usr/lib/libapp.so", []string{"f"}, []int64{math.MinInt64 + 1})
	out, stderr, code := ovtraceOut(t, 20*time.Second, "top", a)
	if code != 0 {
		t.Fatalf("top: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "passed the int64 limit") || regexp.MustCompile(`-[0-9]`).MatchString(out) {
		t.Errorf("top of values past the int64 limit:\n%s", out)
	}
	out, stderr, code = ovtraceOut(t, 20*time.Second, "diff", b, a)
	if code != 0 {
		t.Fatalf("diff: exit %d: %s", code, stderr)
	}
	first := strings.SplitN(out, "\n", 2)[0]
	if !strings.Contains(out, "passed the int64 limit") || strings.Contains(first, "delta -") {
		t.Errorf("diff from a very negative profile to a very positive one:\n%s", out)
	}
}

func TestTopAndDiffEscapeControlCharacters(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pb.gz"), filepath.Join(dir, "b.pb.gz")
	evil := "ov::f\x1b]2;owned\x07\x00\x1b[2J"
	writeProfile(t, a, "/usr/lib/lib\x1b[31m.so", []string{evil, "main"}, []int64{100, 5})
	writeProfile(t, b, "/usr/lib/lib\x1b[31m.so", []string{evil}, []int64{300})
	for _, args := range [][]string{{"top", a}, {"top", "--by", "object", a}, {"diff", a, b}, {"diff", "--by", "object", a, b}} {
		out, stderr, code := ovtraceOut(t, 20*time.Second, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		for _, c := range []string{"\x1b", "\x00", "\x07"} {
			if strings.Contains(out, c) || strings.Contains(stderr, c) {
				t.Errorf("%v prints %q raw:\n%q", args, c, out)
			}
		}
		if !strings.Contains(out, `lib\x1b[31m.so`) {
			t.Errorf("%v does not show the object escaped:\n%s", args, out)
		}
		if args[1] != "--by" && !strings.Contains(out, `ov::f\x1b]2;owned\a\x00\x1b[2J`) {
			t.Errorf("%v does not show the function escaped:\n%s", args, out)
		}
	}
}

// TestUnderDecodeBatchRefusals: --under-decode-batch is refused, in one
// line and before any compile, where it cannot be measured.
func TestUnderDecodeBatchRefusals(t *testing.T) {
	model := testenv.SmolLM2(t) // never compiled: the flags are checked first
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--attention", "static", "--under-decode", "--under-decode-batch", "0"}, "want 1..256"},
		{[]string{"--attention", "static", "--under-decode-batch", "4"}, "give --under-decode"},
		{[]string{"--attention", "paged", "--under-decode", "--under-decode-batch", "4"}, "give --attention static"},
	} {
		args := append([]string{"compile", "--model", model, "--ladder", "64,128", "--prefill-chunk", "0"}, c.args...)
		_, stderr, code := ovtraceOut(t, 30*time.Second, args...)
		if code == 0 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v: exit %d, %q; want one line saying %q", c.args, code, stderr, c.want)
		}
	}
}
