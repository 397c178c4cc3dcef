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

// Version returns the build number of the loaded OpenVINO, e.g.
// "2026.3.0-20000-abcdef".
func Version() (string, error) {
	if err := Load(); err != nil {
		return "", err
	}
	return version()
}

// version asks the opened library; Load itself uses it, so it must not call Load.
func version() (string, error) {
	var v C.ov_version_t
	if err := statusError("ov_get_openvino_version", C.ovr_get_openvino_version(&v)); err != nil {
		return "", err
	}
	defer C.ovr_version_free(&v)
	if v.buildNumber == nil {
		return "", errors.New("ov_get_openvino_version: empty build number")
	}
	return C.GoString(v.buildNumber), nil
}

// Core is an OpenVINO runtime core: it reads, compiles and imports models.
// Its methods may be called from several goroutines at once, but not
// concurrently with Close.
type Core struct {
	p      *C.ov_core_t
	paged  error // why PagedAttention is unavailable; nil when the extension was added
	kernel error // why GGUFLinear is unavailable; nil when its extension was added
}

// NewCore loads the library if needed and creates a Core, with ovrun's
// extensions added when they are there (Core.PagedAttention,
// Core.GGUFLinear).
func NewCore() (*Core, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	var p *C.ov_core_t
	if err := statusError("ov_core_create", C.ovr_core_create(&p)); err != nil {
		return nil, err
	}
	c := &Core{p: p}
	c.paged = c.addExtension(PagedAttentionLibrary, ErrNoPagedAttention)
	c.kernel = c.addGGUFLinear()
	return c, nil
}

// Close frees the core. Models compiled by it stay usable until their own Close.
func (c *Core) Close() error {
	if c == nil || c.p == nil {
		return nil
	}
	C.ovr_core_free(c.p)
	c.p = nil
	return nil
}

// AvailableDevices lists the devices OpenVINO can use here, e.g. "CPU", "GPU.0".
func (c *Core) AvailableDevices() ([]string, error) {
	if c == nil || c.p == nil {
		return nil, closedError("available devices")
	}
	var d C.ov_available_devices_t
	if err := statusError("ov_core_get_available_devices", C.ovr_core_get_available_devices(c.p, &d)); err != nil {
		return nil, err
	}
	defer C.ovr_available_devices_free(&d)
	names := unsafe.Slice(d.devices, int(d.size))
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = C.GoString(n)
	}
	return out, nil
}

// SetProperty sets one property for a device, e.g.
// SetProperty("CPU", "INFERENCE_NUM_THREADS", "2"). An empty device sets it
// for every device.
func (c *Core) SetProperty(device, key, value string) error {
	if c == nil || c.p == nil {
		return closedError("set property")
	}
	var cdev *C.char
	if device != "" {
		cdev = C.CString(device)
		defer C.free(unsafe.Pointer(cdev))
	}
	ckey, cval := C.CString(key), C.CString(value)
	defer C.free(unsafe.Pointer(ckey))
	defer C.free(unsafe.Pointer(cval))
	return statusError("ov_core_set_property", C.ovr_core_set_property(c.p, cdev, ckey, cval))
}

// SetProperties sets each property for a device, in order: what an
// import needs, since ImportModel takes no properties of its own and a
// graph imported without its compile properties may run differently (an
// f32 graph comes back bf16). The error names the property that failed.
func (c *Core) SetProperties(device string, props ...Property) error {
	for _, p := range props {
		if err := c.SetProperty(device, p.Key, p.Value); err != nil {
			return fmt.Errorf("set %s=%s on %s: %w", p.Key, p.Value, device, err)
		}
	}
	return nil
}

// Property reads a device property as a string.
func (c *Core) Property(device, key string) (string, error) {
	if c == nil || c.p == nil {
		return "", closedError("get property")
	}
	cdev, ckey := C.CString(device), C.CString(key)
	defer C.free(unsafe.Pointer(cdev))
	defer C.free(unsafe.Pointer(ckey))
	var v *C.char
	if err := statusError("ov_core_get_property", C.ovr_core_get_property(c.p, cdev, ckey, &v)); err != nil {
		return "", err
	}
	defer C.ovr_free(v)
	return C.GoString(v), nil
}

// Model is a model read into memory, ready to compile.
type Model struct {
	p *C.ov_model_t
}

// ReadModel parses IR XML held in memory. weights, when not nil, is a U8 1-D
// tensor holding the .bin contents; the model keeps pointing into that
// memory, so it must stay alive and unmoved until the model and every
// compiled model made from it are closed (the Tensor itself may be closed
// earlier). Use a HostBuffer or mmap'd memory, never a Go slice. The XML is
// copied.
func (c *Core) ReadModel(xml []byte, weights *Tensor) (*Model, error) {
	if c == nil || c.p == nil {
		return nil, closedError("read model")
	}
	if len(xml) == 0 {
		return nil, errors.New("ov: read model: empty xml")
	}
	var w *C.ov_tensor_t
	if weights != nil {
		if weights.p == nil {
			return nil, closedError("read model weights")
		}
		w = weights.p
	}
	var p *C.ov_model_t
	st := C.ovr_core_read_model_from_memory_buffer(c.p, (*C.char)(unsafe.Pointer(&xml[0])), C.size_t(len(xml)), w, &p)
	if err := statusError("ov_core_read_model_from_memory_buffer", st); err != nil {
		return nil, err
	}
	return &Model{p: p}, nil
}

// Close frees the model. Compiled models made from it stay usable.
func (m *Model) Close() {
	if m == nil || m.p == nil {
		return
	}
	C.ovr_model_free(m.p)
	m.p = nil
}
