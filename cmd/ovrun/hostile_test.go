package main

// Regression tests for hostile and careless input (issue #12), through the
// binary: each asserts a one-line error, a non-zero exit, no panic, no
// hang, and that nothing outside the requested output changed.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/ov"
)

// ovrunIn runs the binary in dir (the test's working directory when "")
// with env appended, and fails the test if it runs past limit: every case
// here must end in a few seconds, whatever the input.
func ovrunIn(t *testing.T, limit time.Duration, dir string, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, ovrunBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("ovrun %v did not finish within %v (stderr %q)", args, limit, stderr.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// snapshot lists a folder's entries with their sizes and modes, to check
// that a failed command left it as it was.
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			out = append(out, fmt.Sprintf("%s %v %d", p, fi.Mode(), fi.Size()))
		}
		return nil
	})
	return out
}

func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOutputPathsThatAreNotRegularFiles(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	fifo := filepath.Join(dir, "fifo")
	mkfifo(t, fifo)
	link := filepath.Join(dir, "link") // as /dev/stdout is
	os.Symlink(victim, link)
	before := snapshot(t, dir)
	gen := []string{"generate", "--model", tiny, "--capacity", "32", "--prompt-tokens", "4", "--max-new-tokens", "2"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"--json a character device", append(slices.Clone(gen), "--json", "/dev/null"), "refusing to replace /dev/null: not a regular file but a character device"},
		{"--json a FIFO", append(slices.Clone(gen), "--json", fifo), "named pipe"},
		{"--json a symlink", append(slices.Clone(gen), "--json", link), "symbolic link"},
		{"--dump-logits a FIFO", append(slices.Clone(gen), "--dump-logits", fifo), "named pipe"},
		{"run --trace-out a symlink", []string{"run", "--model", tiny, "--ladder", "16,32", "--prompt-tokens", "4", "--trace-out", link}, "symbolic link"},
		{"timeline --out a FIFO", []string{"timeline", "--trace", victim, "--out", fifo}, "named pipe"},
		{"export-ir into a file", []string{"export-ir", "--model", tiny, "--capacity", "32", "--out", victim}, "not a directory"},
		{"--json in a missing folder", append(slices.Clone(gen), "--json", filepath.Join(dir, "missing", "x.json")), "output folder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := ovrunIn(t, 20*time.Second, "", nil, tc.args...)
			assertOneLineError(t, stderr, code, tc.want)
		})
	}
	if fi, err := os.Lstat("/dev/null"); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatal("/dev/null is no longer a character device")
	}
	if after := snapshot(t, dir); !slices.Equal(before, after) {
		t.Errorf("the folder changed:\nbefore %v\nafter  %v", before, after)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("symlink target rewritten: %q", b)
	}
}

// TestPlantedTemporaryIsNotFollowed: older versions wrote PATH.tmp, a name
// anyone could plant a symlink at.
func TestPlantedTemporaryIsNotFollowed(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	js := filepath.Join(dir, "out.json")
	os.WriteFile(js, []byte("old"), 0o644)
	os.Symlink(victim, js+".tmp")
	_, stderr, code := ovrunIn(t, 30*time.Second, "", nil, "generate", "--model", tiny, "--capacity", "32", "--prompt-tokens", "4",
		"--max-new-tokens", "2", "--json", js)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("victim = %q", b)
	}
	var out map[string]any
	if b, _ := os.ReadFile(js); json.Unmarshal(b, &out) != nil || out["tokens"] == nil {
		t.Errorf("out.json = %q", b)
	}
	if es, _ := os.ReadDir(dir); len(es) != 3 {
		t.Errorf("%d entries left, want victim, out.json and the planted link", len(es))
	}
}

func TestLibraryPlantedInParentOfWorkingDirectory(t *testing.T) {
	root := t.TempDir()
	marker := filepath.Join(root, "constructor-ran")
	testenv.PlantLibrary(t, filepath.Join(root, ".venv", "openvino", "libs", "libopenvino_c.so.2630"), marker)
	cwd := filepath.Join(root, "work", "deeper")
	os.MkdirAll(cwd, 0o755)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OVRUN_OPENVINO_LIB=") && !strings.HasPrefix(kv, "VIRTUAL_ENV=") && !strings.HasPrefix(kv, "LD_LIBRARY_PATH=") {
			env = append(env, kv)
		}
	}
	cmd := exec.Command(ovrunBin, "generate", "--model", testenv.Synth(t, "tiny", "F32"), "--capacity", "32", "--prompt-tokens", "4")
	cmd.Dir, cmd.Env = cwd, env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Run()
	assertOneLineError(t, stderr.String(), cmd.ProcessState.ExitCode(), "openvino C library not found")
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the planted library's constructor ran")
	}
}

func TestHostileCheckpoints(t *testing.T) {
	editConfig := func(edit func(map[string]any)) string {
		dir := copyCheckpoint(t, "tiny")
		b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
		m := map[string]any{}
		json.Unmarshal(b, &m)
		edit(m)
		b, _ = json.Marshal(m)
		os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
		return dir
	}
	billion := editConfig(func(m map[string]any) { m["num_hidden_layers"] = 1_000_000_000 })
	negHeadDim := editConfig(func(m map[string]any) { m["head_dim"] = -16 })
	negKV := editConfig(func(m map[string]any) { m["num_key_value_heads"] = -2 })
	negTheta := editConfig(func(m map[string]any) { m["rope_theta"] = -1 })
	fewerLayers := editConfig(func(m map[string]any) { m["num_hidden_layers"] = 1 })

	fifoConfig := t.TempDir()
	mkfifo(t, filepath.Join(fifoConfig, "config.json"))
	fifoWeights := copyCheckpoint(t, "tiny")
	os.Remove(filepath.Join(fifoWeights, "model.safetensors"))
	mkfifo(t, filepath.Join(fifoWeights, "model.safetensors"))
	fifoShard := copyCheckpoint(t, "tiny")
	os.Remove(filepath.Join(fifoShard, "model.safetensors"))
	os.WriteFile(filepath.Join(fifoShard, "model.safetensors.index.json"), []byte(`{"weight_map":{"model.norm.weight":"shard.safetensors"}}`), 0o644)
	mkfifo(t, filepath.Join(fifoShard, "shard.safetensors"))
	zeroConfig := t.TempDir()
	os.Symlink("/dev/zero", filepath.Join(zeroConfig, "config.json"))
	zeroIndex := copyCheckpoint(t, "tiny")
	os.Remove(filepath.Join(zeroIndex, "model.safetensors"))
	os.Symlink("/dev/zero", filepath.Join(zeroIndex, "model.safetensors.index.json"))

	dupKey := copyCheckpoint(t, "tiny")
	{
		hdr := `{"w":{"dtype":"F32","shape":[1],"dtype":"F16","data_offsets":[0,4]}}`
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
		b = append(append(b, hdr...), 0, 0, 0, 0)
		os.WriteFile(filepath.Join(dupKey, "model.safetensors"), b, 0o644)
	}

	for _, tc := range []struct {
		name, dir, want string
	}{
		{"a billion layers", billion, "num_hidden_layers 1000000000 is beyond the limit"},
		{"negative head_dim", negHeadDim, "head_dim must be positive when given"},
		{"negative kv heads", negKV, "num_key_value_heads must be positive when given"},
		{"negative rope_theta", negTheta, "rope_theta must be positive when given"},
		{"fewer layers than the checkpoint", fewerLayers, "tensors of layer 1 but config.json says num_hidden_layers 1"},
		{"FIFO config.json", fifoConfig, "named pipe"},
		{"FIFO model.safetensors", fifoWeights, "named pipe"},
		{"FIFO shard", fifoShard, "named pipe"},
		{"config.json -> /dev/zero", zeroConfig, "character device"},
		{"shard index -> /dev/zero", zeroIndex, "character device"},
		{"duplicate key in a header entry", dupKey, `key "dtype" appears twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, tc.dir)
			_, stderr, code := ovrunIn(t, 10*time.Second, "", nil, "generate", "--model", tc.dir, "--capacity", "32", "--prompt-tokens", "4")
			assertOneLineError(t, stderr, code, tc.want)
			if after := snapshot(t, tc.dir); !slices.Equal(before, after) {
				t.Errorf("the checkpoint folder changed")
			}
		})
	}
}

// nanCheckpoint is the tiny checkpoint with one NaN weight.
func nanCheckpoint(t *testing.T) string {
	dir := copyCheckpoint(t, "tiny")
	f, err := model.OpenSafetensors(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	var ts []*model.Tensor
	for _, n := range f.Names() {
		tt := *f.Tensors[n]
		tt.Data = bytes.Clone(tt.Data)
		if n == "model.layers.0.mlp.up_proj.weight" {
			binary.LittleEndian.PutUint32(tt.Data[4*5:], math.Float32bits(float32(math.NaN())))
		}
		ts = append(ts, &tt)
	}
	f.Close()
	var b bytes.Buffer
	if err := model.WriteSafetensors(&b, ts, nil); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "model.safetensors"), b.Bytes(), 0o644)
	return dir
}

func TestNaNWeightIsAnErrorNamingTheTensor(t *testing.T) {
	dir := nanCheckpoint(t)
	const want = "non-finite logits after the prompt: logit 0 is NaN; the checkpoint's first non-finite weight is model.layers.0.mlp.up_proj.weight[5] = NaN"
	t.Run("generate", func(t *testing.T) {
		_, stderr, code := ovrunIn(t, 30*time.Second, "", nil, "generate", "--model", dir, "--capacity", "32", "--prompt-tokens", "4")
		assertOneLineError(t, stderr, code, want)
	})
	t.Run("run --verify --json", func(t *testing.T) {
		js := filepath.Join(t.TempDir(), "run.json")
		_, stderr, code := ovrunIn(t, 60*time.Second, "", nil, "run", "--model", dir, "--ladder", "16,32", "--prompt-tokens", "4",
			"--decode-tokens", "20", "--verify", "--json", js, "-q")
		assertOneLineError(t, stderr, code, want)
		b, err := os.ReadFile(js)
		if err != nil {
			t.Fatal("no summary written:", err)
		}
		if bytes.Contains(b, []byte("NaN")) && !bytes.Contains(b, []byte(`"error"`)) {
			t.Errorf("summary holds NaN: %s", b)
		}
		r := readRun(t, js)
		if r.FinishReason != "error" || !strings.Contains(r.Error, "model.layers.0.mlp.up_proj.weight[5]") {
			t.Errorf("finish %q, error %q", r.FinishReason, r.Error)
		}
	})
}

func TestLargeAndOddNumbersAreRefusedUpFront(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	// A real model's config alone: its KV cache at 16M tokens is 384 GiB,
	// and the check must come before the (absent) weights are needed.
	big := t.TempDir()
	cfg, err := model.PresetConfig("qwen2.5-0.5b")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(cfg)
	os.WriteFile(filepath.Join(big, "config.json"), b, 0o644)
	run := []string{"run", "--model", tiny, "--ladder", "16,32", "--prompt-tokens", "4"}
	gen := []string{"generate", "--model", tiny, "--capacity", "32", "--prompt-tokens", "4"}
	cont := []string{"contention", "--model", tiny, "--capacity", "32", "--compile-capacity", "64"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"CPU range to a billion", append(slices.Clone(run), "--compile-cpus", "0-1000000000"), "beyond the 1024"},
		{"CPU range backwards", append(slices.Clone(run), "--compile-cpus", "1-0"), `range "1-0" runs backwards`},
		{"nice above 19", append(slices.Clone(run), "--compile-nice", "20"), "--compile-nice 20: want a nice value 0..19"},
		{"negative nice", append(slices.Clone(cont), "--compile-nice", "-1"), "--compile-nice -1"},
		{"two billion prompt tokens", []string{"run", "--model", tiny, "--ladder", "16,32", "--prompt-tokens", "2000000000"}, "--prompt-tokens 2000000000: want 1.."},
		{"two billion teacher-forced tokens", append(slices.Clone(run), "--decode-tokens", "2000000000", "--teacher-forced"), "--decode-tokens 2000000000"},
		{"huge capacity", []string{"generate", "--model", tiny, "--capacity", "2000000000", "--prompt-tokens", "4"}, "--capacity 2000000000"},
		{"capacity beyond memory", []string{"generate", "--model", big, "--capacity", "16000000", "--prompt-tokens", "4"}, "the KV cache needs"},
		{"run ladder beyond memory", []string{"run", "--model", big, "--ladder", "1024,16000000", "--prompt-tokens", "4"}, "the KV cache needs"},
		{"huge prefill chunk", append(slices.Clone(gen), "--prefill-chunk", "2000000000"), "--prefill-chunk 2000000000"},
		{"huge ladder", []string{"run", "--model", tiny, "--ladder", "16,2000000000", "--prompt-tokens", "4"}, "capacities are limited"},
		{"contention without steps", append(slices.Clone(cont), "--steps", "0"), "--steps 0"},
		{"contention negative steps", append(slices.Clone(cont), "--steps", "-5"), "--steps -5"},
		{"infer threads", append(slices.Clone(gen), "--infer-threads", "100000"), "--infer-threads 100000"},
		{"timeline width", []string{"timeline", "--trace", "x", "--out", "y", "--width", "0"}, "--width 0"},
		{"plan decode rate Inf", []string{"plan", "--compile-cost", "x", "--decode-rate", "Inf", "--prompt-tokens", "4", "--decode-tokens", "4"}, "--decode-rate +Inf"},
		{"plan decode rate NaN", []string{"plan", "--compile-cost", "x", "--decode-rate", "NaN", "--prompt-tokens", "4", "--decode-tokens", "4"}, "--decode-rate NaN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := ovrunIn(t, 10*time.Second, "", nil, tc.args...)
			assertOneLineError(t, stderr, code, tc.want)
		})
	}
}

func TestDevicesAsInputs(t *testing.T) {
	out := filepath.Join(t.TempDir(), "t.svg")
	_, stderr, code := ovrunIn(t, 10*time.Second, "", nil, "timeline", "--trace", "/dev/zero", "--out", out)
	assertOneLineError(t, stderr, code, "character device")
	if _, err := os.Stat(out); err == nil {
		t.Error("an output was written")
	}
}

// TestFullDisk runs commands under a file-size limit (RLIMIT_FSIZE, as a
// full disk would stop them): each must fail in one line, leave the old
// output as it was and no temporary file behind.
func TestFullDisk(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit (util-linux) is needed")
	}
	tiny := testenv.Synth(t, "tiny", "F32")
	dir := t.TempDir()
	trace := filepath.Join(dir, "run.otlp.json")
	if _, stderr, code := ovrunIn(t, 60*time.Second, "", nil, "run", "--model", tiny, "--ladder", "16,32", "--prompt-tokens", "4",
		"--decode-tokens", "8", "--trace-out", trace, "-q"); code != 0 {
		t.Fatalf("run: %s", stderr)
	}
	old := []byte("old contents\n")
	for _, name := range []string{"decode-c32.xml", "decode-c32.bin", "logits.npy", "gen.json", "t.svg", "run.json"} {
		os.WriteFile(filepath.Join(dir, name), old, 0o644)
	}
	before := snapshot(t, dir)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"export-ir", []string{"export-ir", "--model", tiny, "--capacity", "32", "--out", dir}},
		{"generate --dump-logits", []string{"generate", "--model", tiny, "--capacity", "32", "--prompt-tokens", "4", "--dump-logits", filepath.Join(dir, "logits.npy")}},
		{"generate --json", []string{"generate", "--model", tiny, "--capacity", "32", "--prompt-tokens", "4", "--json", filepath.Join(dir, "gen.json")}},
		{"timeline --out", []string{"timeline", "--trace", trace, "--out", filepath.Join(dir, "t.svg")}},
		{"run --json", []string{"run", "--model", tiny, "--ladder", "16,32", "--prompt-tokens", "4", "--decode-tokens", "8", "--json", filepath.Join(dir, "run.json"), "-q"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--fsize=200", "--", ovrunBin}, tc.args...)
			cmd := exec.Command("prlimit", args...)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			cmd.Run()
			assertOneLineError(t, errb.String(), cmd.ProcessState.ExitCode(), "file too large")
		})
	}
	if after := snapshot(t, dir); !slices.Equal(before, after) {
		t.Errorf("the folder changed:\nbefore %v\nafter  %v", before, after)
	}
	for _, name := range []string{"decode-c32.xml", "decode-c32.bin", "logits.npy", "gen.json", "t.svg", "run.json"} {
		if b, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(b, old) {
			t.Errorf("%s changed to %d bytes", name, len(b))
		}
	}
}

// blackHole accepts connections and never answers: an OTLP collector that
// hangs the flush.
func blackHole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestSecondSignalExitsAtOnce interrupts a run whose trace flush hangs: the
// first Ctrl-C stops the run (or the flush), a second exits at once.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	js := filepath.Join(t.TempDir(), "run.json")
	cmd := exec.Command(ovrunBin, "run", "--model", testenv.Synth(t, "tiny", "F32"), "--ladder", "64,128,256,512,1024,2048,4096,8192,16384",
		"--prompt-tokens", "8", "--decode-tokens", "16000", "--policy", "lazy", "-q", "--json", js, "--otlp-endpoint", blackHole(t))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	time.Sleep(1500 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(time.Second):
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(3 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Fatal("still running 3 s after the second SIGINT")
		}
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d, want 130 (stderr %q)", code, stderr.String())
	}
	assertOneLineError(t, stderr.String(), 130, "interrupted")
	if r := readRun(t, js); r.FinishReason != "interrupted" {
		t.Errorf("summary finish %q, want interrupted", r.FinishReason)
	}
	if es, _ := os.ReadDir(filepath.Dir(js)); len(es) != 1 {
		t.Errorf("left %d files, want the summary alone", len(es))
	}
}

// TestContentionHonoursCtrlC: the measurement loop stops at the first
// SIGINT (or SIGTERM) and claims no summary.
func TestContentionHonoursCtrlC(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { contentionSignal(t, sig) })
	}
}

func contentionSignal(t *testing.T, sig syscall.Signal) {
	cmd := exec.Command(ovrunBin, "contention", "--model", testenv.Synth(t, "tiny", "F32"), "--capacity", "64", "--compile-capacity", "128",
		"--steps", "1000000")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	time.Sleep(1500 * time.Millisecond)
	cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("contention ignored %v", sig)
	}
	if got := strings.TrimSpace(stderr.String()); got != "ovrun: interrupted" {
		t.Errorf("stderr %q, want exactly \"ovrun: interrupted\"", got)
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit %d, want 130", code)
	}
}

// TestRunJSONOnLoadError: --json says "also on errors", load errors too.
func TestRunJSONOnLoadError(t *testing.T) {
	dir := copyCheckpoint(t, "tiny")
	os.Remove(filepath.Join(dir, "model.safetensors"))
	js := filepath.Join(t.TempDir(), "run.json")
	_, stderr, code := ovrunIn(t, 20*time.Second, "", nil, "run", "--model", dir, "--ladder", "16,32", "--prompt-tokens", "4", "--json", js)
	assertOneLineError(t, stderr, code, "no model.safetensors")
	r := readRun(t, js)
	if r.FinishReason != "error" || !strings.Contains(r.Error, "no model.safetensors") {
		t.Errorf("summary: finish %q, error %q", r.FinishReason, r.Error)
	}
}

// TestMissingPagedAttentionExtension runs ovrun on an OpenVINO folder
// without ovrun's extension library (links to every other file of the
// wheel's): auto attention says why once and falls back to the other
// forms, giving the tokens of --attention bounded; --attention paged is a
// one-line error.
func TestMissingPagedAttentionExtension(t *testing.T) {
	dir := wheelWithout(t, ov.PagedAttentionLibrary)
	ck := testenv.Synth(t, "tiny", "F32")
	run := func(attention string) (string, string, int) {
		cmd := exec.Command(ovrunBin, "generate", "--model", ck, "--capacity", "64", "--prompt-tokens", "20",
			"--max-new-tokens", "8", "--precision", "f32", "--attention", attention)
		cmd.Env = append(os.Environ(), ov.EnvLibrary+"="+dir)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.Run()
		return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
	}
	out, stderr, code := run("auto")
	if code != 0 || !strings.Contains(stderr, "ovrun: note: paged attention unavailable: no "+filepath.Join(dir, ov.PagedAttentionLibrary)) ||
		strings.Count(stderr, "\n") != 1 || strings.Contains(out, "attention paged") {
		t.Fatalf("auto without the extension: exit %d, stderr %q, stdout %q; want one note and another form", code, stderr, out)
	}
	bounded, _, _ := run("bounded")
	if tokens := func(s string) string { return strings.SplitN(s, "\n", 2)[0] }; tokens(out) != tokens(bounded) {
		t.Errorf("auto without the extension gave %q, --attention bounded %q", tokens(out), tokens(bounded))
	}
	_, stderr, code = run("paged")
	assertOneLineError(t, stderr, code, "attention paged: paged attention unavailable")
}

// TestMissingKernelExtension runs ovrun on an OpenVINO folder without
// ovrun's kernel library: --weights kernel is a one-line error that says
// what to do, and the default weights run without a word about it.
func TestMissingKernelExtension(t *testing.T) {
	dir := wheelWithout(t, ov.GGUFLinearLibrary)
	ck := testenv.Synth(t, "tiny", "F32")
	run := func(weights string) (string, int) {
		cmd := exec.Command(ovrunBin, "generate", "--model", ck, "--capacity", "64", "--prompt-tokens", "20",
			"--max-new-tokens", "8", "--precision", "f32", "--weights", weights)
		cmd.Env = append(os.Environ(), ov.EnvLibrary+"="+dir)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.Run()
		return stderr.String(), cmd.ProcessState.ExitCode()
	}
	stderr, code := run("kernel")
	assertOneLineError(t, stderr, code, "weights kernel: ovrun's kernel unavailable: no "+filepath.Join(dir, ov.GGUFLinearLibrary))
	if !strings.Contains(stderr, "make build") || !strings.Contains(stderr, "--weights native") {
		t.Errorf("the error says neither how to build the library nor what to use instead: %q", stderr)
	}
	if stderr, code := run("native"); code != 0 || strings.Contains(stderr, "kernel") {
		t.Errorf("native weights without the kernel library: exit %d, stderr %q", code, stderr)
	}
}

// wheelWithout is a folder of links to every file of the wheel's OpenVINO
// libraries but library, for ov.EnvLibrary.
func wheelWithout(t *testing.T, library string) string {
	t.Helper()
	libs := filepath.Join(testenv.RepoRoot(t), ".venv", "openvino", "libs")
	es, err := os.ReadDir(libs)
	if err != nil {
		t.Skipf("no wheel: %v", err)
	}
	dir := t.TempDir()
	for _, e := range es {
		if e.Name() != library {
			if err := os.Symlink(filepath.Join(libs, e.Name()), filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}
