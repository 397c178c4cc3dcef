package rungcache

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The digest memo reads back what it wrote, refuses ids and digests that
// are not 64 hex digits and file contents that are not one, is cleared
// with the cache (its own files only), and neither reads nor writes
// through a digests folder that is a symlink.
func TestDigestMemo(t *testing.T) {
	c, err := Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	id, digest := strings.Repeat("ab", 32), strings.Repeat("0f", 32)
	if _, ok := c.Digest(id); ok {
		t.Fatal("a digest before any was remembered")
	}
	if err := c.RememberDigest(id, digest); err != nil {
		t.Fatal(err)
	}
	if got, ok := c.Digest(id); !ok || got != digest {
		t.Fatalf("Digest = %q, %v; want %q", got, ok, digest)
	}
	if err := c.RememberDigest("../x", digest); err == nil {
		t.Error("an id that is a path was taken")
	}
	if err := c.RememberDigest(id, "not hex"); err == nil {
		t.Error("a digest that is not hex was taken")
	}
	other := strings.Repeat("cd", 32)
	if err := os.WriteFile(filepath.Join(c.Dir(), "digests", other), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Digest(other); ok {
		t.Error("garbage read as a digest")
	}
	mine := filepath.Join(c.Dir(), "digests", "notes.txt") // not the memo's: stays
	if err := os.WriteFile(mine, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Clear(); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Digest(id); ok {
		t.Error("a digest survived Clear")
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("Clear removed a file that is not the memo's: %v", err)
	}

	elsewhere := t.TempDir()
	c2, err := Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(c2.Dir(), "digests")); err != nil {
		t.Fatal(err)
	}
	if err := c2.RememberDigest(id, digest); err == nil {
		t.Error("remembered a digest through a symlinked folder")
	}
	if left, _ := os.ReadDir(elsewhere); len(left) != 0 {
		t.Fatalf("wrote %d files through the symlink", len(left))
	}
	if err := os.WriteFile(filepath.Join(elsewhere, id), []byte(digest), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := c2.Digest(id); ok {
		t.Error("read a digest through a symlinked folder")
	}
}
