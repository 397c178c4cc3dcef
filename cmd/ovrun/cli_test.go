package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
)

var ovrunBin string

func TestMain(m *testing.M) {
	testenv.UseProjectOpenVINO()
	dir, err := os.MkdirTemp("", "ovrun-cli-")
	if err != nil {
		panic(err)
	}
	ovrunBin = filepath.Join(dir, "ovrun")
	if out, err := exec.Command("go", "build", "-o", ovrunBin, ".").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	testenv.Cleanup()
	os.Exit(code)
}

// ovrun runs the binary and returns stdout, stderr and the exit code.
func ovrun(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	return ovrunWith(t, env, nil, args...)
}

// ovrunWith is ovrun with standard input from stdin (nil: none).
func ovrunWith(t *testing.T, env []string, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(ovrunBin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// copyCheckpoint copies a synthetic checkpoint so a test can damage it.
func copyCheckpoint(t *testing.T, preset string) string {
	t.Helper()
	src := testenv.Synth(t, preset, "F32")
	dst := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// assertOneLineError checks the contract for bad input: non-zero exit, one
// line on stderr naming the problem, no panic or stack trace.
func assertOneLineError(t *testing.T, stderr string, code int, want string) {
	t.Helper()
	if code == 0 {
		t.Fatalf("exit 0, want failure (stderr %q)", stderr)
	}
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 {
		t.Errorf("stderr has %d lines, want 1:\n%s", len(lines), stderr)
	}
	if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
		t.Errorf("stderr shows a panic or stack trace:\n%s", stderr)
	}
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr %q does not mention %q", stderr, want)
	}
}

func TestBadInputGivesOneClearLine(t *testing.T) {
	truncated := copyCheckpoint(t, "tiny")
	st := filepath.Join(truncated, "model.safetensors")
	fi, err := os.Stat(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(st, fi.Size()/2); err != nil {
		t.Fatal(err)
	}

	missing := copyCheckpoint(t, "tiny")
	f, err := model.OpenSafetensors(filepath.Join(testenv.Synth(t, "tiny", "F32"), "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	var keep []*model.Tensor
	for _, n := range f.Names() {
		if n != "model.layers.1.mlp.up_proj.weight" {
			keep = append(keep, f.Tensors[n])
		}
	}
	out, err := os.Create(filepath.Join(missing, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := model.WriteSafetensors(out, keep, nil); err != nil {
		t.Fatal(err)
	}
	out.Close()
	f.Close()

	gpt2 := copyCheckpoint(t, "tiny")
	cfg, _ := os.ReadFile(filepath.Join(gpt2, "config.json"))
	os.WriteFile(filepath.Join(gpt2, "config.json"), bytes.Replace(cfg, []byte(`"qwen2"`), []byte(`"gpt2"`), 1), 0o644)

	// Hand-made files: a header length beyond the file, two tensors whose
	// bytes overlap, a dtype safetensors does not define, a wrong shape.
	craft := func(header string, data int) string {
		dir := copyCheckpoint(t, "tiny")
		b := make([]byte, 8, 8+len(header)+data)
		binary.LittleEndian.PutUint64(b, uint64(len(header)))
		b = append(append(b, header...), make([]byte, data)...)
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	absurd := copyCheckpoint(t, "tiny")
	absurdFile := filepath.Join(absurd, "model.safetensors")
	b, _ := os.ReadFile(absurdFile)
	binary.LittleEndian.PutUint64(b, 1<<40)
	os.WriteFile(absurdFile, b, 0o644)
	overlap := craft(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}`, 24)
	dtype := craft(`{"a":{"dtype":"F33","shape":[4],"data_offsets":[0,16]}}`, 16)
	shape := copyCheckpoint(t, "tiny")
	{
		f, err := model.OpenSafetensors(filepath.Join(testenv.Synth(t, "tiny", "F32"), "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		var ts []*model.Tensor
		for _, n := range f.Names() {
			tt := *f.Tensors[n]
			if n == "model.norm.weight" { // [64] -> [32]
				tt.Shape, tt.Data = []int64{32}, tt.Data[:128]
			}
			ts = append(ts, &tt)
		}
		out, err := os.Create(filepath.Join(shape, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		if err := model.WriteSafetensors(out, ts, nil); err != nil {
			t.Fatal(err)
		}
		out.Close()
		f.Close()
	}

	tiny := testenv.Synth(t, "tiny", "F32")
	tests := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{name: "truncated checkpoint", args: []string{"generate", "--model", truncated, "--capacity", "32", "--prompt-tokens", "4"}, want: "corrupt checkpoint"},
		{name: "absurd header length", args: []string{"generate", "--model", absurd, "--capacity", "32", "--prompt-tokens", "4"}, want: "header length"},
		{name: "overlapping offsets", args: []string{"generate", "--model", overlap, "--capacity", "32", "--prompt-tokens", "4"}, want: "corrupt checkpoint"},
		{name: "unknown dtype", args: []string{"generate", "--model", dtype, "--capacity", "32", "--prompt-tokens", "4"}, want: "F33"},
		{name: "wrong shape", args: []string{"generate", "--model", shape, "--capacity", "32", "--prompt-tokens", "4"}, want: `"model.norm.weight" has shape [32], want [64]`},
		{name: "missing tensor", args: []string{"generate", "--model", missing, "--capacity", "32", "--prompt-tokens", "4"}, want: `missing tensor "model.layers.1.mlp.up_proj.weight"`},
		{name: "unsupported architecture", args: []string{"generate", "--model", gpt2, "--capacity", "32", "--prompt-tokens", "4"}, want: `model_type "gpt2"`},
		{name: "missing checkpoint", args: []string{"generate", "--model", filepath.Join(t.TempDir(), "nope"), "--capacity", "32", "--prompt-tokens", "4"}, want: "config.json"},
		{name: "prompt longer than capacity", args: []string{"generate", "--model", tiny, "--capacity", "16", "--prompt-tokens", "20"}, want: "does not fit --capacity 16"},
		{name: "prompt longer than the largest rung", args: []string{"run", "--model", tiny, "--ladder", "16,32", "--prompt-tokens", "40", "--decode-tokens", "4"}, want: "the largest rung holds 32"},
		{name: "ladder not ascending", args: []string{"run", "--model", tiny, "--ladder", "64,32", "--prompt-tokens", "4"}, want: "strictly ascending"},
		{name: "unknown policy", args: []string{"run", "--model", tiny, "--ladder", "32,64", "--policy", "eager", "--prompt-tokens", "4"}, want: `unknown policy "eager"`},
		{name: "missing OpenVINO library", env: []string{"OVRUN_OPENVINO_LIB=/nonexistent"}, args: []string{"generate", "--model", tiny, "--capacity", "32", "--prompt-tokens", "4"}, want: "OVRUN_OPENVINO_LIB"},
		{name: "unknown compile property", args: []string{"generate", "--model", tiny, "--capacity", "32", "--prompt-tokens", "4", "--prop", "NO_SUCH_KEY=1"}, want: "NO_SUCH_KEY"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := ovrun(t, tc.env, tc.args...)
			assertOneLineError(t, stderr, code, tc.want)
		})
	}
}

type runJSON struct {
	FinishReason  string  `json:"finish_reason"`
	DecodedTokens int     `json:"decoded_tokens"`
	Predictions   []int64 `json:"predictions"`
	Error         string  `json:"error"`
	Rungs         []struct {
		Capacity        int `json:"capacity"`
		CompileAttempts int `json:"compile_attempts"`
	} `json:"rungs"`
}

func readRun(t *testing.T, path string) runJSON {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r runJSON
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestFailedBackgroundCompileKeepsTokens(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	tests := []struct {
		name       string
		fault      string
		wantCode   int
		wantFinish string
		wantSteps  int
	}{
		{name: "recovered by the foreground retry", fault: "64", wantCode: 0, wantFinish: "length", wantSteps: 100},
		{name: "retry fails too", fault: "64x2", wantCode: 1, wantFinish: "compile_error", wantSteps: 24},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			js := filepath.Join(t.TempDir(), "run.json")
			_, stderr, code := ovrun(t, []string{"OVRUN_FAIL_COMPILE=" + tc.fault}, "run", "--model", tiny, "--ladder", "32,64,128",
				"--prompt-tokens", "8", "--decode-tokens", "100", "--json", js, "-q")
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d: %s", code, tc.wantCode, stderr)
			}
			if code != 0 {
				assertOneLineError(t, stderr, code, "injected failure")
			}
			r := readRun(t, js)
			if r.FinishReason != tc.wantFinish || r.DecodedTokens != tc.wantSteps || len(r.Predictions) != tc.wantSteps+1 {
				t.Errorf("finish %q after %d steps with %d predictions, want %q after %d", r.FinishReason, r.DecodedTokens, len(r.Predictions), tc.wantFinish, tc.wantSteps)
			}
			if r.Rungs[1].CompileAttempts != 2 {
				t.Errorf("rung 64 compiled in %d attempts, want 2", r.Rungs[1].CompileAttempts)
			}
		})
	}
}

// interruptRun starts a long lazy run with extra flags, sends SIGINT after
// 1.5 s and checks the exit: 130 and one stderr line saying it was interrupted.
func interruptRun(t *testing.T, extra ...string) {
	t.Helper()
	args := append([]string{"run", "--model", testenv.Synth(t, "tiny", "F32"), "--ladder", "64,128,256,512,1024,2048,4096,8192,16384",
		"--prompt-tokens", "8", "--decode-tokens", "16000", "--policy", "lazy", "-q"}, extra...)
	cmd := exec.Command(ovrunBin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("exit %v, want 130 (stderr %q)", err, stderr.String())
	}
	assertOneLineError(t, stderr.String(), 130, "interrupted")
}

func TestInterruptWritesPartialSummary(t *testing.T) {
	js := filepath.Join(t.TempDir(), "run.json")
	interruptRun(t, "--json", js)
	r := readRun(t, js)
	if r.FinishReason != "interrupted" {
		t.Errorf("finish %q, want interrupted", r.FinishReason)
	}
	if len(r.Predictions) != r.DecodedTokens+1 {
		t.Errorf("%d predictions for %d decoded tokens", len(r.Predictions), r.DecodedTokens)
	}
}
