package model

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"
)

// ReleasePages drops the checkpoint files' mapped pages from this
// process's resident memory (madvise MADV_DONTNEED on the read-only file
// mappings). The mappings stay valid: a later read faults the page back in
// from the file (or the page cache). Call it once the weights have been
// copied into the graphs' blob, so that the file's pages do not count
// twice in the process's peak RSS while the graphs compile.
func (c *Checkpoint) ReleasePages() error {
	if c == nil {
		return nil
	}
	var errs []error
	for _, m := range c.mappings() {
		errs = append(errs, release(m.path, m.data))
	}
	return errors.Join(errs...)
}

// fileMapping is one checkpoint file's read-only mapping.
type fileMapping struct {
	path string
	data []byte
}

// mappings are the checkpoint's file mappings (GGUF or safetensors).
func (c *Checkpoint) mappings() []fileMapping {
	var m []fileMapping
	for _, f := range c.files {
		if len(f.mapping) > 0 {
			m = append(m, fileMapping{f.Path, f.mapping})
		}
	}
	if c.GGUF != nil && len(c.GGUF.mapping) > 0 {
		m = append(m, fileMapping{c.GGUF.Path, c.GGUF.mapping})
	}
	return m
}

// within says where b lies in one of maps: the mapping's index and b's
// offset in it; ok is false when b is not a slice of any of them.
func within(maps []fileMapping, b []byte) (i int, off int64, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	p := uintptr(unsafe.Pointer(&b[0]))
	for i, m := range maps {
		start := uintptr(unsafe.Pointer(&m.data[0]))
		if p >= start && p+uintptr(len(b)) <= start+uintptr(len(m.data)) {
			return i, int64(p - start), true
		}
	}
	return 0, 0, false
}

func release(path string, m []byte) error {
	if err := syscall.Madvise(m, syscall.MADV_DONTNEED); err != nil {
		return fmt.Errorf("release the pages of %s: %w", path, err)
	}
	return nil
}

// releaseTensor drops the mapped pages t's data lies on (the pages it
// shares with its neighbours too: a neighbour still being read faults them
// back in), as ReleasePages does for whole files; a no-op for data outside
// the checkpoint's mappings. The conversion (Weights.BindMapped) calls it
// for each tensor it has converted, so the checkpoint's pages are resident
// one tensor at a time rather than until a timer next drops them all.
func (c *Checkpoint) releaseTensor(t *Tensor) {
	maps := c.mappings()
	i, off, ok := within(maps, t.Data)
	if !ok {
		return
	}
	page := int64(syscall.Getpagesize())
	start, end := off/page*page, min(int64(len(maps[i].data)), (off+int64(len(t.Data))+page-1)/page*page)
	_ = release(maps[i].path, maps[i].data[start:end]) // best effort: ReleasePages reports errors
}
