// Package rungcache is the compiled-rung cache: compiled graph blobs, each
// named by the key of everything that changes the compiled result (see
// Parts), with metadata that carries the blob's size and CRC-32Cs.
//
// A Cache is a local Folder, optionally in front of a shared Store:
//
//   - Folder (folder.go) is a cache folder, the whole cache of a
//     --cache-dir DIR. Get verifies the blob before handing it out and
//     marks it used; Put writes it atomically and evicts the least recently
//     used entries past the size cap. A corrupt, truncated or foreign entry
//     is discarded with a note, never a crash. Several processes may share
//     one folder: every read and write of an entry happens under an
//     exclusive lock on the folder's lock file (a listing under a shared
//     one), and files appear only by rename. A lock held too long is waited
//     for with a message and a limit, then the Folder goes on without the
//     folder (lock.go). Each blob file ends with its key, so a blob in
//     another entry's place is discarded too. Only files named like entries
//     (64 hex digits, .blob or .json) are ever read or removed.
//   - Store (store.go) is a place entries are shared between machines, a
//     bucket in object storage for --cache-dir s3://bucket/prefix (package
//     s3store registers the scheme; a Folder is one too, FolderStore). The folder then is a read-through
//     tier (LocalDir): a miss there is fetched from the store, verified and
//     installed in the folder, and later reads are local; a Put stores the
//     entry in the folder and publishes it to the store. A store that
//     cannot be reached costs a note and the cache goes on with the folder
//     alone, trying the store again a minute later (remote.go).
//
// The blob's check is a CRC-32C per 16 MiB piece, the pieces checked on
// every core (hardware CRC, ~5 GB/s a core here: the check costs
// a few percent of an import, where a SHA-256 cost a tenth of it); it guards
// against damage, not against an attacker who can write the folder or the
// bucket, who could as well write a valid entry. Whatever a Store returns
// is checked the same way before it is installed.
//
// OpenVINO's own CACHE_DIR is not used: it imports a blob with flipped
// bytes without complaint (TestOpenVINOCacheDirTakesAFlippedBlob in
// runtime/ovexec), and it has no size cap.
package rungcache

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Cache is a cache Folder, and the Store behind it where there is one.
type Cache struct {
	local  *Folder
	remote *Remote // nil without a Store

	mu      sync.Mutex
	pending []string // notes for the next Get or Put (the store could not be opened)
}

// Open opens the cache where names: a folder (created if need be) with a
// size cap of maxBytes (DefaultMaxBytes when 0 or less), or the URL of a
// Store (s3://bucket/prefix) with the folder LocalDir in front of it under
// that cap. A malformed URL is an error; a store that cannot be opened
// (its configuration) is a note on the first Get or Put, and the cache
// goes on with the folder alone.
func Open(where string, maxBytes int64) (*Cache, error) {
	if !IsStoreURL(where) {
		f, err := OpenFolder(where, maxBytes)
		if err != nil {
			return nil, err
		}
		return &Cache{local: f}, nil
	}
	if err := CheckStoreURL(where); err != nil {
		return nil, err
	}
	dir, err := LocalDir()
	if err != nil {
		return nil, err
	}
	local, err := OpenFolder(dir, maxBytes)
	if err != nil {
		return nil, fmt.Errorf("rung cache: the local tier of %s: %w", where, err)
	}
	c := &Cache{local: local}
	if c.remote, err = OpenRemote(where); err != nil {
		c.pending = append(c.pending, notice(fmt.Sprintf("rung cache: %v; going on with the local tier %s only", err, dir)))
	}
	return c, nil
}

// LocalDirEnv names the folder in front of a Store (the local tier).
const LocalDirEnv = "OVRUN_CACHE_LOCAL_DIR"

// LocalDir is the local tier of a Cache on a Store: $OVRUN_CACHE_LOCAL_DIR,
// else ovrun/rungs in the user's cache folder ($XDG_CACHE_HOME, else
// ~/.cache).
func LocalDir() (string, error) {
	if d := os.Getenv(LocalDirEnv); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("rung cache: no folder for the local tier (set %s): %w", LocalDirEnv, err)
	}
	return filepath.Join(d, "ovrun", "rungs"), nil
}

// Dir is the cache folder (the local tier, with a Store).
func (c *Cache) Dir() string { return c.local.Dir() }

// Where is what the cache was opened on: the Store's URL, else the folder.
func (c *Cache) Where() string {
	if c.remote != nil {
		return c.remote.String()
	}
	return c.local.Dir()
}

// MaxBytes is the folder's size cap.
func (c *Cache) MaxBytes() int64 { return c.local.MaxBytes() }

// SetLockWait sets how c waits for its folder's lock.
func (c *Cache) SetLockWait(w LockWait) { c.local.SetLockWait(w) }

// Has reports whether an entry for k is in the folder or the store
// (without verifying it).
func (c *Cache) Has(k Key) bool {
	if c.local.Has(k) {
		return true
	}
	return c.remote != nil && c.remote.has(k)
}

// Get returns the verified blob of k and its metadata, and marks the entry
// used; the caller closes the blob. A miss in the folder is fetched from
// the store, verified and installed in the folder. ok is false on a miss;
// note, when not empty, says why an entry that was there was discarded
// (corrupt, truncated, foreign, unreadable), that the folder's lock was
// held too long, or that the store cannot be reached.
func (c *Cache) Get(k Key) (blob *Blob, m Meta, ok bool, note string) {
	blob, m, ok, note = c.local.Get(k)
	notes := appendNote(nil, note)
	switch {
	case c.remote == nil:
	case ok:
		c.remote.touch(k, &localHit{blob, m})
	case c.local.offErr() == nil:
		fetched, more := c.remote.fetch(k, c.local)
		notes = append(notes, more...)
		if fetched {
			blob, m, ok, note = c.local.Get(k)
			notes = appendNote(notes, note)
		}
	}
	return blob, m, ok, strings.Join(append(c.takePending(), notes...), "; ")
}

// Put stores an entry for k in the folder (Folder.Put) and publishes it to
// the store. A failure to publish is a note: the entry is stored locally
// all the same.
func (c *Cache) Put(k Key, m Meta, write func(path string) error) (notes []string, err error) {
	m, f, notes, err := c.local.put(k, m, write)
	if f != nil {
		defer f.Close()
		if c.remote != nil {
			c.remote.publish(k, m, f)
		}
	}
	return append(c.takePending(), notes...), err
}

// Discard removes k's entry from the folder and the store (a blob OpenVINO
// refused to import).
func (c *Cache) Discard(k Key) error {
	err := c.local.Discard(k)
	if c.remote != nil {
		c.remote.discard(k)
	}
	return err
}

// List returns the folder's entries (Folder.List); a Store's are listed
// by Remote.List.
func (c *Cache) List() ([]Entry, error) { return c.local.List() }

// Prune prunes the folder (Folder.Prune).
func (c *Cache) Prune(maxBytes int64, olderThan time.Duration) ([]Entry, error) {
	return c.local.Prune(maxBytes, olderThan)
}

// Clear clears the folder (Folder.Clear) and its digest memo.
func (c *Cache) Clear() ([]Entry, error) {
	gone, err := c.local.Clear()
	c.clearDigests()
	return gone, err
}

// takePending returns the notes not yet given: the store's state.
func (c *Cache) takePending() []string {
	c.mu.Lock()
	p := c.pending
	c.pending = nil
	c.mu.Unlock()
	if c.remote != nil {
		p = append(p, c.remote.takePending()...)
	}
	return p
}

func appendNote(notes []string, n string) []string {
	if n == "" {
		return notes
	}
	return append(notes, n)
}
