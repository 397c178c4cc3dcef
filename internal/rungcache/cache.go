// Package rungcache is the compiled-rung cache: a folder of compiled graph
// blobs, each named by the key of everything that changes the compiled
// result (see Parts), with a metadata file that carries the blob's size and
// CRC-32Cs. Get verifies the blob before handing it out and marks it used;
// Put writes it atomically and evicts the least recently used entries past
// the size cap. A corrupt, truncated or foreign entry is discarded with a
// note, never a crash. Several processes may share one folder: every read
// and write of an entry happens under an exclusive lock on the folder's lock
// file (a listing under a shared one), and files appear only by rename. A
// lock held too long is waited for with a message and a limit, then the
// Cache goes on without the folder (lock.go). Each blob file ends with its
// key, so a blob in another entry's place is discarded too. Only files
// named like entries (64 hex digits, .blob or .json) are ever read or
// removed.
//
// The blob's check is a CRC-32C per 16 MiB piece, the pieces checked on
// every core (hardware CRC, ~5 GB/s a core here: the check costs
// a few percent of an import, where a SHA-256 cost a tenth of it); it guards
// against damage, not against an attacker who can write the folder, who
// could as well write a valid entry.
//
// OpenVINO's own CACHE_DIR is not used: it imports a blob with flipped
// bytes without complaint (TestOpenVINOCacheDirTakesAFlippedBlob in
// runtime/ovexec), and it has no size cap.
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

// Cache is one cache folder with a size cap.
type Cache struct {
	dir string
	max int64
	now func() time.Time

	mu      sync.Mutex
	wait    LockWait // how to wait for the folder's lock (lock.go)
	off     error    // set once c goes on without the folder (ErrLockWait)
	offSaid bool     // a Get's note has said so
}

// Open uses dir as a cache folder (creating it) with a cap of maxBytes
// (DefaultMaxBytes when 0 or less).
func Open(dir string, maxBytes int64) (*Cache, error) {
	if dir == "" {
		return nil, errors.New("rung cache: empty folder name")
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if err := safefile.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("rung cache: %w", err)
	}
	return &Cache{dir: dir, max: maxBytes, now: time.Now, wait: defaultLockWait()}, nil
}

// OpenRead uses the existing folder dir as a cache to read (List, Get)
// without the right to write it: a read-only folder lists, and its entries
// import (though a damaged one cannot be removed).
func OpenRead(dir string) (*Cache, error) {
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return nil, fmt.Errorf("rung cache: %w", err)
	case !fi.IsDir():
		return nil, fmt.Errorf("rung cache %s is %s, not a folder", dir, safefile.Kind(fi.Mode()))
	}
	return &Cache{dir: dir, max: DefaultMaxBytes, now: time.Now, wait: defaultLockWait()}, nil
}

// Dir is the cache folder.
func (c *Cache) Dir() string { return c.dir }

// MaxBytes is the size cap.
func (c *Cache) MaxBytes() int64 { return c.max }

func (c *Cache) blobPath(k Key) string { return filepath.Join(c.dir, k.String()+".blob") }
func (c *Cache) metaPath(k Key) string { return filepath.Join(c.dir, k.String()+".json") }

// Has reports whether an entry for k is present (without verifying it).
func (c *Cache) Has(k Key) bool {
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
func (c *Cache) Get(k Key) (blob *Blob, m Meta, ok bool, note string) {
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
func (c *Cache) read(k Key) (*Blob, Meta, error) {
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
	return blob, m, nil
}

// Discard removes k's entry (a blob OpenVINO refused to import).
func (c *Cache) Discard(k Key) error {
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
func (c *Cache) remove(k Key) {
	os.Remove(c.metaPath(k))
	os.Remove(c.blobPath(k))
}

// Put stores an entry for k: write writes the blob to the path it is given
// (a fresh temporary file in the folder, as OpenVINO's export wants a path),
// then the blob is hashed, synced and renamed into place and its metadata
// written after it. Entries past the size cap are then evicted, least
// recently used first. The notes say what was evicted.
func (c *Cache) Put(k Key, m Meta, write func(path string) error) (notes []string, err error) {
	if err := c.offErr(); err != nil {
		return nil, err
	}
	tmp, err := c.tempFile(k.String() + ".blob")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp) // a no-op once renamed
	if err := write(tmp); err != nil {
		return nil, fmt.Errorf("rung cache: write entry %s: %w", k.Short(), err)
	}
	if fi, err := os.Lstat(tmp); err != nil || fi.Size() == 0 {
		return nil, fmt.Errorf("rung cache: write entry %s: the compiled blob is empty", k.Short())
	}
	if err := appendTrailer(tmp, k); err != nil {
		return nil, fmt.Errorf("rung cache: write entry %s: %w", k.Short(), err)
	}
	size, sum, err := syncAndSum(tmp)
	if err != nil {
		return nil, fmt.Errorf("rung cache: write entry %s: %w", k.Short(), err)
	}
	m.Format, m.Key, m.Size, m.CRC32C = FormatVersion, k.String(), size, sum
	if m.Created.IsZero() {
		m.Created = c.now().UTC()
	}
	mb, err := m.marshal()
	if err != nil {
		return nil, err
	}
	unlock, err := c.lock(false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	os.Remove(c.metaPath(k)) // an old entry's metadata must not describe the new blob
	if err := os.Rename(tmp, c.blobPath(k)); err != nil {
		return nil, fmt.Errorf("rung cache: write entry %s: %w", k.Short(), err)
	}
	if err := safefile.WriteFile(c.metaPath(k), mb); err != nil {
		os.Remove(c.blobPath(k))
		return nil, fmt.Errorf("rung cache: %w", err)
	}
	syncDir(c.dir)
	return c.evict(c.max, 0, k), nil
}

// tempFile creates an empty temporary file in the folder and returns its name.
func (c *Cache) tempFile(base string) (string, error) {
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
func (c *Cache) List() ([]Entry, error) {
	unlock, err := c.lock(true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return c.list()
}

// list scans the folder; c is locked.
func (c *Cache) list() ([]Entry, error) {
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
func (c *Cache) Prune(maxBytes int64, olderThan time.Duration) ([]Entry, error) {
	unlock, err := c.lock(false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return c.prune(maxBytes, olderThan, Key{})
}

// Clear removes every entry (and leftover temporary files of entries);
// other files in the folder are kept.
func (c *Cache) Clear() ([]Entry, error) {
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
func (c *Cache) evict(maxBytes int64, olderThan time.Duration, keep Key) []string {
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
func (c *Cache) prune(maxBytes int64, olderThan time.Duration, keep Key) ([]Entry, error) {
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

func (c *Cache) removeEntry(e Entry) {
	if k, err := ParseKey(e.Key); err == nil {
		c.remove(k)
	}
}

// removeTemps removes temporary files of entries older than age; c is locked.
func (c *Cache) removeTemps(age time.Duration) {
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
