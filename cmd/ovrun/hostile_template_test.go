package main

// Hostile chat templates through the binary: a model whose template
// recurses, allocates or spins without end is refused at load with one
// line naming it, and Ctrl-C or a killed ovrun ends its template worker.

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/internal/testenv"
)

// templateModel is the tiny synthetic checkpoint with a tokenizer and
// chat template src in tokenizer_config.json, as a Hugging Face folder
// carries them.
func templateModel(t *testing.T, src string) string {
	t.Helper()
	dir := copyCheckpoint(t, "tiny")
	tok := `{"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"model": {"type": "BPE", "vocab": {"<s>": 0, "</s>": 1, "a": 2, "b": 3}, "merges": []}}`
	cfg, _ := json.Marshal(map[string]string{"chat_template": src, "bos_token": "<s>", "eos_token": "</s>"})
	for name, b := range map[string][]byte{"tokenizer.json": []byte(tok), "tokenizer_config.json": cfg} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// spin is a template that runs until the render timeout: loops over
// strings, which range()'s limit does not count.
const spin = `{% set s = 'a' * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}`

func TestHostileChatTemplatesAreRefusedAtLoad(t *testing.T) {
	deep := "{{ " + strings.Repeat("(", 1<<19-8) + "1" + strings.Repeat(")", 1<<19-8) + " }}"
	for _, tc := range []struct{ name, src, want string }{
		{"recursive macro", `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, "recursion too deep"},
		{"range(10**9)", `{% for i in range(10**9) %}x{% endfor %}`, "loops too long"},
		{"string product", `{{ 'a' * 1000000000 }}`, "out of memory (limit 512 MiB)"},
		{"nested loops", `{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}`, "loops too long"},
		{"spin", spin, "took longer than 2s"},
		{"huge output", `{% for i in range(2000) %}{{ 'a' * 10000 }}{% endfor %}`, "output longer than"},
		{"parentheses a million deep", deep, "compile failed: recursion too deep"},
	} {
		dir := templateModel(t, tc.src)
		for _, cmd := range [][]string{
			{"chat", "--model", dir},
			{"serve", "--model", dir, "--addr", "127.0.0.1:0", "-q"},
		} {
			t.Run(tc.name+"/"+cmd[0], func(t *testing.T) {
				start := time.Now()
				_, stderr, code := ovrunIn(t, 60*time.Second, "", nil, cmd...)
				t.Logf("exit %d after %v: %s", code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr))
				assertOneLineError(t, stderr, code, tc.want)
				if !strings.Contains(stderr, dir+": chat template: ") {
					t.Errorf("stderr %q does not name the model's chat template", stderr)
				}
			})
		}
	}
}

// startSpinning starts ovrun chat on a model whose template spins, and
// returns once its template worker runs.
func startSpinning(t *testing.T) (cmd *exec.Cmd, stderr *bytes.Buffer, exited chan struct{}, worker int) {
	t.Helper()
	cmd = exec.Command(ovrunBin, "chat", "--model", templateModel(t, spin))
	stderr = &bytes.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if kids := testenv.Children(cmd.Process.Pid, "ovrun-template-worker"); len(kids) > 0 {
			worker = kids[0].Pid
			break
		}
		select {
		case <-exited:
			t.Fatalf("ovrun exited before its template worker started: %s", stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no template worker within 30 s")
		}
	}
	time.Sleep(300 * time.Millisecond) // into the probe's render
	return cmd, stderr, exited, worker
}

// waitGone fails the test unless process pid has exited within 10 s.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); testenv.Alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("%s still runs 10 s on", what)
		}
	}
}

// Ctrl-C in the middle of a render that would run to the 2 s timeout
// interrupts ovrun (exit 130, not the timeout's error) and ends the
// worker.
func TestSignalDuringTemplateRender(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd, stderr, exited, worker := startSpinning(t)
			cmd.Process.Signal(sig)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				t.Fatalf("still running 10 s after %v (stderr %q)", sig, stderr)
			}
			if code := cmd.ProcessState.ExitCode(); code != 130 {
				t.Fatalf("exit %d, want 130 (stderr %q)", code, stderr)
			}
			assertOneLineError(t, stderr.String(), 130, "interrupted")
			waitGone(t, worker, "the template worker")
		})
	}
}

// A worker whose ovrun is killed outright, in the middle of a render,
// exits by itself.
func TestTemplateWorkerDiesWithOvrun(t *testing.T) {
	cmd, _, exited, worker := startSpinning(t)
	cmd.Process.Kill()
	<-exited
	waitGone(t, worker, "the template worker of a killed ovrun")
}
