package rungcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"sync"
	"time"
)

// Store is a place entries are shared between processes and machines,
// behind a Cache's local folder: a bucket in object storage (package
// s3store). Any number of processes may read and write one store at once;
// a reader must never see a blob that is not whole, so a store publishes
// an entry's metadata only after its blob. The Cache checks everything a
// store returns (metadata format and key, blob size, CRC-32Cs, key
// trailer) before it installs it, so a store only moves bytes.
type Store interface {
	// Stat reports whether k has an entry (its metadata exists).
	Stat(ctx context.Context, k Key) (bool, error)
	// Fetch writes the blob of k's entry to w and returns the metadata
	// that describes it; ok is false when there is no entry. An entry
	// whose metadata cannot be read or whose blob is gone is an error
	// that wraps ErrDamaged, with the metadata where it was read.
	Fetch(ctx context.Context, k Key, w io.Writer) (m Meta, ok bool, err error)
	// Publish stores size bytes read from r as k's blob with metadata m
	// (its size and CRC-32Cs filled), so that a reader sees the whole new
	// entry, or the old one, or none.
	Publish(ctx context.Context, k Key, m Meta, r io.ReaderAt, size int64) error
	// Touch marks k's entry used now.
	Touch(ctx context.Context, k Key) error
	// Remove removes k's entry whose blob is object (Meta.Object of a
	// Fetch or List); an entry another writer published since stays, and
	// only the blob object goes. An empty object removes k's entry
	// whatever its metadata names.
	Remove(ctx context.Context, k Key, object string) error
	// List lists the entries, LastUsed and Bytes filled, in any order. An
	// entry whose metadata cannot be read is listed with its key only.
	List(ctx context.Context) ([]Entry, error)
	// Sweep removes what writers left behind, older than age: blobs no
	// metadata names (a writer that died, or lost a race to publish).
	Sweep(ctx context.Context, age time.Duration) error
	// String is the store's URL.
	String() string
}

// ErrDamaged is wrapped by a Store's errors about an entry that is there
// but cannot be read whole: the Cache discards it and compiles again.
var ErrDamaged = errors.New("damaged entry")

// ErrStoreURL is wrapped by the errors about a store URL that is not
// well formed, or of a scheme no store registered.
var ErrStoreURL = errors.New("not a rung cache store URL")

// StaleAge is how old a leftover of a writer (a temporary file, a blob
// object no metadata names) must be before it is removed: a writer still
// uploading is left alone.
const StaleAge = staleTemp

// storeScheme is what a store package registers for its URL scheme.
type storeScheme struct {
	check func(url string) error
	open  func(ctx context.Context, url string) (Store, error)
}

var (
	schemesMu sync.Mutex
	schemes   = map[string]storeScheme{}
)

// RegisterStore makes URLs scheme://... name stores: check tells whether a
// URL is well formed (without any I/O), open opens the store. A store
// package registers its scheme in its init (s3store: "s3").
func RegisterStore(scheme string, check func(url string) error, open func(ctx context.Context, url string) (Store, error)) {
	schemesMu.Lock()
	defer schemesMu.Unlock()
	schemes[scheme] = storeScheme{check: check, open: open}
}

var storeURL = regexp.MustCompile(`^([a-z][a-z0-9+.-]*)://`)

// IsStoreURL reports whether where is a store URL (scheme://...), not a
// folder.
func IsStoreURL(where string) bool { return storeURL.MatchString(where) }

func schemeOf(where string) (storeScheme, error) {
	m := storeURL.FindStringSubmatch(where)
	if m == nil {
		return storeScheme{}, fmt.Errorf("%w: %q", ErrStoreURL, where)
	}
	schemesMu.Lock()
	s, ok := schemes[m[1]]
	schemesMu.Unlock()
	if !ok {
		return storeScheme{}, fmt.Errorf("%w: %q: no store for %s:// (s3://bucket/prefix is one)", ErrStoreURL, where, m[1])
	}
	return s, nil
}

// CheckStoreURL checks the form of a store URL, without any I/O.
func CheckStoreURL(where string) error {
	s, err := schemeOf(where)
	if err != nil {
		return err
	}
	return s.check(where)
}

// openTimeout bounds opening a store (reading its configuration).
const openTimeout = 30 * time.Second

// OpenRemote opens the store at the URL where (see Remote).
func OpenRemote(where string) (*Remote, error) {
	s, err := schemeOf(where)
	if err != nil {
		return nil, err
	}
	if err := s.check(where); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	st, err := s.open(ctx, where)
	if err != nil {
		return nil, err
	}
	return NewRemote(st), nil
}

// pickLRU chooses the entries a prune removes from es: least recently
// used first, until the rest take at most maxBytes (no size limit when
// maxBytes < 0), and every entry not used for olderThan (none when 0).
func pickLRU(es []Entry, maxBytes int64, olderThan time.Duration, now time.Time) []Entry {
	es = append([]Entry(nil), es...)
	sortByUse(es)
	var total int64
	for _, e := range es {
		total += e.Bytes
	}
	var gone []Entry
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		old := olderThan > 0 && now.Sub(e.LastUsed) > olderThan
		over := maxBytes >= 0 && total > maxBytes
		if !old && !over {
			continue
		}
		total -= e.Bytes
		gone = append(gone, e)
	}
	return gone
}

// sortByUse sorts entries most recently used first (then by key).
func sortByUse(es []Entry) {
	sort.Slice(es, func(i, j int) bool {
		if !es[i].LastUsed.Equal(es[j].LastUsed) {
			return es[i].LastUsed.After(es[j].LastUsed)
		}
		return es[i].Key < es[j].Key
	})
}
