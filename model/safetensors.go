package model

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"syscall"
	"unicode/utf8"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

// ErrCorrupt is wrapped by every error that reports a malformed checkpoint
// file: a bad safetensors header, bad offsets or a bad shard index.
var ErrCorrupt = errors.New("corrupt checkpoint")

// MaxHeaderLen is the largest safetensors JSON header accepted, as in the
// reference implementation.
const MaxHeaderLen = 100_000_000

// DType is a safetensors element type as the header spells it ("F32", "BF16").
type DType string

// The element types a header may name. Only DTypeF32, DTypeF16 and DTypeBF16
// are accepted as weights; the rest are parsed so a header validates.
const (
	DTypeF64    DType = "F64"
	DTypeF32    DType = "F32"
	DTypeF16    DType = "F16"
	DTypeBF16   DType = "BF16"
	DTypeI64    DType = "I64"
	DTypeI32    DType = "I32"
	DTypeI16    DType = "I16"
	DTypeI8     DType = "I8"
	DTypeU8     DType = "U8"
	DTypeBool   DType = "BOOL"
	DTypeF8E4M3 DType = "F8_E4M3"
	DTypeF8E5M2 DType = "F8_E5M2"
)

// Size is the number of bytes per element; 0 for an unknown type.
func (d DType) Size() int {
	switch d {
	case DTypeF64, DTypeI64:
		return 8
	case DTypeF32, DTypeI32:
		return 4
	case DTypeF16, DTypeBF16, DTypeI16:
		return 2
	case DTypeI8, DTypeU8, DTypeBool, DTypeF8E4M3, DTypeF8E5M2:
		return 1
	}
	return 0
}

// IsFloatWeight reports whether d is a weight type this package runs.
func (d DType) IsFloatWeight() bool {
	return d == DTypeF32 || d == DTypeF16 || d == DTypeBF16
}

// ParseDType accepts the header spelling or the config.json / lower-case
// spelling ("float32", "f16", "bfloat16").
func ParseDType(s string) (DType, error) {
	switch s {
	case "F32", "f32", "float32", "fp32":
		return DTypeF32, nil
	case "F16", "f16", "float16", "fp16":
		return DTypeF16, nil
	case "BF16", "bf16", "bfloat16":
		return DTypeBF16, nil
	}
	return "", fmt.Errorf("unsupported weight dtype %q (want f32, f16 or bf16)", s)
}

// TorchName is the config.json torch_dtype spelling ("bfloat16").
func (d DType) TorchName() string {
	switch d {
	case DTypeF32:
		return "float32"
	case DTypeF16:
		return "float16"
	case DTypeBF16:
		return "bfloat16"
	}
	return string(d)
}

// Tensor is one named array. Data holds the raw little-endian bytes; for a
// loaded checkpoint it is a read-only slice of the file mapping and is valid
// until the file is closed.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	Data  []byte
	// RowOrder, when set, says which row of Data holds each of the Shape[0]
	// rows of the tensor: row i is Data's row RowOrder[i]. GGUF llama
	// checkpoints use it to undo llama.cpp's q/k row permutation while Data
	// stays a slice of the file mapping.
	RowOrder []int
}

// NumElements is the product of the shape (1 for a scalar).
func (t *Tensor) NumElements() int64 { return numElements(t.Shape) }

func numElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// Float32s decodes a float or GGUF block tensor into a new slice, rows in
// tensor order (RowOrder applied).
func (t *Tensor) Float32s() ([]float32, error) {
	be, bb := t.DType.block()
	if be == 0 {
		return nil, fmt.Errorf("tensor %q: cannot decode dtype %s as float", t.Name, t.DType)
	}
	n := t.NumElements()
	if n%int64(be) != 0 || int64(len(t.Data)) != n/int64(be)*int64(bb) {
		return nil, fmt.Errorf("tensor %q: %d bytes for shape %v of %s", t.Name, len(t.Data), t.Shape, t.DType)
	}
	out := make([]float32, n)
	rows := t.rows()
	per := int(n) / rows
	for i := range rows {
		dequantize(t.DType, t.row(i), out[i*per:(i+1)*per])
	}
	return out, nil
}

// rows is the number of rows Row serves: Shape[0] when RowOrder is set,
// else 1 (the whole tensor).
func (t *Tensor) rows() int {
	if t.RowOrder == nil || len(t.Shape) == 0 {
		return 1
	}
	return int(t.Shape[0])
}

// row is the bytes of row i < rows() of the tensor, RowOrder applied.
func (t *Tensor) row(i int) []byte {
	if t.RowOrder == nil {
		return t.Data
	}
	size := len(t.Data) / int(t.Shape[0])
	r := t.RowOrder[i]
	return t.Data[r*size : (r+1)*size]
}

// TensorInfo is one header entry; Begin and End are byte offsets relative to
// the start of the data section.
type TensorInfo struct {
	DType      DType
	Shape      []int64
	Begin, End int64
}

// ParseSafetensorsHeader validates a safetensors JSON header against a data
// section of dataLen bytes, as the reference implementation does: known
// dtypes, non-negative dims, sizes that match shape times dtype, and entries
// that tile the data section exactly, with no gap, overlap or trailing bytes.
// Every error wraps ErrCorrupt and names the offending tensor.
func ParseSafetensorsHeader(header []byte, dataLen int64) (map[string]TensorInfo, map[string]string, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, a...))
	}
	if dataLen < 0 {
		return nil, nil, bad("negative data section length %d", dataLen)
	}
	if len(header) > MaxHeaderLen {
		return nil, nil, bad("header length %d exceeds limit %d", len(header), MaxHeaderLen)
	}
	if !utf8.Valid(header) {
		return nil, nil, bad("header is not valid UTF-8")
	}
	if len(header) == 0 || header[0] != '{' {
		return nil, nil, bad("header does not start with '{'")
	}
	dec := json.NewDecoder(bytes.NewReader(header))
	if _, err := dec.Token(); err != nil {
		return nil, nil, bad("header is not JSON: %v", err)
	}
	infos := map[string]TensorInfo{}
	var meta map[string]string
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, bad("header is not JSON: %v", err)
		}
		name := tok.(string) // object keys are always strings
		if seen[name] {
			return nil, nil, bad("tensor %q appears twice in the header", name)
		}
		seen[name] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, bad("header is not JSON: %v", err)
		}
		if name == "__metadata__" {
			if err := json.Unmarshal(raw, &meta); err != nil {
				return nil, nil, bad("__metadata__ is not a map of strings to strings")
			}
			continue
		}
		info, err := parseHeaderEntry(name, raw)
		if err != nil {
			return nil, nil, err
		}
		infos[name] = info
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, bad("header is not JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, bad("header has data after the JSON object")
	}
	if err := checkLayout(infos, dataLen); err != nil {
		return nil, nil, err
	}
	if meta == nil {
		meta = map[string]string{}
	}
	return infos, meta, nil
}

func parseHeaderEntry(name string, raw json.RawMessage) (TensorInfo, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: tensor %q: %s", ErrCorrupt, name, fmt.Sprintf(format, a...))
	}
	if raw[0] != '{' {
		return TensorInfo{}, bad("header entry is not a JSON object")
	}
	// Keys match exactly, as in the reference (encoding/json folds case),
	// and each at most once (encoding/json keeps the last silently).
	fields, err := objectFields(raw)
	if err != nil {
		return TensorInfo{}, bad("bad header entry: %v", err)
	}
	var (
		dtype         string
		shape, offset []int64
	)
	for _, f := range []struct {
		key string
		dst any
	}{{"dtype", &dtype}, {"shape", &shape}, {"data_offsets", &offset}} {
		v, ok := fields[f.key]
		if !ok || string(v) == "null" {
			return TensorInfo{}, bad("no %s", f.key)
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			var c bytes.Buffer
			json.Compact(&c, v)
			return TensorInfo{}, bad("bad %s %s", f.key, c.Bytes())
		}
	}
	if len(offset) != 2 {
		return TensorInfo{}, bad("data_offsets must be [begin, end]")
	}
	dt := DType(dtype)
	if dt.Size() == 0 {
		return TensorInfo{}, bad("unknown dtype %q", dtype)
	}
	numel := uint64(1)
	overflow := false
	for _, d := range shape {
		if d < 0 {
			return TensorInfo{}, bad("negative dimension in shape %v", shape)
		}
		hi, lo := bits.Mul64(numel, uint64(d))
		overflow = overflow || hi != 0
		numel = lo
	}
	hi, nbytes := bits.Mul64(numel, uint64(dt.Size()))
	if overflow || hi != 0 || nbytes > math.MaxInt64 {
		return TensorInfo{}, bad("shape %v of %s overflows", shape, dt)
	}
	begin, end := offset[0], offset[1]
	if begin < 0 || end < begin {
		return TensorInfo{}, bad("data_offsets [%d %d] are not 0 <= begin <= end", begin, end)
	}
	if uint64(end-begin) != nbytes {
		return TensorInfo{}, bad("data_offsets [%d %d] span %d bytes, want %d for shape %v of %s",
			begin, end, end-begin, nbytes, shape, dt)
	}
	return TensorInfo{DType: dt, Shape: shape, Begin: begin, End: end}, nil
}

// objectFields splits a JSON object into its members, refusing a key that
// appears twice.
func objectFields(raw []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string) // object keys are always strings
		if _, dup := fields[key]; dup {
			return nil, fmt.Errorf("key %q appears twice", key)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		fields[key] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	return fields, nil
}

// checkLayout requires the entries, sorted by offset, to tile [0, dataLen).
func checkLayout(infos map[string]TensorInfo, dataLen int64) error {
	names := make([]string, 0, len(infos))
	for n := range infos {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		x, y := infos[a], infos[b]
		return cmp.Or(cmp.Compare(x.Begin, y.Begin), cmp.Compare(x.End, y.End), cmp.Compare(a, b))
	})
	var pos int64
	last := ""
	for _, n := range names {
		in := infos[n]
		switch {
		case in.Begin > pos:
			return fmt.Errorf("%w: tensor %q: gap of %d bytes before data_offsets [%d %d]", ErrCorrupt, n, in.Begin-pos, in.Begin, in.End)
		case in.Begin < pos:
			return fmt.Errorf("%w: tensor %q: data_offsets [%d %d] overlap the previous tensor, which ends at %d", ErrCorrupt, n, in.Begin, in.End, pos)
		}
		pos, last = in.End, n
	}
	switch {
	case pos < dataLen && last == "":
		return fmt.Errorf("%w: no tensors, but the data section is %d bytes", ErrCorrupt, dataLen)
	case pos < dataLen:
		return fmt.Errorf("%w: %d trailing bytes after the last tensor %q, which ends at %d of the %d-byte data section", ErrCorrupt, dataLen-pos, last, pos, dataLen)
	case pos > dataLen:
		return fmt.Errorf("%w: tensor %q ends at %d, past the %d-byte data section", ErrCorrupt, last, pos, dataLen)
	}
	return nil
}

// SafetensorsFile is an open, validated safetensors file whose data section
// is mapped read-only. Tensor data is valid until Close.
type SafetensorsFile struct {
	Path     string
	Tensors  map[string]*Tensor
	Metadata map[string]string

	mapping []byte // whole-file mapping; nil when the data section is empty
}

// OpenSafetensors validates path's header and maps its data read-only.
// Every validation error wraps ErrCorrupt and names the file.
func OpenSafetensors(path string) (*SafetensorsFile, error) {
	f, err := safefile.Open(path) // a FIFO or device is refused, never waited on
	if err != nil {
		return nil, fmt.Errorf("open safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open safetensors: %w", err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%s: %w: %s", path, ErrCorrupt, fmt.Sprintf(format, a...))
	}
	size := st.Size()
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	if size < 8 {
		return nil, bad("file is %d bytes, too short for the 8-byte header length", size)
	}
	var lenBuf [8]byte
	if _, err := f.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderLen {
		return nil, bad("header length %d exceeds limit %d", n, MaxHeaderLen)
	}
	if n > uint64(size-8) {
		return nil, bad("header length %d exceeds file size %d", n, size)
	}
	header := make([]byte, n)
	if _, err := f.ReadAt(header, 8); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	dataStart := 8 + int64(n)
	infos, meta, err := ParseSafetensorsHeader(header, size-dataStart)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sf := &SafetensorsFile{Path: path, Tensors: make(map[string]*Tensor, len(infos)), Metadata: meta}
	var data []byte
	if size > dataStart {
		if size > math.MaxInt {
			return nil, fmt.Errorf("%s: file of %d bytes is too large to map", path, size)
		}
		sf.mapping, err = syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
		if err != nil {
			return nil, fmt.Errorf("%s: mmap: %w", path, err)
		}
		data = sf.mapping[dataStart:]
	}
	for name, in := range infos {
		sf.Tensors[name] = &Tensor{Name: name, DType: in.DType, Shape: in.Shape, Data: data[in.Begin:in.End:in.End]}
	}
	return sf, nil
}

// Close unmaps the file; tensor data must not be used afterwards.
func (s *SafetensorsFile) Close() error {
	if s == nil || s.mapping == nil {
		return nil
	}
	m := s.mapping
	s.mapping = nil
	if err := syscall.Munmap(m); err != nil {
		return fmt.Errorf("munmap %s: %w", s.Path, err)
	}
	return nil
}

// Names lists the tensor names in sorted order.
func (s *SafetensorsFile) Names() []string {
	names := make([]string, 0, len(s.Tensors))
	for n := range s.Tensors {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Float32ToBF16 rounds f to bfloat16, to nearest with ties to even; NaN stays
// NaN.
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep the sign, force a quiet payload
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// BF16ToFloat32 widens a bfloat16 exactly.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToF16 rounds f to IEEE binary16, to nearest with ties to even,
// including subnormal results; out-of-range values become infinities.
func Float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 | uint16(man>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // biased binary16 exponent
	switch {
	case e >= 0x1f:
		return sign | 0x7c00
	case e <= 0: // subnormal binary16: value = m * 2^-24
		if e < -10 {
			return sign
		}
		m := man | 0x800000
		shift := uint(14 - e)
		h := m >> shift
		rem, half := m&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > half || rem == half && h&1 == 1 {
			h++ // may carry into the smallest normal, which is correct
		}
		return sign | uint16(h)
	}
	h := sign | uint16(e)<<10 | uint16(man>>13)
	if rem := man & 0x1fff; rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
		h++ // may carry into the exponent, up to infinity, which is correct
	}
	return h
}

// F16ToFloat32 widens an IEEE binary16 exactly.
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		v := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}
