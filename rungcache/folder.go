package rungcache

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

// DefaultMaxBytes is the size cap of a cache folder when none is given.
const DefaultMaxBytes int64 = 8 << 30

// lockName is the lock file every process sharing the folder locks.
const lockName = ".rungcache.lock"

// staleTemp is how old a leftover temporary file must be before a Put
// removes it (a writer that crashed).
const staleTemp = time.Hour

var entryName = regexp.MustCompile(`^([0-9a-f]{64})\.(blob|json)$`)

// Folder is one cache folder with a size cap: the entries of a
// --cache-dir DIR, and the local tier in front of a Store.
type Folder struct {
	dir string
	max int64
	now func() time.Time

	mu      sync.Mutex
	wait    LockWait // how to wait for the folder's lock (lock.go)
	off     error    // set once c goes on without the folder (ErrLockWait)
	offSaid bool     // a Get's note has said so
}

// OpenFolder uses dir as a cache folder (creating it) with a cap of maxBytes
// (DefaultMaxBytes when 0 or less).
func OpenFolder(dir string, maxBytes int64) (*Folder, error) {
	if dir == "" {
		return nil, errors.New("rung cache: empty folder name")
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if err := safefile.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("rung cache: %w", err)
	}
	return &Folder{dir: dir, max: maxBytes, now: time.Now, wait: defaultLockWait()}, nil
}

// OpenFolderRead uses the existing folder dir as a cache to read (List, Get)
// without the right to write it: a read-only folder lists, and its entries
// import (though a damaged one cannot be removed).
func OpenFolderRead(dir string) (*Folder, error) {
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return nil, fmt.Errorf("rung cache: %w", err)
	case !fi.IsDir():
		return nil, fmt.Errorf("rung cache %s is %s, not a folder", dir, safefile.Kind(fi.Mode()))
	}
	return &Folder{dir: dir, max: DefaultMaxBytes, now: time.Now, wait: defaultLockWait()}, nil
}

// Dir is the cache folder.
func (c *Folder) Dir() string { return c.dir }

// MaxBytes is the size cap.
func (c *Folder) MaxBytes() int64 { return c.max }

func (c *Folder) blobPath(k Key) string { return filepath.Join(c.dir, k.String()+".blob") }
func (c *Folder) metaPath(k Key) string { return filepath.Join(c.dir, k.String()+".json") }

// Has reports whether an entry for k is present (without verifying it).
func (c *Folder) Has(k Key) bool {
	if c.offErr() != nil {
		return false // nothing will be read from it
	}
	fi, err := os.Lstat(c.metaPath(k))
	return err == nil && fi.Mode().IsRegular()
}

// Get returns the verified blob of k and its metadata, and marks the entry
// used; the caller closes the blob. ok is false on a miss; note, when not
// empty, says why an entry that was there was discarded (corrupt,
// truncated, foreign, unreadable), or, once, that c goes on without the
// folder (its lock was held too long, or Ctrl-C came while waiting).
func (c *Folder) Get(k Key) (blob *Blob, m Meta, ok bool, note string) {
	unlock, err := c.lock(false)
	if errors.Is(err, ErrLockWait) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.offSaid {
			return nil, Meta{}, false, ""
		}
		c.offSaid = true
		return nil, Meta{}, false, err.Error()
	}
	if err != nil {
		return nil, Meta{}, false, err.Error()
	}
	defer unlock()
	if _, err := os.Lstat(c.metaPath(k)); errors.Is(err, fs.ErrNotExist) {
		return nil, Meta{}, false, ""
	}
	blob, m, err = c.read(k)
	if err != nil {
		c.remove(k)
		return nil, Meta{}, false, fmt.Sprintf("rung cache: discarded entry %s: %v; compiling it again", k.Short(), err)
	}
	now := c.now()
	os.Chtimes(c.metaPath(k), now, now) // last used; a failure only ages the entry
	return blob, m, true, ""
}

// read reads and verifies k's metadata and blob; c is locked.
func (c *Folder) read(k Key) (*Blob, Meta, error) {
	mb, err := readRegular(c.metaPath(k), maxMetaBytes)
	if err != nil {
		return nil, Meta{}, err
	}
	m, err := ParseMeta(mb)
	if err != nil {
		return nil, Meta{}, err
	}
	if m.Key != k.String() {
		return nil, Meta{}, fmt.Errorf("metadata is for key %s", shortHex(m.Key))
	}
	blob, err := mapBlob(c.blobPath(k), m.Size)
	if err != nil {
		return nil, Meta{}, err
	}
	if i := firstBadPiece(blob.mapped, m.CRC32C); i >= 0 {
		blob.Close()
		return nil, Meta{}, fmt.Errorf("the CRC-32C of the blob's piece %d (bytes from %d) does not match its metadata (corrupt)", i, int64(i)*pieceBytes)
	}
	if blob.b, err = checkTrailer(blob.mapped, k); err != nil {
		blob.Close()
		return nil, Meta{}, err
	}
	blob.Release() // read by the check; the import reads it again from the page cache
	return blob, m, nil
}

// Discard removes k's entry (a blob OpenVINO refused to import).
func (c *Folder) Discard(k Key) error {
	unlock, err := c.lock(false)
	if err != nil {
		return err
	}
	defer unlock()
	c.remove(k)
	return nil
}

// remove deletes k's files, metadata first so that no reader sees a
// metadata file without its blob; c is locked.
func (c *Folder) remove(k Key) {
	os.Remove(c.metaPath(k))
	os.Remove(c.blobPath(k))
}

// Put stores an entry for k: write writes the blob to the path it is given
// (a fresh temporary file in the folder, as OpenVINO's export wants a path),
// then the blob is hashed, synced and renamed into place and its metadata
// written after it. Entries past the size cap are then evicted, least
// recently used first. The notes say what was evicted.
func (c *Folder) Put(k Key, m Meta, write func(path string) error) (notes []string, err error) {
	_, f, notes, err := c.put(k, m, write)
	if f != nil {
		f.Close()
	}
	return notes, err
}

// put is Put that also returns the entry's metadata as written and the
// blob file opened for reading (a Cache publishes it to its Store after
// the folder's lock is released; an eviction that unlinks it meanwhile
// leaves the open file whole).
func (c *Folder) put(k Key, m Meta, write func(path string) error) (Meta, *os.File, []string, error) {
	if err := c.offErr(); err != nil {
		return Meta{}, nil, nil, err
	}
	tmp, err := c.tempFile(k.String() + ".blob")
	if err != nil {
		return Meta{}, nil, nil, err
	}
	defer os.Remove(tmp) // a no-op once renamed
	if err := write(tmp); err != nil {
		return Meta{}, nil, nil, fmt.Errorf("rung cache: write entry %s: %w", k.Short(), err)
	}
	if fi, err := os.Lstat(tmp); err != nil || fi.Size() == 0 {
		return Meta{}, nil, nil, fmt.Errorf("rung cache: write entry %s: the compiled blob is empty", k.Short())
	}
	if err := appendTrailer(tmp, k); err != nil {
		return Meta{}, nil, nil, fmt.Errorf("rung cache: write entry %s: %w", k.Short(), err)
	}
	size, sum, err := syncAndSum(tmp)
	if err != nil {
		return Meta{}, nil, nil, fmt.Errorf("rung cache: write entry %s: %w", k.Short(), err)
	}
	m.Format, m.Key, m.Size, m.CRC32C, m.Object = FormatVersion, k.String(), size, sum, ""
	if m.Created.IsZero() {
		m.Created = c.now().UTC()
	}
	return c.install(k, m, tmp)
}

// adopt installs the verified blob file tmp (in the folder) as k's entry
// with metadata m, as Put does: an entry fetched from a Store.
func (c *Folder) adopt(k Key, m Meta, tmp string) ([]string, error) {
	if err := c.offErr(); err != nil {
		return nil, err
	}
	m.Object = ""
	_, f, notes, err := c.install(k, m, tmp)
	if f != nil {
		f.Close()
	}
	return notes, err
}

// install renames the synced blob file tmp into k's place and writes m
// after it, under the folder's lock, then evicts past the cap; it returns
// m and the blob opened for reading.
func (c *Folder) install(k Key, m Meta, tmp string) (Meta, *os.File, []string, error) {
	mb, err := m.marshal()
	if err != nil {
		return Meta{}, nil, nil, err
	}
	unlock, err := c.lock(false)
	if err != nil {
		return Meta{}, nil, nil, err
	}
	defer unlock()
	os.Remove(c.metaPath(k)) // an old entry's metadata must not describe the new blob
	if err := os.Rename(tmp, c.blobPath(k)); err != nil {
		return Meta{}, nil, nil, fmt.Errorf("rung cache: write entry %s: %w", k.Short(), err)
	}
	if err := safefile.WriteFile(c.metaPath(k), mb); err != nil {
		os.Remove(c.blobPath(k))
		return Meta{}, nil, nil, fmt.Errorf("rung cache: %w", err)
	}
	syncDir(c.dir)
	f, _, err := openRegular(c.blobPath(k))
	if err != nil {
		f = nil // the caller publishes nothing; the entry is stored all the same
	}
	return m, f, c.evict(c.max, 0, k), nil
}

// tempFile creates an empty temporary file in the folder and returns its name.
func (c *Folder) tempFile(base string) (string, error) {
	f, err := os.CreateTemp(c.dir, "."+base+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("rung cache: %w", err)
	}
	// Keep the empty file, drop the handle: OpenVINO writes by path.
	name := f.Name()
	f.Close()
	return name, nil
}

// syncAndSum syncs the file at path and returns its size and the CRC-32C
// of each of its pieces.
func syncAndSum(path string) (int64, []uint32, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	var (
		n    int64
		sums []uint32
	)
	for {
		h := crc32.New(castagnoli)
		k, err := io.CopyN(h, f, pieceBytes)
		if k > 0 {
			n += k
			sums = append(sums, h.Sum32())
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, nil, err
		}
	}
	if err := f.Sync(); err != nil {
		return 0, nil, err
	}
	return n, sums, nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// readRegular reads a regular file (never through a symlink) of at most limit bytes.
func readRegular(path string, limit int64) ([]byte, error) {
	f, fi, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s is %s, more than the %s expected", filepath.Base(path), safefile.Size(fi.Size()), safefile.Size(limit))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), unwrap(err))
	}
	return b, nil
}

func unwrap(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Entry is one cache entry as listed: its metadata, when it was last used,
// and the bytes it takes (blob and metadata).
type Entry struct {
	Meta
	LastUsed time.Time
	Bytes    int64
}

// List returns the entries, most recently used first. Files that are not
// entries are left alone and not listed; an entry whose metadata cannot be
// read is listed with its key only.
func (c *Folder) List() ([]Entry, error) {
	unlock, err := c.lock(true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return c.list()
}

// list scans the folder; c is locked.
func (c *Folder) list() ([]Entry, error) {
	des, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, fmt.Errorf("rung cache %s: %w", c.dir, unwrap(err))
	}
	byKey := map[string]*Entry{}
	for _, de := range des {
		sm := entryName.FindStringSubmatch(de.Name())
		if sm == nil || !de.Type().IsRegular() {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue
		}
		e := byKey[sm[1]]
		if e == nil {
			e = &Entry{Meta: Meta{Key: sm[1]}}
			byKey[sm[1]] = e
		}
		e.Bytes += fi.Size()
		if sm[2] == "json" {
			e.LastUsed = fi.ModTime()
			if b, err := readRegular(filepath.Join(c.dir, de.Name()), maxMetaBytes); err == nil {
				if m, err := ParseMeta(b); err == nil && m.Key == sm[1] {
					e.Meta = m
				}
			}
		}
	}
	out := make([]Entry, 0, len(byKey))
	for _, e := range byKey {
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].LastUsed.Equal(out[j].LastUsed) {
			return out[i].LastUsed.After(out[j].LastUsed)
		}
		return out[i].Key < out[j].Key
	})
	return out, nil
}

// Prune removes entries, least recently used first, until the rest take at
// most maxBytes (no size limit when maxBytes < 0), and every entry not used
// for olderThan (none when 0). It returns what it removed.
func (c *Folder) Prune(maxBytes int64, olderThan time.Duration) ([]Entry, error) {
	unlock, err := c.lock(false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return c.prune(maxBytes, olderThan, Key{})
}

// Clear removes every entry (and leftover temporary files of entries);
// other files in the folder are kept.
func (c *Folder) Clear() ([]Entry, error) {
	unlock, err := c.lock(false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	c.removeTemps(0)
	return c.prune(0, 0, Key{})
}

// evict applies the cap after a Put, keeping k unless it alone is over the
// cap; it returns notes on what it removed; c is locked.
func (c *Folder) evict(maxBytes int64, olderThan time.Duration, keep Key) []string {
	c.removeTemps(staleTemp)
	gone, err := c.prune(maxBytes, olderThan, keep)
	if err != nil {
		return []string{err.Error()}
	}
	var notes []string
	for _, e := range gone {
		notes = append(notes, fmt.Sprintf("rung cache: evicted entry %s (%s, %s, last used %s) to stay under %s", e.Short(), e.Graph(), safefile.Size(e.Bytes), e.LastUsed.UTC().Format(time.RFC3339), safefile.Size(maxBytes)))
	}
	return notes
}

// prune is Prune with c locked; keep survives the size cap as long as
// other entries can go instead.
func (c *Folder) prune(maxBytes int64, olderThan time.Duration, keep Key) ([]Entry, error) {
	es, err := c.list()
	if err != nil {
		return nil, err
	}
	var total int64
	for _, e := range es {
		total += e.Bytes
	}
	now := c.now()
	var gone []Entry
	// es is most recently used first: walk from the back.
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		old := olderThan > 0 && now.Sub(e.LastUsed) > olderThan
		over := maxBytes >= 0 && total > maxBytes && e.Key != keep.String()
		if !old && !over {
			continue
		}
		c.removeEntry(e)
		total -= e.Bytes
		gone = append(gone, e)
	}
	// An entry that alone is over the cap goes too.
	for _, e := range es {
		if e.Key == keep.String() && maxBytes >= 0 && total > maxBytes {
			c.removeEntry(e)
			gone = append(gone, e)
		}
	}
	return gone, nil
}

func (c *Folder) removeEntry(e Entry) {
	if k, err := ParseKey(e.Key); err == nil {
		c.remove(k)
	}
}

// removeTemps removes temporary files of entries older than age; c is locked.
func (c *Folder) removeTemps(age time.Duration) {
	des, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	for _, de := range des {
		n := de.Name()
		if !strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".tmp") || !de.Type().IsRegular() {
			continue
		}
		if len(n) < 66 || !entryName.MatchString(strings.SplitN(n[1:], ".", 3)[0]+".blob") {
			continue
		}
		if fi, err := de.Info(); err == nil && c.now().Sub(fi.ModTime()) >= age {
			os.Remove(filepath.Join(c.dir, n))
		}
	}
}
