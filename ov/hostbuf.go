package ov

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// HostAlign is the alignment in bytes of every HostBuffer.
const HostAlign = 64

// HostBuffer is C-allocated memory that Go's collector neither moves nor
// frees: safe to hand to OpenVINO as weights, inputs or KV cache. Free it
// explicitly once nothing uses it any more. Not safe for concurrent Free.
type HostBuffer struct {
	base   unsafe.Pointer // what malloc/calloc returned, for free
	ptr    unsafe.Pointer // base rounded up to HostAlign
	n      int
	files  []HostFile // MapHost: regions mapped from files (and Spill's)
	mapped bool       // MapHost: base is an mmap
}

// HostFile is a file mapped read-only into a MapHost buffer.
type HostFile struct {
	Path   string
	Offset int64 // where in the buffer; a multiple of the page size
	Size   int64 // bytes of the file mapped, from its start
}

// MapHost allocates n zeroed, writable bytes like AllocHost, except that
// each of files is mapped read-only at its offset (shared with the page
// cache, no copy): weights read in place from a checkpoint file. Writing
// into a file's region faults. ReleaseFiles drops the files' pages from
// the process's resident memory; Free unmaps everything.
func MapHost(n int, files []HostFile) (*HostBuffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("ov: map host: invalid size %d", n)
	}
	page := int64(os.Getpagesize())
	for _, f := range files {
		if f.Offset%page != 0 || f.Offset < 0 || f.Size <= 0 || f.Offset+f.Size > int64(n) {
			return nil, fmt.Errorf("ov: map host: %s at [%d, %d) does not fit a %d-byte buffer on a page boundary", f.Path, f.Offset, f.Offset+f.Size, n)
		}
	}
	base, err := unix.MmapPtr(-1, 0, nil, uintptr(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("ov: map host: reserving %d bytes: %w", n, err)
	}
	b := &HostBuffer{base: base, ptr: base, n: n, files: append([]HostFile(nil), files...), mapped: true}
	for _, f := range files {
		if err := mapFile(unsafe.Add(base, f.Offset), f); err != nil {
			b.Free()
			return nil, err
		}
	}
	return b, nil
}

// mapFile maps the first f.Size bytes of f.Path read-only at addr.
func mapFile(addr unsafe.Pointer, f HostFile) error {
	fd, err := os.Open(f.Path)
	if err != nil {
		return fmt.Errorf("ov: map host: %w", err)
	}
	defer fd.Close()
	if st, err := fd.Stat(); err != nil || st.Size() < f.Size {
		return fmt.Errorf("ov: map host: %s is no longer %d bytes long (%v)", f.Path, f.Size, err)
	}
	if _, err := unix.MmapPtr(int(fd.Fd()), 0, addr, uintptr(f.Size), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
		return fmt.Errorf("ov: map host: mapping %s: %w", f.Path, err)
	}
	return nil
}

// ReleaseFiles drops the pages of a MapHost buffer's files from this
// process's resident memory (madvise MADV_DONTNEED). The mappings stay:
// a later read faults the page back in from the page cache or the file.
// A no-op for other buffers.
func (b *HostBuffer) ReleaseFiles() error {
	if b == nil {
		return nil
	}
	var errs []error
	for _, f := range b.files {
		// Spill's last region may end past n, in the buffer's last page.
		region := unsafe.Slice((*byte)(unsafe.Add(b.base, f.Offset)), f.Size)
		if err := unix.Madvise(region, unix.MADV_DONTNEED); err != nil {
			errs = append(errs, fmt.Errorf("ov: release the pages of %s: %w", f.Path, err))
		}
	}
	return errors.Join(errs...)
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
	if b.mapped {
		unix.MunmapPtr(b.base, uintptr(b.n)) // the file mappings lie inside
	} else {
		C.ovr_host_free(b.base)
	}
	b.base, b.ptr, b.n, b.files, b.mapped = nil, nil, 0, nil, false
}

// TrimHeap gives the C heap's free pages back to the system (glibc
// malloc_trim): a compile's transformations free much of what they
// allocated, in arenas glibc would otherwise keep resident for reuse.
// Costs a walk over the arenas, a few milliseconds.
func TrimHeap() { C.ovr_malloc_trim() }
