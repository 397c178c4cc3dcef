package safefile

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Stdout is the output path that means standard output.
const Stdout = "-"

// Check reports whether Create can write path, without writing it: "-", or
// a path that is absent or a regular file (not a symlink, FIFO, device or
// folder) in an existing, writable folder. Commands call it for every
// output path before they start the work, so a typo does not cost a run.
func Check(path string) error {
	if path == Stdout {
		return nil
	}
	if err := checkTarget(path); err != nil {
		return err
	}
	return CheckDir(filepath.Dir(path))
}

// CheckDir reports whether dir is an existing folder this process can
// create files in (it creates and removes a probe file).
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("output folder %s: %w", dir, unwrapPath(err))
	}
	if !fi.IsDir() {
		return fmt.Errorf("output folder %s: %w (%s)", dir, ErrNotRegular, Kind(fi.Mode()))
	}
	f, name, err := createTemp(dir, ".probe")
	if err != nil {
		return fmt.Errorf("output folder %s is not writable: %w", dir, unwrapPath(err))
	}
	f.Close()
	return os.Remove(name)
}

// MkdirAll creates the output folder dir (and its parents) and checks that
// it is writable.
func MkdirAll(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output folder %s: %w", dir, unwrapPath(err))
	}
	return CheckDir(dir)
}

// checkTarget refuses to replace anything but a regular file.
func checkTarget(path string) error {
	if path == "" {
		return errors.New("empty output path")
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("refusing to replace %s: %w but %s (give - for standard output)", path, ErrNotRegular, Kind(fi.Mode()))
	}
	return nil
}

// File is an output being written. Write to it, then Commit to put it in
// place; Abort (safe to defer, a no-op after Commit) removes it instead.
type File struct {
	path, tmp string
	f         *os.File
	done      bool
}

// Create starts writing path: "-" is standard output; anything else goes to
// a new temporary file beside path until Commit.
func Create(path string) (*File, error) {
	if path == Stdout {
		return &File{path: path, f: os.Stdout}, nil
	}
	if err := checkTarget(path); err != nil {
		return nil, err
	}
	f, tmp, err := createTemp(filepath.Dir(path), "."+filepath.Base(path))
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, unwrapPath(err))
	}
	return &File{path: path, tmp: tmp, f: f}, nil
}

// Path is the destination.
func (f *File) Path() string { return f.path }

// Write writes to the temporary file (or standard output).
func (f *File) Write(p []byte) (int, error) {
	n, err := f.f.Write(p)
	if err != nil {
		err = fmt.Errorf("write %s: %w", f.path, unwrapPath(err))
	}
	return n, err
}

// Commit syncs the temporary file and renames it over the destination,
// which must still be absent or a regular file. On failure the temporary
// file is removed and the destination is untouched.
func (f *File) Commit() error {
	if f.done {
		return fmt.Errorf("write %s: already committed or aborted", f.path)
	}
	if f.tmp == "" {
		f.done = true
		return nil
	}
	err := errors.Join(f.f.Sync(), f.f.Close())
	f.f = nil
	if err == nil {
		err = checkTarget(f.path)
	}
	if err == nil {
		if fi, serr := os.Lstat(f.path); serr == nil {
			err = os.Chmod(f.tmp, fi.Mode().Perm()) // keep the mode of the file replaced
		}
	}
	if err == nil {
		err = os.Rename(f.tmp, f.path)
	}
	if err != nil {
		f.Abort()
		return fmt.Errorf("write %s: %w", f.path, unwrapPath(err))
	}
	forget(f.tmp)
	f.done = true
	if d, derr := os.Open(filepath.Dir(f.path)); derr == nil { // make the rename durable
		d.Sync()
		d.Close()
	}
	return nil
}

// Abort removes the temporary file; after Commit it does nothing.
func (f *File) Abort() {
	if f == nil || f.done {
		return
	}
	f.done = true
	if f.tmp == "" {
		return
	}
	if f.f != nil {
		f.f.Close()
	}
	os.Remove(f.tmp)
	forget(f.tmp)
}

// Write writes path with fn through a buffered writer and commits it;
// on any failure the destination is untouched.
func Write(path string, fn func(w io.Writer) error) error {
	f, err := Create(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	bw := bufio.NewWriterSize(f, 1<<16)
	if err := fn(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Commit()
}

// WriteFile writes b to path (see Write).
func WriteFile(path string, b []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// createTemp creates dir/prefix.<random>.tmp exclusively, never following
// a symlink, and registers it for RemoveTemps.
func createTemp(dir, prefix string) (*os.File, string, error) {
	var b [8]byte
	for range 100 {
		rand.Read(b[:])
		name := filepath.Join(dir, prefix+"."+hex.EncodeToString(b[:])+".tmp")
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		remember(name)
		return f, name, nil
	}
	return nil, "", fmt.Errorf("create a temporary file in %s: too many collisions", dir)
}

var (
	tempsMu sync.Mutex
	temps   = map[string]bool{}
)

func remember(name string) { tempsMu.Lock(); temps[name] = true; tempsMu.Unlock() }
func forget(name string)   { tempsMu.Lock(); delete(temps, name); tempsMu.Unlock() }

// RemoveTemps removes the temporary files of every output still being
// written; a process that must exit at once (a second Ctrl-C) calls it
// first so that it leaves nothing behind.
func RemoveTemps() {
	tempsMu.Lock()
	defer tempsMu.Unlock()
	for name := range temps {
		os.Remove(name)
		delete(temps, name)
	}
}

// unwrapPath drops the *PathError wrapper around a syscall error when the
// message already names the path, keeping messages to one mention of it.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
