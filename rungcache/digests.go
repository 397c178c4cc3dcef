package rungcache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

// A cache folder also remembers digests that are costly to compute and
// that a key needs, such as the SHA-256 of a model's converted weights:
// under digestsDir, one small file per identity (a hex SHA-256 of whatever
// determines the digest: a file's path, inode, size and times, the
// program's build), holding the digest. A warm start then keys its graphs
// without reading the weights. The memo is local only: a Store never sees
// it. An identity that no longer matches is never read again; Clear
// removes them all.
const digestsDir = "digests"

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Digest is the digest remembered for identity id (64 hex digits), false
// when there is none or the file is not one.
func (c *Cache) Digest(id string) (string, bool) {
	dir, ok := c.digestsDir()
	if !ok || !hex64.MatchString(id) {
		return "", false
	}
	b, err := safefile.ReadFile(filepath.Join(dir, id), 64)
	if err != nil || !hex64.Match(b) {
		return "", false
	}
	return string(b), true
}

// RememberDigest records digest for identity id (both 64 hex digits),
// written whole or not at all.
func (c *Cache) RememberDigest(id, digest string) error {
	if !hex64.MatchString(id) || !hex64.MatchString(digest) {
		return os.ErrInvalid
	}
	if err := os.Mkdir(filepath.Join(c.Dir(), digestsDir), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	dir, ok := c.digestsDir()
	if !ok {
		return fmt.Errorf("rung cache: %s is not a folder", filepath.Join(c.Dir(), digestsDir))
	}
	return safefile.WriteFile(filepath.Join(dir, id), []byte(digest))
}

// digestsDir is the memo's folder, false unless it is one (a symlink or
// anything else in its place is neither read nor written through).
func (c *Cache) digestsDir() (string, bool) {
	dir := filepath.Join(c.Dir(), digestsDir)
	fi, err := os.Lstat(dir)
	return dir, err == nil && fi.IsDir()
}

// clearDigests removes the memo's files (named like one, nothing else in
// the folder) and the folder once empty.
func (c *Cache) clearDigests() {
	dir, ok := c.digestsDir()
	if !ok {
		return
	}
	names, _ := os.ReadDir(dir)
	for _, e := range names {
		if hex64.MatchString(e.Name()) && e.Type().IsRegular() {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	os.Remove(dir) // only if empty
}
