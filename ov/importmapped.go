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
	"sync"
	"unsafe"
)

// ImportMappedLibrary is the file name of ovrun's in-place import (built
// from ov/ext/import_mapped.cc by `make build`, into the folder of the
// libopenvino it is linked against, like PagedAttentionLibrary).
const ImportMappedLibrary = "libovrun_import_mapped.so"

// ErrNoImportMapped is returned (wrapped) by ImportMapped when the library
// is not there or could not be loaded; ImportModel still works.
var ErrNoImportMapped = errors.New("in-place import unavailable")

var importMapped struct {
	once sync.Once
	err  error
}

// loadImportMapped opens ImportMappedLibrary beside the libopenvino_c Load
// opened, once.
func loadImportMapped() error {
	importMapped.once.Do(func() {
		lib := LibraryPath()
		if lib == "" || !filepath.IsAbs(lib) {
			importMapped.err = fmt.Errorf("%w: the OpenVINO library's folder is unknown", ErrNoImportMapped)
			return
		}
		path := filepath.Join(filepath.Dir(lib), ImportMappedLibrary)
		if _, err := os.Stat(path); err != nil {
			importMapped.err = fmt.Errorf("%w: no %s (run \"make build\")", ErrNoImportMapped, path)
			return
		}
		if why := untrusted(path, filepath.Dir(path)); why != "" {
			importMapped.err = fmt.Errorf("%w: %s skipped, %s", ErrNoImportMapped, path, why)
			return
		}
		cpath := C.CString(path)
		defer C.free(unsafe.Pointer(cpath))
		var cerr *C.char
		if C.ovr_import_mapped_open(cpath, &cerr) != 0 {
			importMapped.err = fmt.Errorf("%w: %s", ErrNoImportMapped, C.GoString(cerr))
			C.free(unsafe.Pointer(cerr))
		}
	})
	return importMapped.err
}

// ImportMapped is ImportModel reading blob in place: the device may keep
// pointers into blob (the CPU plugin shares the constants of the compiled
// model with it instead of copying them), so blob must stay mapped and
// unchanged until the compiled model is closed; done runs then (unmap it
// there). Meant for a blob mapped from a file, whose pages the caller may
// drop from the resident set after the import. Errors wrapping
// ErrNoImportMapped mean the library is missing: use ImportModel.
func (c *Core) ImportMapped(blob []byte, device string, done func()) (*CompiledModel, error) {
	if c == nil || c.p == nil {
		return nil, closedError("import model")
	}
	if len(blob) == 0 {
		return nil, errors.New("ov: import model: empty blob")
	}
	if err := loadImportMapped(); err != nil {
		return nil, err
	}
	cdev := C.CString(device)
	defer C.free(unsafe.Pointer(cdev))
	var out *C.ov_compiled_model_t
	var msg [1024]C.char
	if C.ovr_import_mapped(c.p, unsafe.Pointer(&blob[0]), C.size_t(len(blob)), cdev, &out, &msg[0], C.size_t(len(msg))) != 0 {
		return nil, fmt.Errorf("ov: import model in place: %s", C.GoString(&msg[0]))
	}
	return &CompiledModel{p: out, done: done}, nil
}
