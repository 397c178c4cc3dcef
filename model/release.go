package model

import (
	"errors"
	"fmt"
	"syscall"
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
	for _, f := range c.files {
		errs = append(errs, release(f.Path, f.mapping))
	}
	if c.GGUF != nil {
		errs = append(errs, release(c.GGUF.Path, c.GGUF.mapping))
	}
	return errors.Join(errs...)
}

func release(path string, m []byte) error {
	if len(m) == 0 {
		return nil
	}
	if err := syscall.Madvise(m, syscall.MADV_DONTNEED); err != nil {
		return fmt.Errorf("release the pages of %s: %w", path, err)
	}
	return nil
}
