package rungcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
)

// Remote is a Store as a Cache uses it. Every call is bounded in time (a
// small request by callTimeout, a transfer by stallTimeout without a byte
// moving). A call that fails takes the store out for retryAfter, with one
// note, and the cache goes on with its folder; the first call after that
// tries again, and a store that answers again is one more note. Nothing a
// store does fails a run.
type Remote struct {
	store Store
	now   func() time.Time
	retry time.Duration
	stall time.Duration

	mu       sync.Mutex
	down     bool
	downTill time.Time
	pending  []string          // state notes for the next Get or Put
	touched  map[Key]time.Time // when this process last marked an entry used in the store
}

const (
	callTimeout  = 15 * time.Second // a small request: metadata, touch, delete
	stallTimeout = 30 * time.Second // a transfer that moves no byte for this long is given up
	retryAfter   = time.Minute      // a store that failed is left alone this long
	touchEvery   = time.Hour        // an entry is marked used in the store at most this often by one process
)

// NewRemote wraps s.
func NewRemote(s Store) *Remote {
	return &Remote{store: s, now: time.Now, retry: retryAfter, stall: stallTimeout, touched: map[Key]time.Time{}}
}

// String is the store's URL.
func (r *Remote) String() string { return r.store.String() }

// List returns the store's entries, most recently used first.
func (r *Remote) List(ctx context.Context) ([]Entry, error) {
	es, err := r.store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("rung cache %s: %w", r, err)
	}
	sortByUse(es)
	return es, nil
}

// Prune removes entries, least recently used first, until the rest take at
// most maxBytes (no size limit when maxBytes < 0), and every entry not used
// for olderThan (none when 0), then what writers left behind more than
// StaleAge ago. It returns what it removed.
func (r *Remote) Prune(ctx context.Context, maxBytes int64, olderThan time.Duration) ([]Entry, error) {
	gone, err := r.prune(ctx, maxBytes, olderThan)
	if err != nil {
		return gone, err
	}
	if err := r.store.Sweep(ctx, StaleAge); err != nil {
		return gone, fmt.Errorf("rung cache %s: %w", r, err)
	}
	return gone, nil
}

// Clear removes every entry, and every leftover of a writer whatever its
// age (a writer uploading now loses its upload: its entry is a miss).
func (r *Remote) Clear(ctx context.Context) ([]Entry, error) {
	gone, err := r.prune(ctx, 0, 0)
	if err != nil {
		return gone, err
	}
	if err := r.store.Sweep(ctx, 0); err != nil {
		return gone, fmt.Errorf("rung cache %s: %w", r, err)
	}
	return gone, nil
}

func (r *Remote) prune(ctx context.Context, maxBytes int64, olderThan time.Duration) ([]Entry, error) {
	es, err := r.store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("rung cache %s: %w", r, err)
	}
	var done []Entry
	for _, e := range pickLRU(es, maxBytes, olderThan, r.now()) {
		k, err := ParseKey(e.Key)
		if err != nil {
			continue
		}
		if err := r.store.Remove(ctx, k, e.Object); err != nil {
			return done, fmt.Errorf("rung cache %s: remove entry %s: %w", r, k.Short(), err)
		}
		done = append(done, e)
	}
	return done, nil
}

// SetNotice sets where notes about a store (it cannot be reached, it
// answers again) go the moment they happen, besides the notes of the next
// Get or Put of the cache: a command prints them on stderr, as one line
// each. Set it before opening caches.
func SetNotice(f func(msg string)) {
	noticeMu.Lock()
	defer noticeMu.Unlock()
	noticeFn = f
}

var (
	noticeMu sync.Mutex
	noticeFn func(string)
)

// notice hands msg to the process's notice function and returns it.
func notice(msg string) string {
	noticeMu.Lock()
	f := noticeFn
	noticeMu.Unlock()
	if f != nil {
		f(msg)
	}
	return msg
}

// usable reports whether the store is to be called now: it is up, or it
// was taken out long enough ago to try again.
func (r *Remote) usable() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.down || !r.now().Before(r.downTill)
}

// failed takes the store out after op failed with err; the first failure
// after it was up is a note.
func (r *Remote) failed(op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	was := r.down
	r.down, r.downTill = true, r.now().Add(r.retry)
	if !was {
		r.pending = append(r.pending, notice(fmt.Sprintf("rung cache: %s cannot be reached (%s: %v); going on with the local tier only, trying it again in %s", r.store, op, oneLine(err), r.retry)))
	}
}

// answered records a call that worked; a store that was out is a note.
func (r *Remote) answered() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		r.down = false
		r.pending = append(r.pending, notice(fmt.Sprintf("rung cache: %s answers again", r.store)))
	}
}

func (r *Remote) takePending() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending
	r.pending = nil
	return p
}

// has reports whether the store has k's entry; false when it cannot tell.
func (r *Remote) has(k Key) bool {
	if !r.usable() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	ok, err := r.store.Stat(ctx, k)
	if err != nil {
		r.failed("stat", err)
		return false
	}
	r.answered()
	return ok
}

// fetch fetches k's entry into the folder local: the blob goes to a
// temporary file there, is checked against the metadata (size, CRC-32Cs,
// key trailer) and installed. A damaged entry is removed from the store
// with a note. fetched is false on a miss.
func (r *Remote) fetch(k Key, local *Folder) (fetched bool, notes []string) {
	if !r.usable() {
		return false, nil
	}
	tmp, err := local.tempFile(k.String() + ".blob")
	if err != nil {
		return false, []string{fmt.Sprintf("rung cache: fetch entry %s from %s: %v", k.Short(), r, err)}
	}
	defer os.Remove(tmp) // a no-op once installed
	f, err := os.OpenFile(tmp, os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false, []string{fmt.Sprintf("rung cache: fetch entry %s from %s: %v", k.Short(), r, err)}
	}
	ctx, tick, stop := stallContext(r.stall)
	m, ok, err := r.store.Fetch(ctx, k, tickWriter{f, tick})
	stop()
	cerr := f.Close()
	switch {
	case errors.Is(err, ErrDamaged):
		r.answered()
		return false, []string{r.discardDamaged(k, m.Object, err)}
	case err != nil:
		r.failed("fetch", err)
		return false, nil
	case !ok:
		r.answered()
		return false, nil
	case cerr != nil:
		return false, []string{fmt.Sprintf("rung cache: fetch entry %s from %s: %v", k.Short(), r, cerr)}
	}
	r.answered()
	if err := verifyFile(tmp, k, m); err != nil {
		return false, []string{r.discardDamaged(k, m.Object, err)}
	}
	notes, err = local.adopt(k, m, tmp)
	if err != nil {
		return false, append(notes, fmt.Sprintf("rung cache: entry %s from %s not stored in the local tier: %v", k.Short(), r, err))
	}
	r.touch(k, nil)
	return true, notes
}

// discardDamaged removes k's damaged entry (blob object) from the store
// and says so.
func (r *Remote) discardDamaged(k Key, object string, why error) string {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := r.store.Remove(ctx, k, object); err != nil {
		r.failed("remove", err)
	}
	return fmt.Sprintf("rung cache: discarded entry %s in %s: %v; compiling it again", k.Short(), r, oneLine(why))
}

// publish uploads k's entry, its blob read from f, to the store.
func (r *Remote) publish(k Key, m Meta, f io.ReaderAt) {
	if !r.usable() {
		return
	}
	ctx, tick, stop := stallContext(r.stall)
	err := r.store.Publish(ctx, k, m, tickReaderAt{f, tick}, m.Size)
	stop()
	if err != nil {
		r.failed("publish", err)
		return
	}
	r.answered()
	r.mu.Lock()
	r.touched[k] = r.now()
	r.mu.Unlock()
}

// touch marks k's entry used in the store, at most once per touchEvery in
// this process. With the entry's blob (a hit in the local tier), an entry
// the store lacks (compiled while it could not be reached, or removed
// since) is published again.
func (r *Remote) touch(k Key, local *localHit) {
	r.mu.Lock()
	t, ok := r.touched[k]
	r.mu.Unlock()
	if ok && r.now().Sub(t) < touchEvery || !r.usable() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if local != nil {
		ok, err := r.store.Stat(ctx, k)
		if err != nil {
			r.failed("stat", err)
			return
		}
		if !ok {
			r.publish(k, local.m, bytes.NewReader(local.b.mapped))
			return
		}
	}
	if err := r.store.Touch(ctx, k); err != nil {
		r.failed("touch", err)
		return
	}
	r.answered()
	r.mu.Lock()
	r.touched[k] = r.now()
	r.mu.Unlock()
}

// localHit is an entry read from the local tier.
type localHit struct {
	b *Blob
	m Meta
}

// discard removes k's entry from the store (OpenVINO refused its blob).
func (r *Remote) discard(k Key) {
	if !r.usable() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := r.store.Remove(ctx, k, ""); err != nil {
		r.failed("remove", err)
		return
	}
	r.answered()
}

// verifyFile checks the blob file at path against k's metadata m: its
// size, the CRC-32C of each piece, and the trailer naming k.
func verifyFile(path string, k Key, m Meta) error {
	switch {
	case m.Format != FormatVersion:
		return fmt.Errorf("metadata format %d, this ovrun reads %d", m.Format, FormatVersion)
	case m.Key != k.String():
		return fmt.Errorf("metadata is for key %s", shortHex(m.Key))
	}
	size, sums, err := syncAndSum(path)
	if err != nil {
		return err
	}
	if size != m.Size {
		return fmt.Errorf("blob is %d bytes, its metadata says %d (truncated or replaced)", size, m.Size)
	}
	if len(sums) != len(m.CRC32C) {
		return fmt.Errorf("the blob has %d pieces, its metadata %d CRC-32Cs (corrupt)", len(sums), len(m.CRC32C))
	}
	for i := range sums {
		if sums[i] != m.CRC32C[i] {
			return fmt.Errorf("the CRC-32C of the blob's piece %d (bytes from %d) does not match its metadata (corrupt)", i, int64(i)*pieceBytes)
		}
	}
	if size <= int64(trailerLen) {
		return fmt.Errorf("the blob file is %d bytes, too short to hold a blob and its key (not written by this ovrun)", size)
	}
	f, _, err := openRegular(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tail := make([]byte, trailerLen+1)
	if _, err := f.ReadAt(tail, size-int64(len(tail))); err != nil {
		return err
	}
	_, err = checkTrailer(tail, k)
	return err
}

// stallContext is a context that ends when tick has not been called for
// d; stop releases it.
func stallContext(d time.Duration) (ctx context.Context, tick func(), stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	t := time.AfterFunc(d, func() { cancel(fmt.Errorf("no byte moved for %s", d)) })
	return ctx, func() { t.Reset(d) }, func() { t.Stop(); cancel(nil) }
}

type tickWriter struct {
	w    io.Writer
	tick func()
}

func (w tickWriter) Write(p []byte) (int, error) { w.tick(); return w.w.Write(p) }

type tickReaderAt struct {
	r    io.ReaderAt
	tick func()
}

func (r tickReaderAt) ReadAt(p []byte, off int64) (int, error) { r.tick(); return r.r.ReadAt(p, off) }

// oneLine keeps an error's message on one line.
func oneLine(err error) string {
	b := []byte(err.Error())
	for i, c := range b {
		if c == '\n' || c == '\r' {
			b[i] = ' '
		}
	}
	return string(b)
}
