package rungcache

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// pieceBytes is the size of the pieces of a blob that have a CRC-32C each:
// they are checked on every core at once.
const pieceBytes = 16 << 20

// firstBadPiece checks b's pieces against sums on every core and returns
// the first piece whose CRC-32C differs, -1 when all match (and there are
// as many sums as pieces).
func firstBadPiece(b []byte, sums []uint32) int {
	n := (len(b) + pieceBytes - 1) / pieceBytes
	if len(sums) != n {
		return min(len(sums), n)
	}
	bad := make([]bool, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Go(func() {
			for i := range next {
				piece := b[i*pieceBytes : min(len(b), (i+1)*pieceBytes)]
				bad[i] = crc32.Checksum(piece, castagnoli) != sums[i]
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return slices.Index(bad, true)
}

// Blob is an entry's compiled blob, mapped read-only from its file: an
// import reads it without a copy. Entries are only ever replaced by rename
// and removed by unlink, so the mapped file keeps its contents while mapped.
type Blob struct {
	mapped []byte // the whole file, trailer included
	b      []byte // the compiled blob OpenVINO exported
}

// Bytes are the blob's bytes, valid until Close.
func (b *Blob) Bytes() []byte { return b.b }

// Release drops the blob's pages from the process's resident set
// (MADV_DONTNEED on its file mapping): the page cache keeps them, and a
// later read faults them back in. For a blob OpenVINO imported in place
// (ov.Core.ImportMapped), which it reads no more once the graph is built.
func (b *Blob) Release() error {
	if b == nil || b.mapped == nil {
		return nil
	}
	return syscall.Madvise(b.mapped, syscall.MADV_DONTNEED)
}

// Close unmaps the blob.
func (b *Blob) Close() error {
	if b == nil || b.mapped == nil {
		return nil
	}
	err := syscall.Munmap(b.mapped)
	b.mapped, b.b = nil, nil
	return err
}

// A blob file ends with a trailer that names its entry's key, after the
// bytes OpenVINO exported (appended, so the export is not copied): a blob
// moved or swapped into another entry's place, even with metadata that
// matches it, is told apart from that entry's own (TestSwappedEntries).
// The CRC-32Cs cover the trailer too.
const (
	trailerPrefix = "\novrun rung cache key "
	trailerLen    = len(trailerPrefix) + 2*len(Key{}) + 1
)

// trailer is the trailer of k's blob file.
func trailer(k Key) []byte { return []byte(trailerPrefix + k.String() + "\n") }

// appendTrailer appends k's trailer to the blob file at path.
func appendTrailer(path string, k Key) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(trailer(k)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// checkTrailer checks that the mapped blob file b is k's: it ends with
// k's trailer. It returns the exported blob before the trailer.
func checkTrailer(b []byte, k Key) ([]byte, error) {
	if len(b) <= trailerLen {
		return nil, fmt.Errorf("the blob file is %d bytes, too short to hold a blob and its key (not written by this ovrun)", len(b))
	}
	blob, t := b[:len(b)-trailerLen], b[len(b)-trailerLen:]
	if string(t) == string(trailer(k)) {
		return blob, nil
	}
	if other, ok := strings.CutPrefix(string(t), trailerPrefix); ok {
		if o, err := ParseKey(strings.TrimSuffix(other, "\n")); err == nil {
			return nil, fmt.Errorf("the blob is entry %s's, not this one's (moved or swapped)", o.Short())
		}
	}
	return nil, errors.New("the blob file does not end with its key (foreign, or written by another ovrun)")
}

// mapBlob maps the regular file at path (never through a symlink), which
// must be size bytes long.
func mapBlob(path string, size int64) (*Blob, error) {
	f, fi, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() != size {
		return nil, fmt.Errorf("blob is %d bytes, its metadata says %d (truncated or replaced)", fi.Size(), size)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", filepath.Base(path), err)
	}
	return &Blob{mapped: b, b: b}, nil
}

// openRegular opens a regular file for reading, never through a symlink
// and never blocking (a FIFO in an entry's place is refused).
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filepath.Base(path), unwrap(err))
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is %s", filepath.Base(path), safefile.Kind(fi.Mode()))
	}
	return f, fi, nil
}
