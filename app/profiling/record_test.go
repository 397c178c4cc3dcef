package profiling

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

func TestRecordCallgrind(t *testing.T) {
	if _, err := exec.LookPath("valgrind"); err != nil {
		t.Skip("valgrind not installed")
	}
	sh, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1)")
	}
	p, err := Record(context.Background(), RecordConfig{Backend: BackendCallgrind, Command: []string{sh}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := Meta(p, MetaBackend); got != BackendCallgrind {
		t.Errorf("backend meta = %q", got)
	}
	if p.SampleType[0].Type != "instructions" || p.SampleType[len(p.SampleType)-1].Type != "calls" {
		t.Errorf("sample types = %v", p.SampleType)
	}
	rep, err := Top(p, TopOptions{By: ByObject})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total <= 0 || !strings.HasPrefix(rep.Rows[0].Name, "ld-linux") && !strings.HasPrefix(rep.Rows[0].Name, "libc") {
		t.Errorf("a run of true should be spent in the loader and libc: %+v", rep.Rows)
	}
}

func TestRecordErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Record(ctx, RecordConfig{Backend: "gprof", Command: []string{"true"}}); err == nil || !strings.Contains(err.Error(), `unknown profiler back end "gprof"`) {
		t.Errorf("err = %v", err)
	}
	if _, err := Record(ctx, RecordConfig{Backend: BackendPerf}); err == nil {
		t.Error("no command accepted")
	}
	t.Run("perf missing", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		if _, err := PerfPath(); err == nil {
			t.Skip("a versioned /usr/bin/perf_* exists")
		} else if !errors.Is(err, ErrProfilerUnavailable) || !strings.Contains(err.Error(), "make profilers") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("failing command", func(t *testing.T) {
		if _, err := CheckPerf(); err != nil {
			t.Skip(err)
		}
		_, err := Record(ctx, RecordConfig{Backend: BackendPerf, Command: []string{"sh", "-c", "echo broken >&2; exit 3"}, CallGraph: "none"})
		if err == nil || !strings.Contains(err.Error(), "broken") {
			t.Errorf("err = %v, want the command's last stderr line", err)
		}
	})
}

func TestRecordPerf(t *testing.T) {
	ctx := context.Background()
	if _, err := CheckPerf(); err != nil {
		t.Skip(err)
	}
	var window []byte
	p, err := Record(ctx, RecordConfig{
		Backend: BackendPerf, CallGraph: "fp",
		Command: []string{"sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo done"},
		Window:  func(stdout []byte) (float64, float64, bool) { window = stdout; return 0, 0, false },
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(window) != "done\n" {
		t.Errorf("Window got stdout %q", window)
	}
	if p.SampleType[1].Type != "cpu-clock" || len(p.Sample) == 0 {
		t.Errorf("profile = %d samples of %v", len(p.Sample), p.SampleType)
	}
	if got, _ := Meta(p, MetaCommand); !strings.HasPrefix(got, "sh -c") {
		t.Errorf("command meta = %q", got)
	}
}

func TestDemangle(t *testing.T) {
	if _, err := exec.LookPath("c++filt"); err != nil {
		t.Skip("c++filt not installed")
	}
	a, b, c := "_ZN2ov5Model8validateEv", "plain", "_ZN2ov5Model8validateEv"
	demangle([]*string{&a, &b, &c})
	if a != "ov::Model::validate()" || c != a || b != "plain" {
		t.Errorf("demangled %q %q %q", a, b, c)
	}
}
