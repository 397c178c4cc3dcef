// Package safefile reads the files the binaries are given and writes the
// files they produce, defensively.
//
// Inputs must be regular files: a FIFO, a device or a folder is refused
// before it is read (the open never blocks), and every read has a size limit.
// Outputs go to a temporary file with a random name in the destination
// folder (created exclusively, never through a symlink), are synced and then
// renamed into place; only a regular file is ever replaced, and "-" writes
// to standard output. Every failure removes the temporary file.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is wrapped by the errors for a path that is a FIFO, a
// device, a socket or a folder where a regular file is needed.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by the errors for an input over its size limit.
var ErrTooLarge = errors.New("file too large")

// Open opens path for reading if it is a regular file (symlinks are
// followed). The file is checked before and after the open, which never
// blocks: a FIFO swapped in between is refused too.
func Open(path string) (*os.File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(path, fi.Mode())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if fi, err = f.Stat(); err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, notRegular(path, fi.Mode())
	}
	return f, nil
}

// ReadFile reads a regular file of at most limit bytes.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > limit {
		return nil, tooLarge(path, fi.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit { // it grew while read
		return nil, tooLarge(path, int64(len(b)), limit)
	}
	return b, nil
}

// LimitReader reads from r and fails with ErrTooLarge (naming what) once
// more than limit bytes have come, instead of stopping silently.
func LimitReader(r io.Reader, limit int64, what string) io.Reader {
	return &limitReader{r: r, left: limit, limit: limit, what: what}
}

type limitReader struct {
	r           io.Reader
	left, limit int64
	what        string
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, l.err()
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1] // one byte past the limit tells a larger input apart
	}
	n, err := l.r.Read(p)
	if int64(n) > l.left {
		n, l.left = int(l.left), -1
		return n, l.err()
	}
	l.left -= int64(n)
	return n, err
}

func (l *limitReader) err() error {
	return fmt.Errorf("%s: %w: more than %s", l.what, ErrTooLarge, Size(l.limit))
}

func tooLarge(path string, size, limit int64) error {
	return fmt.Errorf("%s: %w: %s, the limit is %s", path, ErrTooLarge, Size(size), Size(limit))
}

func notRegular(path string, m fs.FileMode) error {
	return fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, Kind(m))
}

// Kind names the type of file m describes, for messages.
func Kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a folder"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a regular file"
}

// Size formats a byte count for messages (B, KiB, MiB, GiB).
func Size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
