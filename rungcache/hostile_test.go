package rungcache

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// swap exchanges two files' contents.
func swap(t *testing.T, a, b string) {
	t.Helper()
	x, err1 := os.ReadFile(a)
	y, err2 := os.ReadFile(b)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	os.WriteFile(a, y, 0o644)
	os.WriteFile(b, x, 0o644)
}

// TestSwappedEntries: a valid blob in another entry's place is discarded
// with a note, however its metadata was arranged to match it, and the
// entry can be written again.
func TestSwappedEntries(t *testing.T) {
	ka, kb := key(64), key(128)
	blobA, blobB := bytes.Repeat([]byte("A"), 1000), bytes.Repeat([]byte("B"), 1000) // the same size
	for _, tc := range []struct {
		name, want string
		move       func(c *Folder)
	}{
		{"blobs swapped", "CRC-32C", func(c *Folder) { swap(t, c.blobPath(ka), c.blobPath(kb)) }},
		{"entries swapped, metadata keys edited to match", "is entry " + kb.Short() + "'s, not this one's", func(c *Folder) {
			swap(t, c.blobPath(ka), c.blobPath(kb))
			swap(t, c.metaPath(ka), c.metaPath(kb))
			for _, k := range []Key{ka, kb} {
				b, _ := os.ReadFile(c.metaPath(k))
				other := map[Key]Key{ka: kb, kb: ka}[k]
				os.WriteFile(c.metaPath(k), bytes.Replace(b, []byte(other.String()), []byte(k.String()), 1), 0o644)
			}
		}},
		{"an entry copied over another, key edited", "is entry " + kb.Short() + "'s", func(c *Folder) {
			b, _ := os.ReadFile(c.blobPath(kb))
			os.WriteFile(c.blobPath(ka), b, 0o644)
			m, _ := os.ReadFile(c.metaPath(kb))
			os.WriteFile(c.metaPath(ka), bytes.Replace(m, []byte(kb.String()), []byte(ka.String()), 1), 0o644)
		}},
		{"a blob of no key", "does not end with its key", func(c *Folder) {
			b, _ := os.ReadFile(c.blobPath(ka))
			b[len(b)-5] = 'x' // inside the key
			os.WriteFile(c.blobPath(ka), b, 0o644)
			m, _ := os.ReadFile(c.metaPath(ka))
			pm, _ := ParseMeta(m)
			_, pm.CRC32C, _ = sumBytes(b)
			mb, _ := pm.marshal()
			os.WriteFile(c.metaPath(ka), mb, 0o644)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := OpenFolder(t.TempDir(), 0)
			if err != nil {
				t.Fatal(err)
			}
			putBytes(t, c, ka, blobA)
			putBytes(t, c, kb, blobB)
			tc.move(c)
			_, _, ok, note := c.Get(ka)
			if ok || !strings.Contains(note, "discarded entry "+ka.Short()) || !strings.Contains(note, tc.want) {
				t.Fatalf("ok %v, note %q; want entry %s discarded: %q", ok, note, ka.Short(), tc.want)
			}
			if c.Has(ka) {
				t.Fatal("the entry is still there")
			}
			putBytes(t, c, ka, blobA)
			b, _, ok, note := c.Get(ka)
			if !ok || !bytes.Equal(b.Bytes(), blobA) {
				t.Fatalf("the entry written again: ok %v, note %q", ok, note)
			}
			b.Close()
		})
	}
}

// sumBytes is syncAndSum of bytes in memory.
func sumBytes(b []byte) (int64, []uint32, error) {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("rungcache-sum-%d", os.Getpid()))
	defer os.Remove(path)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return 0, nil, err
	}
	return syncAndSum(path)
}

// holdLock takes dir's lock as another process would (another open file
// description) until the returned function runs.
func holdLock(t *testing.T, dir string) func() {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return func() { f.Close() }
}

// within runs f, failing the test if it has not returned after a minute
// (a hang guard, not a timing).
func within(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("still waiting for the lock after a minute")
	}
}

// TestHeldLockIsWaitedForWithALimit: a lock held past the limit makes the
// cache go on without its folder, with a message while it waits and one
// note; Ctrl-C ends the wait.
func TestHeldLockIsWaitedForWithALimit(t *testing.T) {
	dir := t.TempDir()
	c, err := OpenFolder(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	k := key(64)
	putBytes(t, c, k, []byte("compiled"))
	release := holdLock(t, dir)
	defer release()

	var mu sync.Mutex
	var said []string
	c.SetLockWait(LockWait{Limit: 1500 * time.Millisecond, Waiting: func(m string) { mu.Lock(); said = append(said, m); mu.Unlock() }})
	var ok bool
	var note string
	within(t, func() { _, _, ok, note = c.Get(k) })
	holder := fmt.Sprintf("pid %d", os.Getpid())
	if ok || !strings.Contains(note, "held by "+holder) || !strings.Contains(note, "going on without the cache") {
		t.Errorf("Get with the lock held: ok %v, note %q", ok, note)
	}
	mu.Lock()
	if len(said) != 1 || !strings.HasPrefix(said[0], "waiting for the rung cache lock held by "+holder) {
		t.Errorf("while waiting it said %q", said)
	}
	mu.Unlock()
	// Off for good: no second wait, no second note.
	within(t, func() { _, _, ok, note = c.Get(k) })
	if ok || note != "" || c.Has(k) {
		t.Errorf("second Get: ok %v note %q, Has %v; want a quiet miss", ok, note, c.Has(k))
	}
	var perr error
	within(t, func() {
		_, perr = c.Put(key(1), Meta{}, func(p string) error { return os.WriteFile(p, []byte("x"), 0o644) })
	})
	if !errors.Is(perr, ErrLockWait) {
		t.Errorf("Put: %v, want ErrLockWait", perr)
	}

	// Ctrl-C while waiting ends the wait.
	c2, err := OpenFolder(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	c2.SetLockWait(LockWait{Limit: time.Hour, Done: stop})
	time.AfterFunc(100*time.Millisecond, func() { close(stop) })
	within(t, func() { _, _, ok, note = c2.Get(k) })
	if ok || !strings.Contains(note, "interrupted while waiting") {
		t.Errorf("Get interrupted: ok %v, note %q", ok, note)
	}

	// Released in time, the wait ends with the lock.
	c3, err := OpenFolder(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	c3.SetLockWait(LockWait{Limit: time.Hour})
	time.AfterFunc(200*time.Millisecond, release)
	var b *Blob
	within(t, func() { b, _, ok, note = c3.Get(k) })
	if !ok || note != "" || string(b.Bytes()) != "compiled" {
		t.Errorf("Get after the holder let go: ok %v, note %q", ok, note)
	}
	b.Close()
}

func TestHolderIn(t *testing.T) {
	const locks = `1: POSIX  ADVISORY  WRITE 77 08:01:99 0 EOF
2: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF
2: -> FLOCK  ADVISORY  WRITE 5151 fd:01:1234 0 EOF
3: FLOCK  ADVISORY  READ 6161 fd:02:1234 0 EOF
`
	for _, tc := range []struct {
		major, minor uint32
		ino          uint64
		want         int
	}{{0xfd, 1, 1234, 4242}, {0xfd, 2, 1234, 6161}, {8, 1, 99, 0}, {0xfd, 1, 4321, 0}} {
		if got := holderIn(strings.NewReader(locks), tc.major, tc.minor, tc.ino); got != tc.want {
			t.Errorf("holderIn(%x:%x:%d) = %d, want %d", tc.major, tc.minor, tc.ino, got, tc.want)
		}
	}
}

// asUser runs f on a thread whose file system user is nobody (root's
// capabilities to override permissions dropped), as a user who may read
// the folder but not write it would.
func asUser(t *testing.T, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		f()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Setfsuid(65534); err != nil {
			t.Error(err)
			return
		}
		f()
		unix.Setfsuid(0)
	}()
	<-done
}

// TestReadOnlyFolder: a folder this user may not write lists, with or
// without a lock file, and its entries are imported.
func TestReadOnlyFolder(t *testing.T) {
	root := t.TempDir()
	os.Chmod(filepath.Dir(root), 0o755) // nobody must reach it
	os.Chmod(root, 0o755)
	for _, withLock := range []bool{true, false} {
		t.Run(fmt.Sprintf("lock file %v", withLock), func(t *testing.T) {
			dir := filepath.Join(root, fmt.Sprint(withLock))
			c, err := OpenFolder(dir, 0)
			if err != nil {
				t.Fatal(err)
			}
			k := key(64)
			putBytes(t, c, k, []byte("compiled"))
			if !withLock {
				os.Remove(filepath.Join(dir, lockName))
			}
			// The files' owner reads them; as root the reader is nobody.
			os.Chmod(c.blobPath(k), 0o644)
			if err := os.Chmod(dir, 0o555); err != nil {
				t.Fatal(err)
			}
			defer os.Chmod(dir, 0o755)
			asUser(t, func() {
				if f, err := os.Create(filepath.Join(dir, "probe")); err == nil {
					f.Close()
					t.Error("the folder is writable: the test tests nothing")
					return
				}
				if _, err := OpenFolder(dir, 0); err == nil {
					t.Error("Open, to write, took a read-only folder")
				}
				ro, err := OpenFolderRead(dir)
				if err != nil {
					t.Error(err)
					return
				}
				es, err := ro.List()
				if err != nil || len(es) != 1 || es[0].Key != k.String() {
					t.Errorf("List of a read-only folder: %+v, %v", es, err)
				}
				if !withLock {
					return
				}
				b, _, ok, note := ro.Get(k)
				if !ok || string(b.Bytes()) != "compiled" {
					t.Errorf("Get from a read-only folder: ok %v, note %q", ok, note)
				}
				b.Close()
			})
		})
	}
}
