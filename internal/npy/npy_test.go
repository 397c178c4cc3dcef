package npy

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testenv"
)

func TestRoundTripAndNumPyReadsIt(t *testing.T) {
	rows := [][]float32{{1, -2.5, 3e-7}, {0, 42, -1e9}}
	path := filepath.Join(t.TempDir(), "x.npy")
	if err := WriteFile(path, rows); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if !slices.Equal(got[i], rows[i]) {
			t.Fatalf("row %d = %v, want %v", i, got[i], rows[i])
		}
	}
	out, err := exec.Command(testenv.Python(t), "-c", "import numpy as np, sys; a = np.load(sys.argv[1]); print(a.dtype, a.shape, a[1, 1])", path).CombinedOutput()
	if err != nil {
		t.Fatalf("numpy: %v\n%s", err, out)
	}
	if want := "float32 (2, 3) 42.0"; strings.TrimSpace(string(out)) != want {
		t.Errorf("numpy reads %q, want %q", out, want)
	}
}

func TestRejectsRaggedRows(t *testing.T) {
	if err := WriteFile(filepath.Join(t.TempDir(), "x.npy"), [][]float32{{1, 2}, {3}}); err == nil {
		t.Fatal("ragged rows accepted")
	}
}
