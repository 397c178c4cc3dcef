package ov

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// HostAlign is the alignment in bytes of every HostBuffer.
const HostAlign = 64

// HostBuffer is C-allocated memory that Go's collector neither moves nor
// frees: safe to hand to OpenVINO as weights, inputs or KV cache. Free it
// explicitly once nothing uses it any more. Not safe for concurrent Free.
type HostBuffer struct {
	base unsafe.Pointer // what malloc/calloc returned, for free
	ptr  unsafe.Pointer // base rounded up to HostAlign
	n    int
}

// AllocHost allocates n zeroed bytes aligned to HostAlign. Large buffers
// come from fresh mmap'd pages, so zeroing costs nothing up front.
func AllocHost(n int) (*HostBuffer, error) {
	return allocHost(n, true)
}

// AllocHostUninit is AllocHost without zeroing, for buffers the caller
// fills completely before use.
func AllocHostUninit(n int) (*HostBuffer, error) {
	return allocHost(n, false)
}

func allocHost(n int, zero bool) (*HostBuffer, error) {
	if n < 0 || n > int(^uint(0)>>1)-HostAlign {
		return nil, fmt.Errorf("ov: alloc host: invalid size %d", n)
	}
	z := C.int(0)
	if zero {
		z = 1
	}
	var base unsafe.Pointer
	p := C.ovr_host_alloc(C.size_t(n), z, &base)
	if p == nil {
		return nil, fmt.Errorf("ov: alloc host: out of memory allocating %d bytes", n)
	}
	return &HostBuffer{base: base, ptr: p, n: n}, nil
}

// Bytes views the whole buffer as a slice (no copy); nil after Free. The
// slice must not be used after Free.
func (b *HostBuffer) Bytes() []byte {
	if b == nil || b.ptr == nil || b.n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(b.ptr), b.n)
}

// Ptr returns the aligned start of the buffer; nil after Free.
func (b *HostBuffer) Ptr() unsafe.Pointer {
	if b == nil {
		return nil
	}
	return b.ptr
}

// Len returns the buffer's size in bytes; 0 after Free.
func (b *HostBuffer) Len() int {
	if b == nil {
		return 0
	}
	return b.n
}

// Free releases the memory. Every tensor, model and request using it must be
// closed first. Free on nil or twice is a no-op.
func (b *HostBuffer) Free() {
	if b == nil || b.base == nil {
		return
	}
	C.ovr_host_free(b.base)
	b.base, b.ptr, b.n = nil, nil, 0
}
