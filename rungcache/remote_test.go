package rungcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// memStore is a Store in memory, the way s3store lays a bucket out: a
// blob per writer, metadata naming it.
type memStore struct {
	mu    sync.Mutex
	metas map[Key][]byte // metadata as published (JSON)
	blobs map[string][]byte
	used  map[Key]time.Time
	fail  error // when set, every call fails with it
	calls map[string]int
	n     int
	now   func() time.Time
}

func newMemStore() *memStore {
	return &memStore{metas: map[Key][]byte{}, blobs: map[string][]byte{}, used: map[Key]time.Time{}, calls: map[string]int{}, now: time.Now}
}

func (s *memStore) call(op string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[op]++
	return s.fail
}

func (s *memStore) count(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

func (s *memStore) setFail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

func (s *memStore) String() string { return "mem://bucket" }

func (s *memStore) Stat(_ context.Context, k Key) (bool, error) {
	if err := s.call("stat"); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.metas[k]
	return ok, nil
}

func (s *memStore) meta(k Key) (Meta, bool, error) {
	mb, ok := s.metas[k]
	if !ok {
		return Meta{}, false, nil
	}
	m, err := ParseMeta(mb)
	if err != nil {
		return Meta{}, true, fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	return m, true, nil
}

func (s *memStore) Fetch(_ context.Context, k Key, w io.Writer) (Meta, bool, error) {
	if err := s.call("fetch"); err != nil {
		return Meta{}, false, err
	}
	s.mu.Lock()
	m, ok, err := s.meta(k)
	b, there := s.blobs[m.Object]
	s.mu.Unlock()
	switch {
	case err != nil || !ok:
		return m, ok, err
	case !there:
		return m, true, fmt.Errorf("%w: its blob %s is gone", ErrDamaged, m.Object)
	}
	_, err = w.Write(b)
	return m, true, err
}

func (s *memStore) Publish(_ context.Context, k Key, m Meta, r io.ReaderAt, size int64) error {
	if err := s.call("publish"); err != nil {
		return err
	}
	b := make([]byte, size)
	if _, err := r.ReadAt(b, 0); err != nil && err != io.EOF {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	m.Object = fmt.Sprintf("%s.%016x.blob", k, s.n)
	s.blobs[m.Object] = b
	mb, err := m.marshal()
	if err != nil {
		return err
	}
	s.metas[k] = mb
	return nil
}

func (s *memStore) Touch(_ context.Context, k Key) error {
	if err := s.call("touch"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used[k] = s.now()
	return nil
}

func (s *memStore) Remove(_ context.Context, k Key, object string) error {
	if err := s.call("remove"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok, err := s.meta(k)
	if ok && (object == "" || err != nil || m.Object == object) {
		delete(s.metas, k)
		delete(s.used, k)
		delete(s.blobs, m.Object)
	}
	delete(s.blobs, object)
	return nil
}

func (s *memStore) List(context.Context) ([]Entry, error) {
	if err := s.call("list"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var es []Entry
	for k := range s.metas {
		m, _, err := s.meta(k)
		if err != nil {
			m = Meta{Key: k.String()}
		}
		es = append(es, Entry{Meta: m, LastUsed: s.used[k], Bytes: int64(len(s.blobs[m.Object]))})
	}
	return es, nil
}

func (s *memStore) Sweep(context.Context, time.Duration) error { return s.call("sweep") }

// blobOf is the blob k's metadata names.
func (s *memStore) blobOf(t *testing.T, k Key) (Meta, []byte) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok, err := s.meta(k)
	if !ok || err != nil {
		t.Fatalf("the store has no entry %s (%v)", k.Short(), err)
	}
	return m, s.blobs[m.Object]
}

// tiered is a Cache with a folder of its own in front of s.
func tiered(t *testing.T, s Store) *Cache {
	t.Helper()
	f, err := OpenFolder(filepath.Join(t.TempDir(), "local"), 0)
	if err != nil {
		t.Fatal(err)
	}
	return &Cache{local: f, remote: NewRemote(s)}
}

func putIn(t *testing.T, c *Cache, k Key, b []byte) []string {
	t.Helper()
	notes, err := c.Put(k, Meta{Capacity: 64, Chunk: 1, Kind: "decode", Device: "CPU"}, func(p string) error { return os.WriteFile(p, b, 0o644) })
	if err != nil {
		t.Fatal(err)
	}
	return notes
}

// A graph one process stores is published; another process, with its own
// local folder, fetches it once, checked, and then reads it locally. The
// store is a bucket (in memory) or a shared folder.
func TestStoreReadThrough(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) (Store, func(op string) int)
	}{
		{"bucket", func(*testing.T) (Store, func(string) int) { s := newMemStore(); return s, s.count }},
		{"folder", func(t *testing.T) (Store, func(string) int) {
			f, err := OpenFolder(filepath.Join(t.TempDir(), "shared"), 0)
			if err != nil {
				t.Fatal(err)
			}
			c := &countingStore{Store: f.AsStore(), calls: map[string]int{}}
			return c, c.count
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, count := tc.store(t)
			a, b := tiered(t, s), tiered(t, s)
			k := key(64)
			if notes := putIn(t, a, k, []byte("compiled on a")); len(notes) != 0 {
				t.Fatalf("put notes: %q", notes)
			}
			if count("publish") != 1 {
				t.Fatalf("%d publishes, want 1", count("publish"))
			}
			if !b.Has(k) || b.local.Has(k) {
				t.Fatalf("b.Has %v (want true: in the store), b's folder has it %v (want false)", b.Has(k), b.local.Has(k))
			}
			for i := range 2 {
				blob, m, ok, note := b.Get(k)
				if !ok || note != "" || string(blob.Bytes()) != "compiled on a" || m.Capacity != 64 {
					t.Fatalf("get %d: ok %v, note %q, meta %+v", i, ok, note, m)
				}
				blob.Close()
			}
			if got := count("fetch"); got != 1 {
				t.Errorf("%d fetches for two gets, want 1 (the second reads the local folder)", got)
			}
			if !b.local.Has(k) {
				t.Error("the fetched entry is not in b's folder")
			}
			ses, _ := s.List(context.Background())
			bes, _ := b.List()
			if len(ses) != 1 || len(bes) != 1 || !bes[0].Created.Equal(ses[0].Created) || bes[0].Object != "" {
				t.Errorf("b's folder lists %+v, want the published entry %+v without its object name", bes, ses)
			}
		})
	}
}

// countingStore counts a Store's calls.
type countingStore struct {
	Store
	mu    sync.Mutex
	calls map[string]int
}

func (s *countingStore) count(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

func (s *countingStore) add(op string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[op]++
}

func (s *countingStore) Fetch(ctx context.Context, k Key, w io.Writer) (Meta, bool, error) {
	s.add("fetch")
	return s.Store.Fetch(ctx, k, w)
}

func (s *countingStore) Publish(ctx context.Context, k Key, m Meta, r io.ReaderAt, size int64) error {
	s.add("publish")
	return s.Store.Publish(ctx, k, m, r, size)
}

// A shared folder's damaged entry is discarded there with a note.
func TestFolderStoreDamage(t *testing.T) {
	shared, err := OpenFolder(filepath.Join(t.TempDir(), "shared"), 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b := tiered(t, shared.AsStore()), tiered(t, shared.AsStore())
	k := key(64)
	putIn(t, a, k, bytes.Repeat([]byte("x"), 1000))
	raw, _ := os.ReadFile(shared.blobPath(k))
	raw[10] ^= 1
	os.WriteFile(shared.blobPath(k), raw, 0o644)
	if _, _, ok, note := b.Get(k); ok || !strings.Contains(note, "discarded entry "+k.Short()+" in "+shared.Dir()+": damaged entry: the CRC-32C") {
		t.Fatalf("ok %v, note %q", ok, note)
	}
	if shared.Has(k) {
		t.Error("the damaged entry is still in the shared folder")
	}
}

// An entry damaged in the store is discarded there with a note, and the
// graph is a miss (compiled again); nothing damaged reaches the folder.
func TestDamagedStoreEntriesAreDiscarded(t *testing.T) {
	blob := bytes.Repeat([]byte("0123456789"), 1000)
	for _, tc := range []struct {
		name, want string
		damage     func(s *memStore, k Key)
	}{
		{"flipped byte", "CRC-32C", func(s *memStore, k Key) {
			m, _, _ := s.meta(k)
			s.blobs[m.Object][5000] ^= 0x08
		}},
		{"truncated blob", "truncated", func(s *memStore, k Key) {
			m, _, _ := s.meta(k)
			s.blobs[m.Object] = s.blobs[m.Object][:4000]
		}},
		{"blob gone", "is gone", func(s *memStore, k Key) {
			m, _, _ := s.meta(k)
			delete(s.blobs, m.Object)
		}},
		{"garbage metadata", "not valid JSON", func(s *memStore, k Key) { s.metas[k] = []byte("{\x00") }},
		{"metadata of another key", "metadata is for key", func(s *memStore, k Key) {
			s.metas[k] = bytes.Replace(s.metas[k], []byte(`"key": "`+k.String()), []byte(`"key": "`+key(1).String()), 1)
		}},
		{"blob of another key", "is entry " + key(1).Short() + "'s", func(s *memStore, k Key) {
			m, _, _ := s.meta(k)
			b := s.blobs[m.Object]
			copy(b[len(b)-trailerLen:], trailer(key(1)))
			// The CRCs match the swapped blob: only the trailer tells.
			_, sums, _ := sumBytes(b)
			m.CRC32C = sums
			s.metas[k], _ = m.marshal()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newMemStore()
			a, b := tiered(t, s), tiered(t, s)
			k := key(64)
			putIn(t, a, k, blob)
			s.mu.Lock()
			tc.damage(s, k)
			s.mu.Unlock()
			_, _, ok, note := b.Get(k)
			if ok || !strings.Contains(note, "rung cache: discarded entry "+k.Short()+" in mem://bucket") || !strings.Contains(note, tc.want) || !strings.Contains(note, "compiling it again") {
				t.Fatalf("ok %v, note %q; want a miss whose note names %q", ok, note, tc.want)
			}
			if ok, _ := s.Stat(context.Background(), k); ok {
				t.Error("the damaged entry is still in the store")
			}
			if b.local.Has(k) {
				t.Error("the damaged entry reached the local folder")
			}
			if es, _ := os.ReadDir(b.local.Dir()); len(es) > 1 { // the lock file
				t.Errorf("left in the local folder: %v", es)
			}
			putIn(t, b, k, blob) // compiled again
			if _, got := s.blobOf(t, k); !bytes.Equal(got[:len(blob)], blob) {
				t.Error("the entry compiled again was not published")
			}
		})
	}
}

// A store that cannot be reached costs one note (and one on the process's
// notice function) and the cache goes on with its folder; a minute later it
// is tried again, and an entry stored meanwhile is published when it is
// next used.
func TestUnreachableStore(t *testing.T) {
	var heard []string
	SetNotice(func(msg string) { heard = append(heard, msg) })
	defer SetNotice(nil)
	s := newMemStore()
	c := tiered(t, s)
	now := time.Now()
	c.remote.now = func() time.Time { return now }
	s.setFail(errors.New("dial tcp 127.0.0.1:9: connect: connection refused"))

	k1, k2 := key(64), key(128)
	notes := putIn(t, c, k1, []byte("one"))
	if len(notes) != 1 || !strings.Contains(notes[0], "mem://bucket cannot be reached (publish: dial tcp") || !strings.Contains(notes[0], "going on with the local tier only") {
		t.Fatalf("first put: notes %q, want one saying the store cannot be reached", notes)
	}
	calls := s.count("publish") + s.count("fetch") + s.count("stat")
	// Later calls within the minute do not try the store, and say nothing more.
	if notes := putIn(t, c, k2, []byte("two")); len(notes) != 0 {
		t.Errorf("second put: notes %q, want none", notes)
	}
	if c.Has(key(256)) {
		t.Error("Has of an absent key is true")
	}
	for _, k := range []Key{k1, k2} {
		blob, _, ok, note := c.Get(k)
		if !ok || note != "" {
			t.Fatalf("get %s from the folder: ok %v, note %q", k.Short(), ok, note)
		}
		blob.Close()
	}
	if _, _, ok, note := c.Get(key(512)); ok || note != "" {
		t.Errorf("a miss: ok %v, note %q", ok, note)
	}
	if got := s.count("publish") + s.count("fetch") + s.count("stat"); got != calls {
		t.Errorf("the store was called %d more times while out", got-calls)
	}
	if len(heard) != 1 {
		t.Errorf("the notice function heard %q, want one line", heard)
	}

	// A minute later the store answers again: the next use of k1 publishes it.
	s.setFail(nil)
	now = now.Add(retryAfter)
	blob, _, ok, note := c.Get(k1)
	if !ok || note != "rung cache: mem://bucket answers again" {
		t.Fatalf("get after a minute: ok %v, note %q", ok, note)
	}
	blob.Close()
	if _, b := s.blobOf(t, k1); !bytes.HasPrefix(b, []byte("one")) {
		t.Errorf("k1 was not published when next used: %q", b)
	}
	if len(heard) != 2 {
		t.Errorf("the notice function heard %q, want two lines", heard)
	}
}

// A store that cannot be opened is a note on the first Get or Put; the
// cache goes on with its folder. A URL of no store is an error.
func TestStoreURLs(t *testing.T) {
	RegisterStore("fail", func(string) error { return nil }, func(context.Context, string) (Store, error) {
		return nil, errors.New("fail://x: no credentials")
	})
	t.Setenv(LocalDirEnv, filepath.Join(t.TempDir(), "local"))
	c, err := Open("fail://x", 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Dir() != os.Getenv(LocalDirEnv) {
		t.Errorf("local tier %s, want $%s", c.Dir(), LocalDirEnv)
	}
	notes := putIn(t, c, key(64), []byte("x"))
	if len(notes) != 1 || !strings.Contains(notes[0], "no credentials; going on with the local tier "+c.Dir()+" only") {
		t.Errorf("notes %q", notes)
	}
	t.Chdir(t.TempDir()) // "s3:/bucket" is a local folder: made here, not in the source tree
	for _, where := range []string{"nope://bucket", "s3:/bucket"} {
		if _, err := Open(where, 0); where == "nope://bucket" && !errors.Is(err, ErrStoreURL) {
			t.Errorf("Open(%q): %v, want ErrStoreURL", where, err)
		}
	}
	for where, want := range map[string]bool{"s3://b/p": true, "/tmp/rungs": false, "rungs": false, "./s3:x": false, "S3://b": false} {
		if IsStoreURL(where) != want {
			t.Errorf("IsStoreURL(%q) = %v", where, !want)
		}
	}
	t.Setenv(LocalDirEnv, "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if d, err := LocalDir(); err != nil || d != "/xdg/ovrun/rungs" {
		t.Errorf("LocalDir() = %q, %v; want /xdg/ovrun/rungs", d, err)
	}
}

// Prune and Clear on a store: least recently used first, by the store's
// last-use times.
func TestRemotePrune(t *testing.T) {
	s := newMemStore()
	c := tiered(t, s)
	t0 := time.Now()
	for i, capacity := range []int{64, 128, 256} {
		s.now = func() time.Time { return t0.Add(time.Duration(i) * time.Hour) }
		putIn(t, c, key(capacity), bytes.Repeat([]byte{'x'}, 1000))
		s.Touch(context.Background(), key(capacity))
	}
	r := c.remote
	r.now = func() time.Time { return t0.Add(150 * time.Minute) }
	es, err := r.List(context.Background())
	if err != nil || len(es) != 3 || es[0].Key != key(256).String() || es[2].Key != key(64).String() {
		t.Fatalf("List: %+v, %v; want 256, 128, 64", es, err)
	}
	gone, err := r.Prune(context.Background(), -1, 2*time.Hour)
	if err != nil || len(gone) != 1 || gone[0].Key != key(64).String() {
		t.Fatalf("Prune --older-than 2h removed %+v, %v; want 64", gone, err)
	}
	gone, err = r.Prune(context.Background(), es[0].Bytes, 0)
	if err != nil || len(gone) != 1 || gone[0].Key != key(128).String() {
		t.Fatalf("Prune --max-size of one entry removed %+v, %v; want 128", gone, err)
	}
	gone, err = r.Clear(context.Background())
	if err != nil || len(gone) != 1 || gone[0].Key != key(256).String() || s.count("sweep") != 3 {
		t.Fatalf("Clear removed %+v, %v (%d sweeps)", gone, err, s.count("sweep"))
	}
	if es, _ := r.List(context.Background()); len(es) != 0 {
		t.Errorf("after Clear: %+v", es)
	}
}

// The key of a CPU graph is what it was before the key had a driver part
// (no entry of a CPU cache goes stale), and a driver changes the key.
func TestKeyWithoutDriverIsUnchanged(t *testing.T) {
	p := Parts{OpenVINO: "2026.3.0-1234", Device: "CPU", Precision: "bf16", Properties: []string{"NUM_STREAMS=1"}, WeightsSHA: "ab", IRSHA: "cd",
		Kind: "decode", Capacity: 128, Chunk: 1, Attention: "paged", KVPrecision: "bf16"}
	// KeyOf(p) before Parts had Driver (commit 74dde09).
	const before = "6a15e2f0ebded761bc0ee39c938476e33f34c26eb871cd66b3704af3a501d1aa"
	if got := KeyOf(p).String(); got != before {
		t.Errorf("a CPU key is %s, was %s", got, before)
	}
	npu := p
	npu.Device = "NPU"
	a := KeyOf(npu)
	npu.Driver = "NPU_DRIVER_VERSION=1688,NPU_COMPILER_VERSION=458752"
	b := KeyOf(npu)
	npu.Driver = "NPU_DRIVER_VERSION=1712,NPU_COMPILER_VERSION=458752"
	if c := KeyOf(npu); a == b || b == c {
		t.Error("the driver does not change the key")
	}
}

// pickLRU, at its edges.
func TestPickLRU(t *testing.T) {
	t0 := time.Now()
	es := []Entry{
		{Meta: Meta{Key: "a"}, LastUsed: t0.Add(-3 * time.Hour), Bytes: 10},
		{Meta: Meta{Key: "b"}, LastUsed: t0.Add(-2 * time.Hour), Bytes: 10},
		{Meta: Meta{Key: "c"}, LastUsed: t0.Add(-1 * time.Hour), Bytes: 10},
	}
	keys := func(es []Entry) []string {
		var ks []string
		for _, e := range es {
			ks = append(ks, e.Key)
		}
		return ks
	}
	for _, tc := range []struct {
		name      string
		maxBytes  int64
		olderThan time.Duration
		want      []string
	}{
		{"no limit", -1, 0, nil},
		{"all fit", 30, 0, nil},
		{"one over", 29, 0, []string{"a"}},
		{"two over", 10, 0, []string{"a", "b"}},
		{"zero", 0, 0, []string{"a", "b", "c"}},
		{"age", -1, 150 * time.Minute, []string{"a"}},
		{"age exactly", -1, 2 * time.Hour, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := keys(pickLRU(es, tc.maxBytes, tc.olderThan, t0)); !slices.Equal(got, tc.want) {
				t.Errorf("pickLRU = %v, want %v", got, tc.want)
			}
		})
	}
}
