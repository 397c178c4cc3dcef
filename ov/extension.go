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

	"golang.org/x/sys/cpu"
)

// PagedAttentionLibrary is the file name of ovrun's OpenVINO extension (built
// from ov/ext/paged_attention.cc by `make build`, into the folder of the
// libopenvino it is linked against): it lets the IR reader build OpenVINO's
// PagedAttentionExtension operation, which libopenvino implements and the
// CPU plugin runs but no standard opset names.
const PagedAttentionLibrary = "libovrun_paged_attention.so"

// GGUFLinearLibrary is the file name of ovrun's own kernel
// (ov/ext/gguf_linear.cc, built like PagedAttentionLibrary): the GGUFLinear
// and GGUFGather operations, which multiply by and gather from Q4_1, Q4_0
// and Q8_0 blocks laid out for them (model.WeightsKernel). It needs AVX2,
// FMA and F16C.
const GGUFLinearLibrary = "libovrun_gguf_linear.so"

// ErrNoPagedAttention is returned (wrapped) by Core.PagedAttention when the
// extension is not there or could not be added.
var ErrNoPagedAttention = errors.New("paged attention unavailable")

// ErrNoGGUFLinear is returned (wrapped) by Core.GGUFLinear when the kernel's
// extension is not there, could not be added or cannot run on this CPU.
var ErrNoGGUFLinear = errors.New("ovrun's kernel unavailable")

// extensionPath is where NewCore looks for the extension library name:
// beside the libopenvino_c that Load opened. "" (and why) when Load found
// the library through the dynamic loader, whose folder is unknown.
func extensionPath(name string) (string, string) {
	lib := LibraryPath()
	if lib == "" || !filepath.IsAbs(lib) && filepath.Base(lib) == lib {
		return "", "the OpenVINO library was found by the dynamic loader, so its folder (where " + name + " is looked for) is unknown"
	}
	return filepath.Join(filepath.Dir(lib), name), ""
}

// addExtension adds the extension library name to c when it is there and
// may be loaded; the error, wrapping sentinel, says why not.
func (c *Core) addExtension(name string, sentinel error) error {
	path, why := extensionPath(name)
	if path == "" {
		return fmt.Errorf("%w: %s", sentinel, why)
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%w: no %s (run \"make build\", which builds it against the OpenVINO headers)", sentinel, path)
	}
	if why := untrusted(path, filepath.Dir(path)); why != "" {
		return fmt.Errorf("%w: %s skipped, %s", sentinel, path, why)
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	if err := statusError("ov_core_add_extension", C.ovr_core_add_extension(c.p, cpath)); err != nil {
		return fmt.Errorf("%w: %s: %w", sentinel, path, err)
	}
	return nil
}

// addGGUFLinear adds the kernel's extension where this CPU can run it.
func (c *Core) addGGUFLinear() error {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		return fmt.Errorf("%w: it needs a CPU with AVX2 and FMA", ErrNoGGUFLinear)
	}
	return c.addExtension(GGUFLinearLibrary, ErrNoGGUFLinear)
}

// PagedAttention reports whether graphs read by this core may use
// OpenVINO's PagedAttentionExtension operation: nil when the extension was
// added, else why not (wrapping ErrNoPagedAttention).
func (c *Core) PagedAttention() error { return c.paged }

// GGUFLinear reports whether graphs read by this core may use ovrun's
// GGUFLinear operation (model.WeightsKernel): nil when its extension was
// added, else why not (wrapping ErrNoGGUFLinear).
func (c *Core) GGUFLinear() error { return c.kernel }
