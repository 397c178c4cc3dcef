package ov

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testenv"
)

// TestHeaderVersion checks the package's constants against the headers it
// is compiled with.
func TestHeaderVersion(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", ".venv", "openvino", "include", "openvino", "core", "version.hpp"))
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) int {
		m := regexp.MustCompile(`#define\s+OPENVINO_VERSION_` + name + `\s+(\d+)`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("OPENVINO_VERSION_%s not in version.hpp", name)
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	major, minor, patch := get("MAJOR"), get("MINOR"), get("PATCH")
	if want := fmt.Sprintf("%d.%d", major, minor); headerVersion != want {
		t.Errorf("headerVersion = %q, headers say %q", headerVersion, want)
	}
	if want := strings.TrimPrefix(fmt.Sprintf("%d%d%d", major, minor, patch), "20"); soVersion != want {
		t.Errorf("soVersion = %q, headers say %q", soVersion, want)
	}
}

const helperEnv = "OVRUN_OV_TEST_LOAD_HELPER"

// TestLoadHelperProcess is not a test by itself: TestLoadInSubprocess runs
// the test binary again with helperEnv set, so that Load, which runs once
// per process, sees a fresh environment. It prints Load's outcome.
func TestLoadHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper for TestLoadInSubprocess")
	}
	err := Load()
	switch {
	case err == nil:
		fmt.Printf("LOAD ok %s\n", LibraryPath())
	case errors.Is(err, ErrLibraryNotFound):
		fmt.Printf("LOAD notfound %s\n", err)
	case errors.Is(err, ErrLibraryUnusable):
		fmt.Printf("LOAD unusable %s\n", err)
	default:
		fmt.Printf("LOAD other %s\n", err)
	}
}

func TestLoadInSubprocess(t *testing.T) {
	if err := Load(); err != nil {
		t.Fatal(err) // the positive case below needs the real library
	}
	realDir := filepath.Dir(LibraryPath())
	if LibraryPath() == libName {
		t.Skip("library found by the loader, not in a folder")
	}
	wrongVersion := t.TempDir()
	if err := os.WriteFile(filepath.Join(wrongVersion, libPrefix+"2600"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(t.TempDir(), libName)
	if err := os.WriteFile(fake, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		env     string
		outcome string // ok, notfound, unusable
		mention []string
	}{
		{"missing path", "/nonexistent", "notfound", []string{"OVRUN_OPENVINO_LIB=/nonexistent", "make setup"}},
		{"empty folder", t.TempDir(), "notfound", []string{"no libopenvino_c.so.* there"}},
		{"wrong version", wrongVersion, "notfound", []string{"only libopenvino_c.so.2600 there, need " + libName}},
		{"not a library", fake, "unusable", []string{fake, "OVRUN_OPENVINO_LIB"}},
		{"real folder", realDir, "ok", []string{filepath.Join(realDir, libName)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestLoadHelperProcess$")
			cmd.Env = append(os.Environ(), helperEnv+"=1", EnvLibrary+"="+tt.env)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("helper: %v\n%s", err, out)
			}
			var line string
			for _, l := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(l, "LOAD ") {
					line = l
				}
			}
			outcome, msg, _ := strings.Cut(strings.TrimPrefix(line, "LOAD "), " ")
			if outcome != tt.outcome {
				t.Fatalf("outcome %q, want %q; output:\n%s", outcome, tt.outcome, out)
			}
			for _, s := range tt.mention {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q does not mention %q", msg, s)
				}
			}
			if strings.Count(string(out), "LOAD ") != 1 {
				t.Errorf("message spans several lines:\n%s", out)
			}
		})
	}
}

// TestLoadIgnoresLibraryInParentOfWorkingDirectory plants a library whose
// constructor leaves a marker in a parent folder of the working directory,
// as anyone able to write /tmp could, and checks that Load neither finds
// nor runs it.
func TestLoadIgnoresLibraryInParentOfWorkingDirectory(t *testing.T) {
	root := t.TempDir()
	marker := filepath.Join(root, "constructor-ran")
	libs := filepath.Join(root, ".venv", "openvino", "libs")
	testenv.PlantLibrary(t, filepath.Join(libs, libName), marker)
	cwd := filepath.Join(root, "a", "b")
	if err := os.MkdirAll(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLoadHelperProcess$")
	cmd.Dir = cwd
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvLibrary+"=") && !strings.HasPrefix(kv, "VIRTUAL_ENV=") && !strings.HasPrefix(kv, "LD_LIBRARY_PATH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, helperEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "LOAD notfound") {
		t.Errorf("want not found, got:\n%s", out)
	}
	if strings.Contains(string(out), root) {
		t.Errorf("the message mentions the planted folder:\n%s", out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the planted library's constructor ran")
	}
}
