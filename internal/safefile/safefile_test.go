package safefile

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// entries lists the names in dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteReplacesRegularFileAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.json")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(path, map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if string(b) != "{\n  \"a\": 1\n}\n" {
		t.Errorf("content %q", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want the replaced file's 0600", fi.Mode().Perm())
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("left %v, want only out.json", names)
	}
}

func TestWriteRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(victim, link)
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	for _, tc := range []struct{ name, path, kind string }{
		{"fifo", fifo, "named pipe"},
		{"symlink", link, "symbolic link"},
		{"folder", sub, "folder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, err := range []error{Check(tc.path), WriteFile(tc.path, []byte("x"))} {
				if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), tc.kind) {
					t.Errorf("err = %v, want ErrNotRegular naming %s", err, tc.kind)
				}
			}
		})
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Error("the FIFO was replaced")
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Error("the symlink was replaced")
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("symlink target changed to %q", b)
	}
	// A real device is only checked, never written: Check must refuse it.
	if err := Check("/dev/null"); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "character device") {
		t.Errorf("Check(/dev/null) = %v", err)
	}
	if fi, err := os.Lstat("/dev/null"); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatal("/dev/null is no longer a character device")
	}
	if names := entries(t, dir); len(names) != 4 {
		t.Errorf("left %v", names)
	}
}

func TestPlantedTemporaryNameIsNotFollowed(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	path := filepath.Join(dir, "out.json")
	os.Symlink(victim, path+".tmp") // the name older versions wrote to
	if err := WriteFile(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("victim = %q", b)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Errorf("out = %q", b)
	}
}

func TestFailureLeavesOldFileAndNoTemporary(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out")
	os.WriteFile(path, []byte("old"), 0o644)
	boom := errors.New("boom")
	err := Write(path, func(w io.Writer) error {
		w.Write(bytes.Repeat([]byte("x"), 1<<20))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("out = %q", b)
	}
	f, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("partial"))
	RemoveTemps() // what a second Ctrl-C does before exiting
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("left %v, want only out", names)
	}
	f.Abort()
}

func TestCheckFolder(t *testing.T) {
	dir := t.TempDir()
	if err := Check(filepath.Join(dir, "missing", "x.json")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing folder: %v", err)
	}
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	if err := Check(filepath.Join(file, "x.json")); err == nil {
		t.Error("a file as folder accepted")
	}
	if err := Check(filepath.Join(dir, "x.json")); err != nil {
		t.Error(err)
	}
	if err := Check(Stdout); err != nil {
		t.Error(err)
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("Check left %v", names)
	}
}

func TestOpenRefusesFIFOAndDevicesWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	syscall.Mkfifo(fifo, 0o644)
	zero := filepath.Join(dir, "zero")
	os.Symlink("/dev/zero", zero)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, p := range []string{fifo, zero, dir} {
			if _, err := ReadFile(p, 1<<20); !errors.Is(err, ErrNotRegular) {
				t.Errorf("ReadFile(%s) = %v, want ErrNotRegular", p, err)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("ReadFile blocked")
	}
}

func TestReadFileLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	os.WriteFile(p, make([]byte, 100), 0o644)
	if _, err := ReadFile(p, 99); !errors.Is(err, ErrTooLarge) {
		t.Errorf("err = %v", err)
	}
	if b, err := ReadFile(p, 100); err != nil || len(b) != 100 {
		t.Errorf("%d bytes, %v", len(b), err)
	}
	r := LimitReader(bytes.NewReader(make([]byte, 10)), 9, "x")
	if _, err := io.ReadAll(r); !errors.Is(err, ErrTooLarge) {
		t.Errorf("LimitReader: %v", err)
	}
	r = LimitReader(bytes.NewReader(make([]byte, 9)), 9, "x")
	if b, err := io.ReadAll(r); err != nil || len(b) != 9 {
		t.Errorf("LimitReader at the limit: %d, %v", len(b), err)
	}
}

type inner struct {
	X float64 `json:"x"`
}

type withNaN struct {
	Name  string             `json:"name"`
	Skip  string             `json:"-"`
	Empty []int              `json:"empty,omitempty"`
	Ptr   *float64           `json:"ptr"`
	In    inner              `json:"in"`
	List  []float64          `json:"list"`
	Map   map[string]float64 `json:"map"`
	Bytes []byte             `json:"bytes"`
	Time  time.Duration      `json:"d"`
	inner
}

func TestMarshalJSONWritesNullForNonFinite(t *testing.T) {
	nan := math.NaN()
	v := withNaN{Name: "n", Skip: "s", Ptr: &nan, In: inner{math.Inf(1)}, List: []float64{1, math.Inf(-1)},
		Map: map[string]float64{"k": nan}, Bytes: []byte("hi"), Time: 3, inner: inner{2}}
	b, err := MarshalJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"n","ptr":null,"in":{"x":null},"list":[1,null],"map":{"k":null},"bytes":"aGk=","d":3,"x":2}`
	var got bytes.Buffer
	if err := json.Compact(&got, b); err != nil || got.String() != want {
		t.Errorf("got  %s\nwant %s (%v)", got.String(), want, err)
	}
	if b, _ := MarshalJSON(inner{1.5}); string(b) != "{\n  \"x\": 1.5\n}" {
		t.Errorf("finite value: %s", b)
	}
}
