package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
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
	n := capacity * shape.RowBytes()
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

// Capacity is the number of token slots the buffer holds.
func (b *KVBuffer) Capacity() int { return b.capacity }

// Bytes is the size of the buffer's address space.
func (b *KVBuffer) Bytes() int64 { return b.shape.BufferBytes(b.capacity) }

// View returns the first capacity slots of every layer: for the [C, Hkv, D]
// layout that is a valid cache of that capacity, holding the same tokens.
func (b *KVBuffer) View(capacity int) (*KV, error) {
	if capacity > b.capacity {
		return nil, fmt.Errorf("%w: view of %d slots in a buffer of %d", ErrCapacity, capacity, b.capacity)
	}
	n := capacity * b.shape.RowBytes()
	kv := &KV{Capacity: capacity}
	for l := 0; l < b.shape.Layers; l++ {
		kv.K = append(kv.K, b.maps[2*l][:n:n])
		kv.V = append(kv.V, b.maps[2*l+1][:n:n])
	}
	return kv, nil
}

// Committed counts the bytes of the buffer backed by private physical pages,
// as the kernel reports them (the Anonymous: lines of /proc/self/smaps for
// its mappings), not as computed from capacities. Pages that were only read
// map the shared zero page and do not count.
func (b *KVBuffer) Committed() (int64, error) {
	ranges := make(map[uintptr]bool, len(b.maps))
	for _, m := range b.maps {
		if len(m) > 0 {
			ranges[uintptr(unsafe.Pointer(&m[0]))] = true
		}
	}
	return anonymousBytes(ranges)
}

// anonymousBytes sums the Anonymous: field of the smaps entries starting at
// the given addresses.
func anonymousBytes(starts map[uintptr]bool) (int64, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("measure committed kv: %w", err)
	}
	defer f.Close()
	var total int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '-'); i > 0 && !strings.Contains(line[:i], ":") && !strings.HasSuffix(line, "kB") {
			addr, err := strconv.ParseUint(line[:i], 16, 64)
			in = err == nil && starts[uintptr(addr)]
			continue
		}
		if rest, ok := strings.CutPrefix(line, "Anonymous:"); in && ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse smaps %q: %w", line, err)
			}
			total += kb * 1024
		}
	}
	return total, sc.Err()
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

// CopyLive copies the first tokens slots of every layer from src to dst and
// returns the bytes copied.
func CopyLive(dst, src *KV, tokens, rowBytes int) (int64, error) {
	if tokens > dst.Capacity || tokens > src.Capacity {
		return 0, fmt.Errorf("%w: copying %d tokens between caches of %d and %d", ErrCapacity, tokens, src.Capacity, dst.Capacity)
	}
	n := tokens * rowBytes
	for l := range src.K {
		copy(dst.K[l][:n], src.K[l][:n])
		copy(dst.V[l][:n], src.V[l][:n])
	}
	return int64(2 * len(src.K) * n), nil
}
