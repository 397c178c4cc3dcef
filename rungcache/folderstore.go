package rungcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// FolderStore is a Folder as a Store: a cache folder other processes
// publish to and fetch from (one on a shared file system, say, behind each
// machine's own folder), with the folder's own locking and checks. The
// Cache of a --cache-dir DIR uses its Folder directly (Get maps the blob in
// place, without a copy); a FolderStore copies entries in and out.
type FolderStore struct{ c *Folder }

var _ Store = FolderStore{}

// AsStore is the folder as a Store.
func (c *Folder) AsStore() FolderStore { return FolderStore{c} }

// String is the folder.
func (s FolderStore) String() string { return s.c.dir }

// Stat reports whether k's metadata file exists.
func (s FolderStore) Stat(_ context.Context, k Key) (bool, error) { return s.c.Has(k), nil }

// List lists the folder's entries.
func (s FolderStore) List(context.Context) ([]Entry, error) { return s.c.List() }

// Fetch writes k's verified blob file to w. A damaged entry is removed
// and the error wraps ErrDamaged.
func (s FolderStore) Fetch(_ context.Context, k Key, w io.Writer) (Meta, bool, error) {
	c := s.c
	unlock, err := c.lock(false)
	if err != nil {
		return Meta{}, false, err
	}
	defer unlock()
	if _, err := os.Lstat(c.metaPath(k)); errors.Is(err, fs.ErrNotExist) {
		return Meta{}, false, nil
	}
	blob, m, err := c.read(k)
	if err != nil {
		c.remove(k)
		return Meta{}, true, fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	defer blob.Close()
	now := c.now()
	os.Chtimes(c.metaPath(k), now, now)
	_, err = w.Write(blob.mapped)
	return m, true, err
}

// Publish copies size bytes of r into the folder as k's blob file with
// metadata m, as Put stores an entry.
func (s FolderStore) Publish(_ context.Context, k Key, m Meta, r io.ReaderAt, size int64) error {
	c := s.c
	if err := c.offErr(); err != nil {
		return err
	}
	tmp, err := c.tempFile(k.String() + ".blob")
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // a no-op once renamed
	f, err := os.OpenFile(tmp, os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, io.NewSectionReader(r, 0, size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("rung cache: write entry %s: %w", k.Short(), err)
	}
	if _, _, err := syncAndSum(tmp); err != nil {
		return fmt.Errorf("rung cache: write entry %s: %w", k.Short(), err)
	}
	m.Object = ""
	_, f, _, err = c.install(k, m, tmp)
	if f != nil {
		f.Close()
	}
	return err
}

// Touch marks k's entry used now (its metadata file's time).
func (s FolderStore) Touch(_ context.Context, k Key) error {
	unlock, err := s.c.lock(false)
	if err != nil {
		return err
	}
	defer unlock()
	now := s.c.now()
	if err := os.Chtimes(s.c.metaPath(k), now, now); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Remove removes k's entry (a folder has one blob per entry: object is
// not used).
func (s FolderStore) Remove(_ context.Context, k Key, _ string) error { return s.c.Discard(k) }

// Sweep removes temporary files of writers older than age.
func (s FolderStore) Sweep(_ context.Context, age time.Duration) error {
	c := s.c
	unlock, err := c.lock(false)
	if err != nil {
		return err
	}
	defer unlock()
	c.removeTemps(age)
	return nil
}
