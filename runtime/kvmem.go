package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// KVBuffer owns the memory of a KV cache: one anonymous mapping per layer for
// K and one for V, each sized for the buffer's capacity. Mappings are outside
// Go's heap, so OpenVINO tensors can point into them without copying.
//
// A buffer allocated with commit=true is written with zeros up front, the way
// a device allocation is reserved in full. One allocated with commit=false
// only reserves address space: pages become resident when tokens are
// written, which is what growth without copy relies on.
type KVBuffer struct {
	shape    KVShape
	capacity int
	maps     [][]byte // 2*layers mappings: K0, V0, K1, V1, ...
}

// mappedBytes counts KV address space currently mapped, so tests can check
// that every run releases its reservation.
var mappedBytes atomic.Int64

// MappedKVBytes is the KV address space currently mapped by this process.
func MappedKVBytes() int64 { return mappedBytes.Load() }

// AllocKV maps a cache of the given capacity.
func AllocKV(shape KVShape, capacity int, commit bool) (*KVBuffer, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("kv capacity must be positive, got %d", capacity)
	}
	n := shape.LayerBytes(capacity)
	b := &KVBuffer{shape: shape, capacity: capacity}
	for i := 0; i < 2*shape.Layers; i++ {
		m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("map %d bytes of kv cache: %w", n, err), b.Free())
		}
		mappedBytes.Add(int64(len(m)))
		if commit {
			clear(m)
		}
		b.maps = append(b.maps, m)
	}
	return b, nil
}

// AllocFullView maps a committed cache of the given capacity and returns it
// with its full-capacity view: the single-graph case (generate, contention).
func AllocFullView(shape KVShape, capacity int) (*KVBuffer, *KV, error) {
	buf, err := AllocKV(shape, capacity, true)
	if err != nil {
		return nil, nil, err
	}
	kv, err := buf.View(capacity)
	if err != nil {
		return nil, nil, errors.Join(err, buf.Free())
	}
	return buf, kv, nil
}

// Capacity is the number of token slots the buffer holds.
func (b *KVBuffer) Capacity() int { return b.capacity }

// Bytes is the size of the buffer's address space.
func (b *KVBuffer) Bytes() int64 { return b.shape.BufferBytes(b.capacity) }

// View returns the first capacity slots of every layer: for the [C, Hkv, D]
// layout (or its blocks) that is a valid cache of that capacity, holding
// the same tokens.
func (b *KVBuffer) View(capacity int) (*KV, error) {
	if capacity > b.capacity {
		return nil, fmt.Errorf("%w: view of %d slots in a buffer of %d", ErrCapacity, capacity, b.capacity)
	}
	n := b.shape.LayerBytes(capacity)
	kv := &KV{Capacity: capacity}
	for l := 0; l < b.shape.Layers; l++ {
		kv.K = append(kv.K, b.maps[2*l][:n:n])
		kv.V = append(kv.V, b.maps[2*l+1][:n:n])
	}
	return kv, nil
}

// Committed counts the bytes of the buffer backed by private physical pages,
// as the kernel reports them, not as computed from capacities: a page counts
// when /proc/self/pagemap shows it present and exclusively mapped. Pages that
// were only read map the shared zero page and do not count. Reading a few
// pagemap entries per mapping keeps this cheap enough to call every step.
func (b *KVBuffer) Committed() (int64, error) {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return 0, fmt.Errorf("measure committed kv: %w", err)
	}
	defer f.Close()
	page := os.Getpagesize()
	var total int64
	var entries []byte
	for _, m := range b.maps {
		if len(m) == 0 {
			continue
		}
		n := (len(m) + page - 1) / page
		if cap(entries) < 8*n {
			entries = make([]byte, 8*n)
		}
		entries = entries[:8*n]
		off := int64(uintptr(unsafe.Pointer(&m[0]))/uintptr(page)) * 8
		if _, err := f.ReadAt(entries, off); err != nil {
			return 0, fmt.Errorf("read pagemap: %w", err)
		}
		for i := 0; i < n; i++ {
			e := binary.LittleEndian.Uint64(entries[8*i:])
			if e&(1<<63) != 0 && e&(1<<56) != 0 { // present, exclusively mapped
				total += int64(page)
			}
		}
	}
	return total, nil
}

// Free unmaps the buffer; views of it must no longer be used.
func (b *KVBuffer) Free() error {
	if b == nil {
		return nil
	}
	var errs []error
	for _, m := range b.maps {
		if err := syscall.Munmap(m); err != nil {
			errs = append(errs, fmt.Errorf("unmap kv cache: %w", err))
			continue
		}
		mappedBytes.Add(-int64(len(m)))
	}
	b.maps = nil
	return errors.Join(errs...)
}

// CopyLive copies the first tokens slots of every layer (whole blocks of a
// paged layout) from src to dst, both of shape, and returns the bytes
// copied.
func CopyLive(dst, src *KV, tokens int, shape KVShape) (int64, error) {
	if tokens > dst.Capacity || tokens > src.Capacity {
		return 0, fmt.Errorf("%w: copying %d tokens between caches of %d and %d", ErrCapacity, tokens, src.Capacity, dst.Capacity)
	}
	n := shape.LayerBytes(tokens)
	for l := range src.K {
		copy(dst.K[l][:n], src.K[l][:n])
		copy(dst.V[l][:n], src.V[l][:n])
	}
	return int64(2 * len(src.K) * n), nil
}
