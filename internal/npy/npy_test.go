package npy

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/safefile"
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

// FuzzParse: any bytes are an error or rows that match the header's shape
// and the data, never a panic or an allocation the data does not back.
func FuzzParse(f *testing.F) {
	var b bytes.Buffer
	Write(&b, [][]float32{{1, 2, 3}, {4, 5, 6}})
	f.Add(b.Bytes())
	b.Reset()
	Write(&b, nil)
	f.Add(b.Bytes())
	f.Add([]byte("\x93NUMPY\x01\x00\x40\x00{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }"))
	f.Add([]byte("\x93NUMPY\x01\x00\x40\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 0), }"))
	f.Add([]byte("\x93NUMPY\x02\x00\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, in []byte) {
		rows, err := Parse(in)
		if err != nil {
			return
		}
		n := 0
		for _, r := range rows {
			n += len(r)
			if len(r) != len(rows[0]) {
				t.Fatal("ragged rows")
			}
		}
		if 4*n > len(in) || len(rows) > maxEmptyRows && n == 0 {
			t.Fatalf("%d rows, %d values from %d bytes", len(rows), n, len(in))
		}
	})
}

func TestParseRejectsOverflowingShape(t *testing.T) {
	// 2^62 * 4 * 4 bytes wraps to 0 in int64 arithmetic.
	h := "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }"
	in := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), 0)
	if _, err := Parse(append(in, h...)); err == nil {
		t.Fatal("overflowing shape accepted")
	}
	if _, err := ReadFile("/dev/zero"); !errors.Is(err, safefile.ErrNotRegular) {
		t.Errorf("/dev/zero: %v", err)
	}
}
