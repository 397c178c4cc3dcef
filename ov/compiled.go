package ov

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// MaxCompileProperties is the most properties one CompileModel call accepts.
const MaxCompileProperties = C.OVR_MAX_PROPERTY_PAIRS

// Property is one compile-time setting, e.g.
// Property{"INFERENCE_PRECISION_HINT", "f32"}. Keys are OpenVINO's strings
// (ov_property.h); values are their string forms.
type Property struct {
	Key, Value string
}

// CompiledModel is a model compiled for one device. It may be used from
// several goroutines at once, but not concurrently with Close.
type CompiledModel struct {
	p    *C.ov_compiled_model_t
	done func() // ImportMapped's: runs after the model is freed
}

// CompileModel compiles m for device ("CPU", "GPU", ...) with up to
// MaxCompileProperties properties. An unknown device or property key is an
// error. The memory behind m's weights must outlive the compiled model.
func (c *Core) CompileModel(m *Model, device string, props ...Property) (*CompiledModel, error) {
	if c == nil || c.p == nil {
		return nil, closedError("compile model")
	}
	if m == nil || m.p == nil {
		return nil, closedError("compile model: model")
	}
	if len(props) > MaxCompileProperties {
		return nil, fmt.Errorf("ov: compile model: %d properties, at most %d supported", len(props), MaxCompileProperties)
	}
	cdev := C.CString(device)
	defer C.free(unsafe.Pointer(cdev))
	// Go arrays of C pointers may be passed to C: they hold no Go pointers.
	var keys, values [MaxCompileProperties]*C.char
	for i, p := range props {
		keys[i], values[i] = C.CString(p.Key), C.CString(p.Value)
	}
	defer func() {
		for i := range props {
			C.free(unsafe.Pointer(keys[i]))
			C.free(unsafe.Pointer(values[i]))
		}
	}()
	var out *C.ov_compiled_model_t
	st := C.ovr_core_compile_model(c.p, m.p, cdev, C.size_t(len(props)), &keys[0], &values[0], &out)
	if err := statusError("ov_core_compile_model", st); err != nil {
		return nil, err
	}
	return &CompiledModel{p: out}, nil
}

// ImportModel loads a compiled model written by Export. The bytes are read
// during the call and may be reused afterwards.
func (c *Core) ImportModel(blob []byte, device string) (*CompiledModel, error) {
	if c == nil || c.p == nil {
		return nil, closedError("import model")
	}
	if len(blob) == 0 {
		return nil, errors.New("ov: import model: empty blob")
	}
	cdev := C.CString(device)
	defer C.free(unsafe.Pointer(cdev))
	var out *C.ov_compiled_model_t
	st := C.ovr_core_import_model(c.p, (*C.char)(unsafe.Pointer(&blob[0])), C.size_t(len(blob)), cdev, &out)
	if err := statusError("ov_core_import_model", st); err != nil {
		return nil, err
	}
	return &CompiledModel{p: out}, nil
}

// Export writes the compiled model to a file that ImportModel can read.
func (cm *CompiledModel) Export(path string) error {
	if cm == nil || cm.p == nil {
		return closedError("export model")
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	return statusError("ov_compiled_model_export_model", C.ovr_compiled_model_export_model(cm.p, cpath))
}

// Property reads a property of the compiled model as a string, e.g.
// Property("INFERENCE_PRECISION_HINT") returns "f32".
func (cm *CompiledModel) Property(key string) (string, error) {
	if cm == nil || cm.p == nil {
		return "", closedError("compiled model property")
	}
	ckey := C.CString(key)
	defer C.free(unsafe.Pointer(ckey))
	var v *C.char
	if err := statusError("ov_compiled_model_get_property", C.ovr_compiled_model_get_property(cm.p, ckey, &v)); err != nil {
		return "", err
	}
	defer C.ovr_free(v)
	return C.GoString(v), nil
}

// NewInferRequest creates a request that runs the compiled model.
func (cm *CompiledModel) NewInferRequest() (*InferRequest, error) {
	if cm == nil || cm.p == nil {
		return nil, closedError("new infer request")
	}
	var r *C.ov_infer_request_t
	if err := statusError("ov_compiled_model_create_infer_request", C.ovr_compiled_model_create_infer_request(cm.p, &r)); err != nil {
		return nil, err
	}
	return &InferRequest{p: r}, nil
}

// Close frees the compiled model. Its infer requests keep what they need
// until their own Close.
func (cm *CompiledModel) Close() {
	if cm == nil || cm.p == nil {
		return
	}
	C.ovr_compiled_model_free(cm.p)
	cm.p = nil
	if cm.done != nil {
		cm.done()
		cm.done = nil
	}
}
