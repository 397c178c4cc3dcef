package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/tracing"
)

func countSpans(t *testing.T, path string) (map[string]int, tracing.Span) {
	t.Helper()
	spans, err := tracing.ReadTraceFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	var root tracing.Span
	for _, s := range spans {
		n[s.Name]++
		if s.Name == tracing.SpanRun {
			root = s
		}
	}
	if n[tracing.SpanRun] != 1 {
		t.Fatalf("%d run spans in %s, want 1", n[tracing.SpanRun], path)
	}
	return n, root
}

func TestTraceOutTimelineAndProfile(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	dir := t.TempDir()
	tr, prof, svg := filepath.Join(dir, "run.otlp.jsonl"), filepath.Join(dir, "ovrun.pprof"), filepath.Join(dir, "run.svg")
	_, stderr, code := ovrun(t, nil, "run", "--model", tiny, "--ladder", "32,64,128", "--prompt-tokens", "8",
		"--decode-tokens", "100", "-q", "--trace-out", tr, "--profile-out", prof)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	n, root := countSpans(t, tr)
	if n[tracing.SpanDecode] != 3 || n[tracing.SpanMigrate] != 2 || n[tracing.SpanCompile] < 3 {
		t.Errorf("spans %v, want 3 decode, 2 migrate, at least 3 compiles", n)
	}
	if root.Status == "error" || root.Attrs.Str(tracing.AttrFinishReason) != "length" {
		t.Errorf("run span status %q finish %q", root.Status, root.Attrs.Str(tracing.AttrFinishReason))
	}
	kv := 0
	for _, e := range root.Events {
		if e.Name == tracing.EventKV {
			kv++
		}
	}
	if kv < 2 {
		t.Errorf("%d kv events on the run span", kv)
	}

	f, err := os.Open(prof)
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(f)
	f.Close()
	if err != nil {
		t.Fatalf("--profile-out is not a pprof profile: %v", err)
	}
	if len(p.Sample) == 0 {
		t.Error("profile has no samples")
	}

	_, stderr, code = ovrun(t, nil, "timeline", "--trace", tr, "--out", svg)
	if code != 0 {
		t.Fatalf("timeline: exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("<svg")) || !bytes.Contains(b, []byte("decode @128")) {
		t.Errorf("timeline output is not the expected SVG: %.200s", b)
	}
	_, stderr, code = ovrun(t, nil, "timeline", "--trace", svg, "--out", filepath.Join(dir, "x.svg"))
	assertOneLineError(t, stderr, code, "not an OTLP/JSON trace")
}

// Failures and Ctrl-C still leave a trace whose run span says what happened.
func TestTraceOutOnFailureAndInterrupt(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	t.Run("compile error", func(t *testing.T) {
		tr := filepath.Join(t.TempDir(), "run.otlp.jsonl")
		_, stderr, code := ovrun(t, []string{"OVRUN_FAIL_COMPILE=64x2"}, "run", "--model", tiny, "--ladder", "32,64,128",
			"--prompt-tokens", "8", "--decode-tokens", "100", "-q", "--trace-out", tr)
		assertOneLineError(t, stderr, code, "injected failure")
		n, root := countSpans(t, tr)
		if root.Status != "error" || root.Attrs.Str(tracing.AttrFinishReason) != "compile_error" {
			t.Errorf("run span status %q finish %q", root.Status, root.Attrs.Str(tracing.AttrFinishReason))
		}
		spans, _ := tracing.ReadTraceFile(tr)
		failed := 0
		for _, s := range spans {
			if s.Name == tracing.SpanCompile && s.Status == "error" {
				failed++
				if c, _ := s.Attrs.Int(tracing.AttrCapacity); c != 64 || s.Attrs.Str(tracing.AttrOutcome) != tracing.OutcomeError {
					t.Errorf("failed compile span %v", s.Attrs)
				}
			}
		}
		if failed != 2 || n[tracing.SpanDecode] != 1 {
			t.Errorf("%d failed compile spans (want 2), spans %v", failed, n)
		}
	})
	t.Run("interrupt", func(t *testing.T) {
		tr := filepath.Join(t.TempDir(), "run.otlp.jsonl")
		interruptRun(t, "--trace-out", tr)
		_, root := countSpans(t, tr)
		if root.Status != "error" || root.Attrs.Str(tracing.AttrFinishReason) != "interrupted" {
			t.Errorf("run span status %q finish %q", root.Status, root.Attrs.Str(tracing.AttrFinishReason))
		}
	})
}

// A collector that is not there costs one warning line; the run succeeds.
func TestUnreachableCollectorIsOneWarning(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the exporter's bounded retries (about 5 s)")
	}
	tiny := testenv.Synth(t, "tiny", "F32")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, stderr, code := ovrun(t, []string{"OVRUN_OTLP_ENDPOINT=" + addr}, "run", "--model", tiny, "--ladder", "32,64",
		"--prompt-tokens", "8", "--decode-tokens", "20", "-q")
	if code != 0 {
		t.Fatalf("exit %d, want 0: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "ovrun: warning: trace export:") {
		t.Errorf("stderr %q, want one warning line", stderr)
	}
}

func TestBadTraceOutFailsBeforeTheRun(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	_, stderr, code := ovrun(t, nil, "run", "--model", tiny, "--ladder", "32,64", "--prompt-tokens", "8", "--decode-tokens", "20",
		"-q", "--trace-out", filepath.Join(t.TempDir(), "missing", "t.jsonl"))
	assertOneLineError(t, stderr, code, "--trace-out: output folder")
}
