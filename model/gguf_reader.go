package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"unsafe"
)

// The field reader of the GGUF parser: every length and count is checked
// against the bytes that remain before anything is allocated for it.

// ggufReader reads little-endian fields from b; a read past the end records
// the first error and returns zeros.
type ggufReader struct {
	b   []byte
	off int
	err error
}

func (r *ggufReader) bad(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, a...))
}

func (r *ggufReader) remaining() uint64 { return uint64(len(r.b) - r.off) }

// take returns the next n bytes, or nil (and an error) when fewer remain.
func (r *ggufReader) take(n uint64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > r.remaining() {
		r.err = r.bad("%s: needs %d bytes at offset %d, but the file ends at %d", what, n, r.off, len(r.b))
		return nil
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s
}

func (r *ggufReader) u32(what string) uint32 {
	if b := r.take(4, what); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *ggufReader) u64(what string) uint64 {
	if b := r.take(8, what); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// count bounds a count read from the file by what the rest of the file can
// hold at minSize bytes per item, before anything is allocated for it.
func (r *ggufReader) count(what string, n, minSize uint64) error {
	if r.err != nil {
		return r.err
	}
	if n > ggufMaxCount || n > r.remaining()/minSize {
		return r.bad("%s %d does not fit: the %d bytes left hold at most %d", what, n, r.remaining(), min(r.remaining()/minSize, ggufMaxCount))
	}
	return nil
}

// str reads a length-prefixed string of at most limit bytes; what names it
// in errors, with [idx] appended when idx >= 0 (formatted only on error).
func (r *ggufReader) str(what string, idx int, limit uint64) (string, error) {
	b, err := r.strBytes(what, idx, limit)
	return string(b), err
}

// strBytes is str's bytes, in place in r.b.
func (r *ggufReader) strBytes(what string, idx int, limit uint64) ([]byte, error) {
	if idx >= 0 && r.err == nil && (r.remaining() < 8 || binary.LittleEndian.Uint64(r.b[r.off:]) > min(limit, r.remaining()-8)) {
		what = fmt.Sprintf("%s[%d]", what, idx)
	}
	if r.err == nil && r.remaining() < 8 { // what+" length" is built only then
		r.take(8, what+" length")
	}
	b := r.take(8, what)
	if b == nil {
		return nil, r.err
	}
	n := binary.LittleEndian.Uint64(b)
	if n > limit {
		return nil, r.bad("%s length %d exceeds the limit %d", what, n, limit)
	}
	s := r.take(n, what)
	if s == nil {
		return nil, r.err
	}
	return s, nil
}

// strs reads n length-prefixed strings into one allocation that they all
// share (a vocabulary's 50,000-150,000 tokens: one copy, not one each).
func (r *ggufReader) strs(what string, n int) ([]string, error) {
	parts := make([][]byte, n)
	total := 0
	for i := range parts {
		b, err := r.strBytes(what, i, uint64(len(r.b)))
		if err != nil {
			return nil, err
		}
		parts[i], total = b, total+len(b)
	}
	pool := make([]byte, 0, total)
	out := make([]string, n)
	for i, b := range parts {
		start := len(pool)
		pool = append(pool, b...)
		out[i] = unsafe.String(unsafe.SliceData(pool[start:]), len(b))
	}
	return out, nil
}

func (r *ggufReader) keyValue(i uint64) (GGUFKV, error) {
	key, err := r.str(fmt.Sprintf("metadata key %d", i), -1, ggufMaxKeyLen)
	if err != nil {
		return GGUFKV{}, err
	}
	if key == "" {
		return GGUFKV{}, r.bad("metadata key %d is empty", i)
	}
	what := fmt.Sprintf("metadata key %q", key)
	kv := GGUFKV{Key: key, Type: GGUFType(r.u32(fmt.Sprintf("metadata key %q type", key)))}
	if r.err != nil {
		return kv, r.err
	}
	switch {
	case kv.Type == GGUFArray:
		kv.Elem = GGUFType(r.u32(what + " element type"))
		n := r.u64(what + " array length")
		if r.err != nil {
			return kv, r.err
		}
		if kv.Elem > GGUFFloat64 || kv.Elem == GGUFArray {
			return kv, r.bad("%s: array of %s is not supported", what, kv.Elem)
		}
		minSize := uint64(kv.Elem.size())
		if kv.Elem == GGUFString {
			minSize = 8
		}
		if err := r.count(what+": array length", n, minSize); err != nil {
			return kv, err
		}
		kv.Value, err = r.array(what, kv.Elem, int(n))
	case kv.Type > GGUFFloat64:
		return kv, r.bad("%s: unknown value type %d", what, uint32(kv.Type))
	default:
		kv.Value, err = r.scalar(what, kv.Type)
	}
	return kv, err
}

func (r *ggufReader) scalar(what string, t GGUFType) (any, error) {
	if t == GGUFString {
		return r.str(what, -1, uint64(len(r.b)))
	}
	b := r.take(uint64(t.size()), what)
	if b == nil {
		return nil, r.err
	}
	le := binary.LittleEndian
	switch t {
	case GGUFUint8:
		return b[0], nil
	case GGUFInt8:
		return int8(b[0]), nil
	case GGUFBool:
		return b[0] != 0, nil
	case GGUFUint16:
		return le.Uint16(b), nil
	case GGUFInt16:
		return int16(le.Uint16(b)), nil
	case GGUFUint32:
		return le.Uint32(b), nil
	case GGUFInt32:
		return int32(le.Uint32(b)), nil
	case GGUFFloat32:
		return math.Float32frombits(le.Uint32(b)), nil
	case GGUFUint64:
		return le.Uint64(b), nil
	case GGUFInt64:
		return int64(le.Uint64(b)), nil
	case GGUFFloat64:
		return math.Float64frombits(le.Uint64(b)), nil
	}
	return nil, r.bad("%s: unknown value type %d", what, uint32(t))
}

// array decodes n elements of type t into a typed slice; n was bounded by
// the bytes left.
func (r *ggufReader) array(what string, t GGUFType, n int) (any, error) {
	if t == GGUFString {
		return r.strs(what, n)
	}
	b := r.take(uint64(n)*uint64(t.size()), what)
	if b == nil {
		return nil, r.err
	}
	le := binary.LittleEndian
	switch t {
	case GGUFUint8:
		return slices.Clone(b), nil
	case GGUFInt8:
		return decodeArray(b, 1, func(p []byte) int8 { return int8(p[0]) }), nil
	case GGUFBool:
		return decodeArray(b, 1, func(p []byte) bool { return p[0] != 0 }), nil
	case GGUFUint16:
		return decodeArray(b, 2, le.Uint16), nil
	case GGUFInt16:
		return decodeArray(b, 2, func(p []byte) int16 { return int16(le.Uint16(p)) }), nil
	case GGUFUint32:
		return decodeArray(b, 4, le.Uint32), nil
	case GGUFInt32:
		return decodeArray(b, 4, func(p []byte) int32 { return int32(le.Uint32(p)) }), nil
	case GGUFFloat32:
		return decodeArray(b, 4, func(p []byte) float32 { return math.Float32frombits(le.Uint32(p)) }), nil
	case GGUFUint64:
		return decodeArray(b, 8, le.Uint64), nil
	case GGUFInt64:
		return decodeArray(b, 8, func(p []byte) int64 { return int64(le.Uint64(p)) }), nil
	case GGUFFloat64:
		return decodeArray(b, 8, func(p []byte) float64 { return math.Float64frombits(le.Uint64(p)) }), nil
	}
	return nil, r.bad("%s: unknown element type %d", what, uint32(t))
}

func decodeArray[T any](b []byte, size int, f func([]byte) T) []T {
	out := make([]T, len(b)/size)
	for i := range out {
		out[i] = f(b[i*size:])
	}
	return out
}

func (r *ggufReader) tensorInfo(i uint64) (GGUFTensorInfo, error) {
	name, err := r.str(fmt.Sprintf("tensor %d name", i), -1, ggufMaxNameLen)
	if err != nil {
		return GGUFTensorInfo{}, err
	}
	t := GGUFTensorInfo{Name: name}
	if name == "" {
		return t, r.bad("tensor %d has an empty name", i)
	}
	nd := r.u32(fmt.Sprintf("tensor %q n_dims", name))
	if r.err != nil {
		return t, r.err
	}
	if nd < 1 || nd > ggufMaxDims {
		return t, r.bad("tensor %q: n_dims %d (want 1 to %d)", name, nd, ggufMaxDims)
	}
	t.Dims = make([]int64, nd)
	elems := uint64(1)
	overflow := false
	for j := range t.Dims {
		d := r.u64(fmt.Sprintf("tensor %q dimension %d", name, j))
		if d > math.MaxInt64 {
			return t, r.bad("tensor %q: dimension %d is %d", name, j, d)
		}
		t.Dims[j] = int64(d)
		hi, lo := bits.Mul64(elems, d)
		overflow = overflow || hi != 0
		elems = lo
	}
	t.Type = GGMLType(r.u32(fmt.Sprintf("tensor %q type", name)))
	off := r.u64(fmt.Sprintf("tensor %q offset", name))
	if r.err != nil {
		return t, r.err
	}
	info, ok := ggmlTypes[t.Type]
	if !ok {
		return t, r.bad("tensor %q: unknown ggml type %d", name, uint32(t.Type))
	}
	if t.Dims[0]%info.blockElems != 0 {
		return t, r.bad("tensor %q: rows of %d elements are not whole %s blocks of %d", name, t.Dims[0], info.name, info.blockElems)
	}
	hi, size := bits.Mul64(elems/uint64(info.blockElems), uint64(info.bytes))
	if overflow || hi != 0 || size > uint64(len(r.b)) {
		return t, r.bad("tensor %q: dims %v of %s need more bytes than the %d-byte file holds", name, t.Dims, info.name, len(r.b))
	}
	if off > uint64(len(r.b)) {
		return t, r.bad("tensor %q: offset %d is past the end of the %d-byte file", name, off, len(r.b))
	}
	t.Offset, t.Size = int64(off), int64(size)
	return t, nil
}
