package ov

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// ElementType is an OpenVINO element type (ov_element_type_e). The values
// come from the headers at compile time; they are not stable across
// OpenVINO releases, so never store or send them as numbers.
type ElementType int

// Element types used by this module.
const (
	Dynamic ElementType = C.DYNAMIC // unknown or not yet fixed
	Boolean ElementType = C.BOOLEAN
	BF16    ElementType = C.BF16
	F16     ElementType = C.F16
	F32     ElementType = C.F32
	I8      ElementType = C.I8
	I32     ElementType = C.I32
	I64     ElementType = C.I64
	U8      ElementType = C.U8
)

var elementInfo = map[ElementType]struct {
	name string
	size int
}{
	Dynamic: {"dynamic", 0},
	Boolean: {"boolean", 1},
	BF16:    {"bf16", 2},
	F16:     {"f16", 2},
	F32:     {"f32", 4},
	I8:      {"i8", 1},
	I32:     {"i32", 4},
	I64:     {"i64", 8},
	U8:      {"u8", 1},
}

// Size returns the bytes per element, or 0 for Dynamic and types this
// package does not know.
func (t ElementType) Size() int {
	return elementInfo[t].size
}

// String returns OpenVINO's short name, e.g. "f32", as used in IR files and
// the INFERENCE_PRECISION_HINT property.
func (t ElementType) String() string {
	if i, ok := elementInfo[t]; ok {
		return i.name
	}
	return fmt.Sprintf("element_type(%d)", int(t))
}

// Tensor is an OpenVINO tensor: either memory OpenVINO allocated, a view of
// memory the caller owns (NewTensorFromPtr, NewTensorFromHost), or a handle
// to an infer request's tensor.
type Tensor struct {
	p *C.ov_tensor_t
}

// NewTensor allocates a tensor of the given type and static shape in
// OpenVINO-owned memory.
func NewTensor(et ElementType, shape []int64) (*Tensor, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if _, err := byteSize(et, shape); err != nil {
		return nil, err
	}
	var t *C.ov_tensor_t
	st := C.ovr_tensor_create(C.ov_element_type_e(et), C.int64_t(len(shape)), dimsPtr(shape), &t)
	if err := statusError("ov_tensor_create", st); err != nil {
		return nil, err
	}
	return &Tensor{p: t}, nil
}

// NewTensorFromPtr wraps memory the caller owns, without copying. ptr must
// not point into Go-managed memory, and must hold at least the tensor's
// byte size (product of shape times et.Size()). The memory must outlive the
// tensor and every model, compiled model and infer request that uses it;
// closing the Tensor never frees it. Suitable memory: a HostBuffer, mmap'd
// files, or other C allocations.
func NewTensorFromPtr(et ElementType, shape []int64, ptr unsafe.Pointer) (*Tensor, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if ptr == nil {
		return nil, errors.New("ov: new tensor: nil pointer")
	}
	if _, err := byteSize(et, shape); err != nil {
		return nil, err
	}
	var t *C.ov_tensor_t
	st := C.ovr_tensor_create_from_host_ptr(C.ov_element_type_e(et), C.int64_t(len(shape)), dimsPtr(shape), ptr, &t)
	if err := statusError("ov_tensor_create_from_host_ptr", st); err != nil {
		return nil, err
	}
	return &Tensor{p: t}, nil
}

// NewTensorFromHost is NewTensorFromPtr over b's memory, after checking that
// b holds the tensor's byte size. b must outlive the tensor and everything
// that uses it.
func NewTensorFromHost(et ElementType, shape []int64, b *HostBuffer) (*Tensor, error) {
	if b == nil || b.ptr == nil {
		return nil, errors.New("ov: new tensor: nil or freed host buffer")
	}
	n, err := byteSize(et, shape)
	if err != nil {
		return nil, err
	}
	if n > b.n {
		return nil, fmt.Errorf("ov: new tensor: %s %v needs %d bytes, host buffer has %d", et, shape, n, b.n)
	}
	return NewTensorFromPtr(et, shape, b.ptr)
}

// byteSize checks a static shape and returns its size in bytes.
func byteSize(et ElementType, shape []int64) (int, error) {
	size := et.Size()
	if size == 0 {
		return 0, fmt.Errorf("ov: new tensor: unsupported element type %s", et)
	}
	n := size
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("ov: new tensor: negative dimension in shape %v", shape)
		}
		if d != 0 && n > math.MaxInt/int(d) {
			return 0, fmt.Errorf("ov: new tensor: shape %v overflows", shape)
		}
		n *= int(d)
	}
	return n, nil
}

func dimsPtr(shape []int64) *C.int64_t {
	if len(shape) == 0 {
		return nil
	}
	return (*C.int64_t)(unsafe.Pointer(&shape[0]))
}

// Data returns the tensor's first byte, or nil if the tensor is closed or
// empty.
func (t *Tensor) Data() unsafe.Pointer {
	if t == nil || t.p == nil {
		return nil
	}
	var d unsafe.Pointer
	if C.ovr_tensor_data(t.p, &d) != C.OK {
		return nil
	}
	return d
}

// Bytes views the tensor's memory without copying. The slice is valid only
// while the tensor's memory is: do not keep it past Close (or past the next
// Infer for a request's tensor). It is nil for a closed or empty tensor.
func (t *Tensor) Bytes() []byte {
	if t == nil || t.p == nil {
		return nil
	}
	var n C.size_t
	if C.ovr_tensor_get_byte_size(t.p, &n) != C.OK || n == 0 {
		return nil
	}
	d := t.Data()
	if d == nil {
		return nil
	}
	return unsafe.Slice((*byte)(d), int(n))
}

// Float32s views an F32 tensor's memory as []float32 (same validity as
// Bytes). It is nil when the tensor is not F32, closed or empty.
func (t *Tensor) Float32s() []float32 {
	if t.ElementType() != F32 {
		return nil
	}
	b := t.Bytes()
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// Int64s views an I64 tensor's memory as []int64 (same validity as Bytes).
// It is nil when the tensor is not I64, closed or empty.
func (t *Tensor) Int64s() []int64 {
	if t.ElementType() != I64 {
		return nil
	}
	b := t.Bytes()
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(&b[0])), len(b)/8)
}

// Shape returns the tensor's current shape.
func (t *Tensor) Shape() ([]int64, error) {
	if t == nil || t.p == nil {
		return nil, closedError("tensor shape")
	}
	var s C.ov_shape_t
	if err := statusError("ov_tensor_get_shape", C.ovr_tensor_get_shape(t.p, &s)); err != nil {
		return nil, err
	}
	defer C.ovr_shape_free(&s)
	out := make([]int64, int(s.rank))
	if s.rank > 0 {
		copy(out, unsafe.Slice((*int64)(unsafe.Pointer(s.dims)), int(s.rank)))
	}
	return out, nil
}

// ElementType returns the tensor's element type, or Dynamic if the tensor
// is closed.
func (t *Tensor) ElementType() ElementType {
	if t == nil || t.p == nil {
		return Dynamic
	}
	var et C.ov_element_type_e
	if C.ovr_tensor_get_element_type(t.p, &et) != C.OK {
		return Dynamic
	}
	return ElementType(et)
}

// Close frees the tensor handle. Memory the caller supplied is not freed.
func (t *Tensor) Close() {
	if t == nil || t.p == nil {
		return
	}
	C.ovr_tensor_free(t.p)
	t.p = nil
}
