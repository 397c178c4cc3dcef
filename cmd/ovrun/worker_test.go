package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/internal/testenv"
)

// workerRunJSON is what the worker tests read from a run summary.
type workerRunJSON struct {
	CompileIn string `json:"compile_in"`
	Rungs     []struct {
		Capacity      int     `json:"capacity"`
		Compiled      bool    `json:"compiled"`
		CompileSource string  `json:"compile_source"`
		ImportS       float64 `json:"import_s"`
		ExportS       float64 `json:"export_s"`
	} `json:"rungs"`
}

// TestCompileWorkersGiveTheSameTokensOnSmolLM2: the real GGUF decodes the
// same greedy tokens whether its rungs compile in this process or in
// workers, and the summary says which.
func TestCompileWorkersGiveTheSameTokensOnSmolLM2(t *testing.T) {
	g := testenv.SmolLM2(t)
	var preds [][]int64
	for _, where := range []string{"process", "worker"} {
		js := filepath.Join(t.TempDir(), "run.json")
		_, stderr, code := ovrun(t, nil, "run", "--model", g, "--precision", "f32", "--ladder", "32,64", "--prompt-tokens", "12",
			"--decode-tokens", "40", "--compile-in", where, "--json", js, "-q")
		if code != 0 {
			t.Fatalf("--compile-in %s: exit %d: %s", where, code, stderr)
		}
		r := readRun(t, js)
		if r.FinishReason != "length" {
			t.Fatalf("--compile-in %s: finish %q", where, r.FinishReason)
		}
		preds = append(preds, r.Predictions)
		var w workerRunJSON
		b, _ := os.ReadFile(js)
		if err := json.Unmarshal(b, &w); err != nil {
			t.Fatal(err)
		}
		if w.CompileIn != where {
			t.Errorf("compile_in %q, want %q", w.CompileIn, where)
		}
		for _, rg := range w.Rungs {
			moved := rg.ImportS > 0 && rg.ExportS > 0
			if rg.Compiled && (rg.CompileSource != "compiled" || moved != (where == "worker")) {
				t.Errorf("--compile-in %s: rung %d source %q import_s %v export_s %v", where, rg.Capacity, rg.CompileSource, rg.ImportS, rg.ExportS)
			}
		}
	}
	if !slices.Equal(preds[0], preds[1]) {
		t.Errorf("workers predicted %v, this process %v", preds[1], preds[0])
	}
}

// TestKilledCompileWorkersEndTheRunCleanly kills the 64 rung's worker and
// its retry mid-compile: exit 1 with one line naming the graph and the
// signal, finish compile_error, every decoded token kept.
func TestKilledCompileWorkersEndTheRunCleanly(t *testing.T) {
	js := filepath.Join(t.TempDir(), "run.json")
	cmd := exec.Command(ovrunBin, "run", "--model", testenv.Synth(t, "tiny", "F32"), "--ladder", "32,64,128",
		"--prompt-tokens", "8", "--decode-tokens", "100", "--compile-in", "worker", "--graph-per-rung", "--json", js, "-q")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := testenv.KillCompileWorkers(cmd.Process.Pid, "decode-c64", 2)
	cmd.Wait()
	if k := stop(); k != 2 {
		t.Fatalf("killed %d workers, want 2 (stderr %q)", k, stderr.String())
	}
	assertOneLineError(t, stderr.String(), cmd.ProcessState.ExitCode(), "compile worker for graph decode-c64")
	if !strings.Contains(stderr.String(), "SIGKILL") {
		t.Errorf("stderr %q does not name the signal", stderr.String())
	}
	r := readRun(t, js)
	if r.FinishReason != "compile_error" || r.DecodedTokens != 24 || len(r.Predictions) != 25 || r.Rungs[1].CompileAttempts != 2 {
		t.Errorf("finish %q after %d steps, %d predictions, %d attempts; want compile_error after 24, 25, 2",
			r.FinishReason, r.DecodedTokens, len(r.Predictions), r.Rungs[1].CompileAttempts)
	}
}

// TestCtrlCDuringAWorkerCompileLeavesNothing: SIGINT while a worker
// compiles exits 130, and neither the worker nor its blob outlives ovrun.
func TestCtrlCDuringAWorkerCompileLeavesNothing(t *testing.T) {
	tmp := t.TempDir()
	cmd := exec.Command(ovrunBin, "run", "--model", testenv.SmolLM2(t), "--ladder", "64,128,256",
		"--prompt-tokens", "8", "--decode-tokens", "200", "--compile-in", "worker", "-q")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	worker := 0
	for deadline := time.Now().Add(time.Minute); worker == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, p := range testenv.Children(cmd.Process.Pid, "compile-worker") {
			if testenv.Compiling(p.Pid) {
				worker = p.Pid
			}
		}
	}
	if worker == 0 {
		cmd.Process.Kill()
		<-exited
		t.Fatalf("saw no compile worker compiling (stderr %q)", stderr.String())
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatal("still running 10 s after SIGINT")
	}
	assertOneLineError(t, stderr.String(), cmd.ProcessState.ExitCode(), "interrupted")
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit %d, want 130", code)
	}
	for deadline := time.Now().Add(2 * time.Second); testenv.Alive(worker) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if testenv.Alive(worker) {
		t.Errorf("compile worker %d outlived ovrun", worker)
	}
	if es, _ := os.ReadDir(tmp); len(es) != 0 {
		t.Errorf("left %d entries in TMPDIR, e.g. %s", len(es), es[0].Name())
	}
}

func TestCompileWorkerFlagsAreChecked(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	base := []string{"run", "--model", tiny, "--ladder", "32", "--prompt-tokens", "4", "--decode-tokens", "4"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--compile-in", "thread"}, `compile-in "thread": want process or worker`},
		{[]string{"--compile-in", "worker", "--compile-timeout", "-1s"}, "--compile-timeout -1s"},
		{[]string{"--compile-in", "worker", "--compile-memory", "-5"}, "compile-memory"},
	} {
		_, stderr, code := ovrun(t, nil, append(slices.Clone(base), tc.args...)...)
		assertOneLineError(t, stderr, code, tc.want)
	}
	// The worker itself refuses a request for another graph than its --graph.
	_, stderr, code := ovrunWith(t, nil, strings.NewReader(`{"model":"`+tiny+`","options":{},"spec":{"Capacity":32,"Chunk":1}}`),
		"compile-worker", "--graph", "decode-c64", "--out", filepath.Join(t.TempDir(), "x.blob"))
	assertOneLineError(t, stderr, code, "request on stdin is for decode-c32")
}
