package ovexec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/ovtoolkit/ovrun/ov"
	"github.com/ovtoolkit/ovrun/runtime"
)

// The weights blob is read in (GGUF blocks repacked, the rest mapped; see
// AllocWeights) only for a graph that is compiled. A compiler with a
// compiled-rung cache keys its graphs by the digest of the blob's
// checkpoint part, which the cache folder remembers by the identity of
// what determines those bytes (weightsIdentity): when it remembers it, the
// compiler starts without the blob, and a start whose graphs are all
// cached never reads the weights at all (their graphs carry their own).
// This took 0.2-0.45 s off SmolLM2's warm start on a 2-core Xeon
// (docs/benchmarks.md "Ready").

// openWeights reads the weights in and opens the cache, or, when the cache
// remembers the weights' digest, only opens the cache.
func (c *Compiler) openWeights(opts Options) error {
	if opts.CacheDir == "" {
		return c.readWeights()
	}
	id := weightsIdentity(c.weights.Plan(), c.weights.Sources())
	rc, err := openRungCache(opts)
	if err != nil {
		return err
	}
	c.cache = rc
	if d, ok := rc.store.Digest(id); ok { // false for "", an identity not made
		rc.weights = d
		return nil
	}
	if err := c.readWeights(); err != nil {
		return err
	}
	rc.store.RememberDigest(id, rc.weights) // best effort: the next start reads the weights again
	return nil
}

// readWeights reads the weights blob in, once; with a cache whose digest
// of the weights is not known yet, it computes it.
func (c *Compiler) readWeights() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.blob != nil {
		return nil
	}
	blob, err := AllocWeights(c.weights)
	if err != nil {
		return err
	}
	wt, err := ov.NewTensorFromPtr(ov.U8, []int64{c.weights.Size()}, blob.Ptr())
	if err != nil {
		blob.Free()
		return err
	}
	if c.cache != nil && c.cache.weights == "" {
		c.cache.weights = weightsDigest(blob.Bytes()[:c.weights.TensorBytes()])
	}
	if err := blob.ReleaseFiles(); err != nil { // read by the digest
		wt.Close()
		blob.Free()
		return err
	}
	c.blob, c.wt = blob, wt
	c.region.Store(&runtime.Region{Start: uintptr(blob.Ptr()), Len: uintptr(blob.Len())})
	return nil
}

// weightsIdentity is the SHA-256 of what determines the bytes of the
// weights blob's checkpoint part: its plan (model.Weights.Plan), each
// source file's path, device, inode, size and modification and change
// times, and the same of this program's executable (the code that
// converts them). "" when a file cannot be looked at.
func weightsIdentity(plan string, sources []string) string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	h := sha256.New()
	io.WriteString(h, "ovrun weights identity 1\n"+plan)
	for _, p := range append([]string{exe}, sources...) {
		abs, err := filepath.Abs(p)
		if err != nil {
			return ""
		}
		fi, err := os.Stat(abs)
		if err != nil {
			return ""
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return ""
		}
		fmt.Fprintf(h, "%s dev=%d ino=%d size=%d mtime=%d.%d ctime=%d.%d\n", abs, st.Dev, st.Ino, st.Size,
			st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	}
	return hex.EncodeToString(h.Sum(nil))
}
