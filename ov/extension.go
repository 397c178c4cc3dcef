package ov

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"
)

// PagedAttentionLibrary is the file name of ovrun's OpenVINO extension (built
// from ov/ext/paged_attention.cc by `make build`, into the folder of the
// libopenvino it is linked against): it lets the IR reader build OpenVINO's
// PagedAttentionExtension operation, which libopenvino implements and the
// CPU plugin runs but no standard opset names.
const PagedAttentionLibrary = "libovrun_paged_attention.so"

// ErrNoPagedAttention is returned (wrapped) by Core.PagedAttention when the
// extension is not there or could not be added.
var ErrNoPagedAttention = errors.New("paged attention unavailable")

// pagedAttentionPath is where NewCore looks for the extension: beside the
// libopenvino_c that Load opened. "" (and why) when Load found the library
// through the dynamic loader, whose folder is unknown.
func pagedAttentionPath() (string, string) {
	lib := LibraryPath()
	if lib == "" || !filepath.IsAbs(lib) && filepath.Base(lib) == lib {
		return "", "the OpenVINO library was found by the dynamic loader, so its folder (where " + PagedAttentionLibrary + " is looked for) is unknown"
	}
	return filepath.Join(filepath.Dir(lib), PagedAttentionLibrary), ""
}

// addPagedAttention adds the extension to c when it is there and may be
// loaded; the error says why not.
func (c *Core) addPagedAttention() error {
	path, why := pagedAttentionPath()
	if path == "" {
		return fmt.Errorf("%w: %s", ErrNoPagedAttention, why)
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%w: no %s (run \"make build\", which builds it against the OpenVINO headers)", ErrNoPagedAttention, path)
	}
	if why := untrusted(path, filepath.Dir(path)); why != "" {
		return fmt.Errorf("%w: %s skipped, %s", ErrNoPagedAttention, path, why)
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	if err := statusError("ov_core_add_extension", C.ovr_core_add_extension(c.p, cpath)); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNoPagedAttention, path, err)
	}
	return nil
}

// PagedAttention reports whether graphs read by this core may use
// OpenVINO's PagedAttentionExtension operation: nil when the extension was
// added, else why not (wrapping ErrNoPagedAttention).
func (c *Core) PagedAttention() error { return c.paged }
