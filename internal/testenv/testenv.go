// Package testenv finds what the project's tests need outside Go: the
// repository root, the project's Python (with numpy, for the independent
// reference forward pass) and synthetic checkpoints.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testpy"
	"github.com/ovtoolkit/ovrun/model"
)

// RepoRoot, Python, Run and SmolLM2 are testpy's, here for the tests that
// also need synthetic checkpoints.
func RepoRoot(t testing.TB) string { t.Helper(); return testpy.RepoRoot(t) }

// Python is the project's virtual-environment interpreter.
func Python(t testing.TB) string { t.Helper(); return testpy.Python(t) }

// Run executes a command and returns its combined output.
func Run(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	return testpy.Run(t, name, args...)
}

// SmolLM2 returns the path of the real SmolLM2 GGUF.
func SmolLM2(t testing.TB) string { t.Helper(); return testpy.SmolLM2(t) }

// UseProjectOpenVINO points OVRUN_OPENVINO_LIB at the project's
// .venv/openvino/libs unless it is already set, for the test binary and the
// processes it starts: test binaries and binaries built into temporary
// folders are not next to the project's .venv, and the library search
// never looks in the working directory. Call it from TestMain.
func UseProjectOpenVINO() {
	if os.Getenv("OVRUN_OPENVINO_LIB") != "" {
		return
	}
	dir, err := os.Getwd()
	if err != nil {
		return
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		if filepath.Dir(dir) == dir {
			return
		}
		dir = filepath.Dir(dir)
	}
	libs := filepath.Join(dir, ".venv", "openvino", "libs")
	if _, err := os.Stat(libs); err == nil {
		os.Setenv("OVRUN_OPENVINO_LIB", libs)
	}
}

var (
	synthMu    sync.Mutex
	synthCache = map[string]string{}
	synthRoot  string
)

// Synth returns the folder of a synthetic checkpoint, generated once per test
// binary into a shared temporary folder.
func Synth(t testing.TB, preset string, dtype model.DType) string {
	t.Helper()
	synthMu.Lock()
	defer synthMu.Unlock()
	key := preset + "-" + string(dtype)
	if dir, ok := synthCache[key]; ok {
		return dir
	}
	if synthRoot == "" {
		d, err := os.MkdirTemp("", "ovrun-synth-")
		if err != nil {
			t.Fatal(err)
		}
		synthRoot = d
	}
	dir := filepath.Join(synthRoot, key)
	if err := model.Synthesize(preset, 1, dtype, dir); err != nil {
		t.Fatalf("synthesize %s: %v", key, err)
	}
	synthCache[key] = dir
	return dir
}

// Cleanup removes the synthetic checkpoints; call it from TestMain.
func Cleanup() error {
	synthMu.Lock()
	defer synthMu.Unlock()
	if synthRoot == "" {
		return nil
	}
	err := os.RemoveAll(synthRoot)
	synthRoot, synthCache = "", map[string]string{}
	return err
}

// PlantLibrary compiles a shared library at path whose constructor creates
// marker, standing in for a malicious libopenvino_c; the test is skipped
// without a C compiler.
func PlantLibrary(t testing.TB, path, marker string) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "planted.c")
	code := fmt.Sprintf(`#include <stdio.h>
__attribute__((constructor)) static void ran(void) { FILE *f = fopen(%q, "w"); if (f) fclose(f); }
`, marker)
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", path, src).CombinedOutput(); err != nil {
		t.Skipf("no C compiler to build the planted library: %v\n%s", err, out)
	}
}
