package rungcache

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func key(i int) Key { return KeyOf(Parts{Device: "CPU", Capacity: i, Chunk: 1, Kind: "decode"}) }

func putBytes(t *testing.T, c *Folder, k Key, b []byte) []string {
	t.Helper()
	notes, err := c.Put(k, Meta{Capacity: 64, Chunk: 1, Kind: "decode", Device: "CPU"}, func(p string) error { return os.WriteFile(p, b, 0o644) })
	if err != nil {
		t.Fatal(err)
	}
	return notes
}

func TestPutGetRoundTrip(t *testing.T) {
	c, err := OpenFolder(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	k := key(64)
	if _, _, ok, note := c.Get(k); ok || note != "" {
		t.Fatalf("empty cache: ok %v, note %q", ok, note)
	}
	putBytes(t, c, k, []byte("compiled blob"))
	if !c.Has(k) {
		t.Fatal("Has is false after Put")
	}
	b, m, ok, note := c.Get(k)
	if !ok || note != "" || string(b.Bytes()) != "compiled blob" || m.Size != int64(13+trailerLen) || m.Key != k.String() {
		t.Fatalf("Get = %+v %v %q", m, ok, note)
	}
	b.Close()
	if KeyOf(Parts{Device: "CPU", Capacity: 64, Chunk: 1, Kind: "decode", Precision: "bf16"}) == k {
		t.Fatal("precision does not change the key")
	}
}

// Damaged entries are discarded with a note, and a new Put replaces them.
func TestDamagedEntriesAreDiscarded(t *testing.T) {
	blob := bytes.Repeat([]byte("0123456789"), 100)
	for _, tc := range []struct {
		name, want string
		damage     func(c *Folder, k Key)
	}{
		{"flipped byte", "CRC-32C", func(c *Folder, k Key) {
			b, _ := os.ReadFile(c.blobPath(k))
			b[500] ^= 0x40
			os.WriteFile(c.blobPath(k), b, 0o644)
		}},
		{"truncated blob", "truncated", func(c *Folder, k Key) { os.Truncate(c.blobPath(k), 300) }},
		{"missing blob", "no such file", func(c *Folder, k Key) { os.Remove(c.blobPath(k)) }},
		{"garbage metadata", "not valid JSON", func(c *Folder, k Key) { os.WriteFile(c.metaPath(k), []byte("{\x00"), 0o644) }},
		{"foreign metadata", "format 7", func(c *Folder, k Key) {
			os.WriteFile(c.metaPath(k), []byte(`{"format":7}`), 0o644)
		}},
		{"metadata of another key", "metadata is for key", func(c *Folder, k Key) {
			b, _ := os.ReadFile(c.metaPath(k))
			os.WriteFile(c.metaPath(k), bytes.Replace(b, []byte(k.String()), []byte(key(1).String()), 1), 0o644)
		}},
		{"blob is a symlink", "too many levels", func(c *Folder, k Key) {
			outside := filepath.Join(filepath.Dir(c.dir), "outside")
			os.WriteFile(outside, blob, 0o644)
			os.Remove(c.blobPath(k))
			os.Symlink(outside, c.blobPath(k))
		}},
		{"blob is a folder", "is a folder", func(c *Folder, k Key) {
			os.Remove(c.blobPath(k))
			os.Mkdir(c.blobPath(k), 0o755)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := OpenFolder(filepath.Join(t.TempDir(), "cache"), 0)
			if err != nil {
				t.Fatal(err)
			}
			k := key(64)
			putBytes(t, c, k, blob)
			tc.damage(c, k)
			_, _, ok, note := c.Get(k)
			if ok || !strings.Contains(note, "discarded entry "+k.Short()) || !strings.Contains(note, tc.want) {
				t.Fatalf("ok %v, note %q; want a discard naming %q", ok, note, tc.want)
			}
			if c.Has(k) {
				t.Fatal("the damaged entry is still there")
			}
			if _, _, ok, note := c.Get(k); ok || note != "" {
				t.Fatalf("second Get: ok %v note %q, want a plain miss", ok, note)
			}
			putBytes(t, c, k, blob)
			b, _, ok, _ := c.Get(k)
			if !ok || !bytes.Equal(b.Bytes(), blob) {
				t.Fatal("the entry written again does not read back")
			}
			b.Close()
		})
	}
}

func TestLRUEviction(t *testing.T) {
	dir := t.TempDir()
	c, err := OpenFolder(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now = func() time.Time { clock = clock.Add(time.Minute); return clock }
	blob := bytes.Repeat([]byte{7}, 1000)
	for i := 1; i <= 3; i++ {
		putBytes(t, c, key(i), blob)
		now := c.now()
		os.Chtimes(c.metaPath(key(i)), now, now)
	}
	es, _ := c.List()
	c.max = 3*es[0].Bytes + es[0].Bytes/2 // three entries fit, four do not
	b, _, ok, _ := c.Get(key(1))          // 1 is now the most recently used: 2 is the oldest
	if !ok {
		t.Fatal("miss")
	}
	b.Close()
	notes := putBytes(t, c, key(4), blob)
	if len(notes) != 1 || !strings.Contains(notes[0], "evicted entry "+key(2).Short()) {
		t.Fatalf("notes %q, want the eviction of entry 2", notes)
	}
	for i, want := range map[int]bool{1: true, 2: false, 3: true, 4: true} {
		if c.Has(key(i)) != want {
			t.Errorf("entry %d present %v, want %v", i, !want, want)
		}
	}
	// A blob larger than the cap alone does not stay.
	putBytes(t, c, key(5), bytes.Repeat([]byte{1}, int(c.max)))
	if c.Has(key(5)) {
		t.Error("an entry over the cap alone was kept")
	}
}

func TestPruneAndClearKeepOtherFiles(t *testing.T) {
	dir := t.TempDir()
	c, err := OpenFolder(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		putBytes(t, c, key(i), bytes.Repeat([]byte{1}, 100*i))
	}
	old := time.Now().Add(-48 * time.Hour)
	os.Chtimes(c.metaPath(key(1)), old, old)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644)
	os.WriteFile(filepath.Join(dir, "ABC.blob"), []byte("not an entry"), 0o644)
	gone, err := c.Prune(-1, 24*time.Hour)
	if err != nil || len(gone) != 1 || gone[0].Key != key(1).String() {
		t.Fatalf("prune --older-than: %v %v", gone, err)
	}
	es, _ := c.List()
	if len(es) != 2 || es[0].Capacity != 64 {
		t.Fatalf("list after prune: %+v", es)
	}
	if gone, err = c.Clear(); err != nil || len(gone) != 2 {
		t.Fatalf("clear: %v %v", gone, err)
	}
	left, _ := os.ReadDir(dir)
	var names []string
	for _, de := range left {
		names = append(names, de.Name())
	}
	if strings.Join(names, " ") != ".rungcache.lock ABC.blob notes.txt" {
		t.Fatalf("clear left %q, want only the lock and the files that are not entries", names)
	}
}

// Goroutines sharing one folder through separate Caches (as processes do)
// never see a blob that does not match its metadata.
func TestConcurrentPutGet(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := OpenFolder(dir, 20000)
			if err != nil {
				errs <- err.Error()
				return
			}
			for i := range 20 {
				k := key(i % 5)
				b := bytes.Repeat([]byte{byte(w)}, 1000+w)
				if _, err := c.Put(k, Meta{Capacity: 1}, func(p string) error { return os.WriteFile(p, b, 0o644) }); err != nil {
					errs <- err.Error()
				}
				got, _, _, note := c.Get(key((i + 1) % 5))
				if note != "" {
					errs <- note
				}
				got.Close()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestParseKeyRejectsHostileNames(t *testing.T) {
	for _, s := range []string{"", "../../etc/passwd", strings.Repeat("g", 64), strings.Repeat("a", 63), strings.Repeat("a", 64) + "/x"} {
		if _, err := ParseKey(s); err == nil {
			t.Errorf("ParseKey(%q) accepted", s)
		}
	}
}

func FuzzParseMeta(f *testing.F) {
	m := Meta{Format: FormatVersion, Key: key(1).String(), Size: 10, CRC32C: []uint32{7}, Capacity: 64, Chunk: 1}
	b, _ := m.marshal()
	f.Add(b)
	f.Add([]byte(`{"format":1,"size":-1}`))
	f.Add([]byte(`{"format":1,"key":"../x","size":1,"sha256":"00"}`))
	f.Add([]byte(fmt.Sprintf(`{"format":1,"key":%q,"size":99999999999999,"crc32c":[1]}`, key(2))))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMeta(b)
		if err != nil {
			return
		}
		if _, err := ParseKey(m.Key); err != nil || m.Size <= 0 || m.Size > maxBlobBytes || m.Format != FormatVersion {
			t.Fatalf("accepted an invalid metadata file: %+v", m)
		}
	})
}

// Every piece of a blob of several pieces is checked.
func TestEveryPieceIsChecked(t *testing.T) {
	dir := t.TempDir()
	c, err := OpenFolder(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	blob := bytes.Repeat([]byte{3}, 2*pieceBytes+5)
	k := key(1)
	putBytes(t, c, k, blob)
	b, m, ok, _ := c.Get(k)
	if !ok || len(m.CRC32C) != 3 {
		t.Fatalf("ok %v, %d piece sums; want 3", ok, len(m.CRC32C))
	}
	b.Close()
	file, err := os.ReadFile(c.blobPath(k))
	if err != nil {
		t.Fatal(err)
	}
	file[len(file)-1] ^= 1 // the last byte of the short last piece
	if err := os.WriteFile(c.blobPath(k), file, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, note := c.Get(k); ok || !strings.Contains(note, "piece 2") {
		t.Fatalf("ok %v, note %q; want piece 2 found corrupt", ok, note)
	}
}
