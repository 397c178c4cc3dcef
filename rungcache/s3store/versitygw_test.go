package s3store

import (
	"bytes"
	"context"
	"crypto/rand"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/rungcache"
)

// The tests below run against a real S3-compatible server, versitygw with
// its posix backend on a temporary folder (make unit builds it and sets
// OVRUN_VERSITYGW; they skip without it).

// Writers on several clients publish the same key over and over while
// readers fetch it: every blob a reader gets is whole and the one its
// metadata describes (size and CRC-32C), and once the writers are done
// the key is one entry, and a sweep leaves one blob.
func TestConcurrentWritersOnVersitygw(t *testing.T) {
	srv := testenv.Versitygw(t)
	bucket := srv.Bucket("rungs")
	srv.SetEnv(t)
	ctx := context.Background()
	k := key(64)
	const (
		writers = 4
		rounds  = 4
		readers = 4
		size    = 6 << 20 // one CRC piece
	)
	open := func() *Store {
		s, err := Open(ctx, "s3://rungs/fleet")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	var (
		done     atomic.Bool
		verified atomic.Int64
		wg       sync.WaitGroup
	)
	for w := range writers {
		s := open()
		wg.Go(func() {
			for range rounds {
				blob := make([]byte, size)
				rand.Read(blob)
				m := meta(k, size)
				m.CRC32C = []uint32{crc32.Checksum(blob, castagnoli)}
				if err := s.Publish(ctx, k, m, bytes.NewReader(blob), size); err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	var rg sync.WaitGroup
	for r := range readers {
		s := open()
		rg.Go(func() {
			for !done.Load() {
				var b bytes.Buffer
				m, ok, err := s.Fetch(ctx, k, &b)
				switch {
				case err != nil:
					t.Errorf("reader %d: %v", r, err)
					return
				case !ok:
					continue // not published yet
				case int64(b.Len()) != m.Size || crc32.Checksum(b.Bytes(), castagnoli) != m.CRC32C[0]:
					t.Errorf("reader %d got %d bytes of %s, not the blob its metadata describes (%d bytes)", r, b.Len(), m.Object, m.Size)
					return
				}
				verified.Add(1)
			}
		})
	}
	wg.Wait()
	done.Store(true)
	rg.Wait()
	if verified.Load() == 0 {
		t.Fatal("no reader fetched the entry while the writers wrote it")
	}
	t.Logf("%d fetches verified while %d writers published %d times each", verified.Load(), writers, rounds)
	s := open()
	if es, err := s.List(ctx); err != nil || len(es) != 1 {
		t.Fatalf("List: %+v, %v; want one entry", es, err)
	}
	if err := s.Sweep(ctx, 0); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(bucket, "fleet", "*"))
	if len(files) != 2 {
		t.Errorf("after the sweep the bucket holds %q, want the metadata and its blob", files)
	}
}

// A Cache on the bucket, as the compilers open it (--cache-dir
// s3://rungs/fleet): a graph stored by one process is fetched by another
// with an empty local folder; a blob damaged in the bucket is discarded
// there and is a miss; a bucket whose server is gone is a note, and the
// cache goes on with its folder.
func TestCacheOnVersitygw(t *testing.T) {
	srv := testenv.Versitygw(t)
	bucket := srv.Bucket("rungs")
	srv.SetEnv(t)
	open := func(name string) *rungcache.Cache {
		t.Setenv(rungcache.LocalDirEnv, filepath.Join(t.TempDir(), name))
		c, err := rungcache.Open("s3://rungs/fleet", 0)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	put := func(c *rungcache.Cache, k rungcache.Key, b []byte) []string {
		notes, err := c.Put(k, rungcache.Meta{Kind: "decode", Capacity: 64, Chunk: 1, Device: "CPU"}, func(p string) error { return os.WriteFile(p, b, 0o644) })
		if err != nil {
			t.Fatal(err)
		}
		return notes
	}
	blob := make([]byte, 3<<20)
	rand.Read(blob)
	k := key(64)
	a := open("a")
	if notes := put(a, k, blob); len(notes) != 0 {
		t.Fatalf("put: %q", notes)
	}
	b := open("b")
	got, _, ok, note := b.Get(k)
	if !ok || note != "" || !bytes.Equal(got.Bytes(), blob) {
		t.Fatalf("b.Get: ok %v, note %q", ok, note)
	}
	got.Close()
	if _, err := os.Stat(filepath.Join(b.Dir(), k.String()+".blob")); err != nil {
		t.Errorf("the fetched entry is not in b's local folder: %v", err)
	}

	// Flip a byte of the blob in the server's folder.
	blobs, _ := filepath.Glob(filepath.Join(bucket, "fleet", k.String()+".*.blob"))
	if len(blobs) != 1 {
		t.Fatalf("blob objects %q, want 1", blobs)
	}
	raw, err := os.ReadFile(blobs[0])
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x10
	if err := os.WriteFile(blobs[0], raw, 0o644); err != nil {
		t.Fatal(err)
	}
	c := open("c")
	if _, _, ok, note := c.Get(k); ok || !strings.Contains(note, "discarded entry "+k.Short()+" in s3://rungs/fleet") || !strings.Contains(note, "CRC-32C") {
		t.Fatalf("c.Get of a damaged entry: ok %v, note %q", ok, note)
	}
	if left, _ := filepath.Glob(filepath.Join(bucket, "fleet", "*")); len(left) != 0 {
		t.Errorf("the damaged entry is still in the bucket: %q", left)
	}
	if c.Has(k) {
		t.Error("c.Has is true after the entry was discarded")
	}
	put(c, k, blob) // compiled again, published again
	if !open("e").Has(k) {
		t.Error("the entry stored again is not in the bucket")
	}

	// The server goes away.
	srv.Stop()
	d := open("d")
	k2 := key(128)
	if _, _, ok, note := d.Get(k2); ok || !strings.Contains(note, "rung cache: s3://rungs/fleet cannot be reached (fetch: ") || !strings.Contains(note, "connection refused") {
		t.Fatalf("d.Get with the server gone: ok %v, note %q", ok, note)
	}
	if notes := put(d, k2, blob); len(notes) != 0 {
		t.Errorf("d.Put with the server gone: notes %q, want none (said once)", notes)
	}
	got, _, ok, note = d.Get(k2)
	if !ok || note != "" {
		t.Fatalf("d.Get from its local folder: ok %v, note %q", ok, note)
	}
	got.Close()
	srv.Start()
}
