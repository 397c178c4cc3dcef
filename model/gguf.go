package model

import (
	"fmt"
	"math"
	"math/bits"
	"os"
	"slices"
	"syscall"
)

// This file reads GGUF files (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md):
// magic "GGUF", version, tensor and metadata counts, typed key/value
// metadata, tensor infos, then the tensor data section at the next multiple
// of general.alignment.
//
// It is a parser of its own rather than github.com/gpustack/gguf-parser-go
// (v0.28.2), which was tried and does not fit a loader of untrusted files:
//   - it trims white space from every string it reads (bytes.TrimSpace), so
//     metadata comes back altered: a chat template "  {{ x }}\n" reads as
//     "{{ x }}", and vocabularies with white-space tokens ("\n", "  ") lose
//     them;
//   - crafted headers panic inside ParseGGUFFile: general.alignment = 0
//     divides by zero, a non-uint32 alignment panics in ValueUint32, and
//     dimensions whose byte size overflows panic in mulU64;
//   - it opens the path itself (and guesses split shards from the name), so
//     it cannot parse the read-only mapping whose bytes OpenVINO is given.
// Validation here follows llama.cpp's gguf.cpp and the safetensors loader:
// every count, length and dimension is checked against the bytes that remain
// before anything is allocated, and the first bad field is named in an error
// wrapping ErrCorrupt.

const ggufMagic = "GGUF"

// Limits of the GGUF reader.
const (
	ggufMaxDims       = 4       // GGML_MAX_DIMS
	ggufMaxNameLen    = 63      // GGML_MAX_NAME - 1
	ggufMaxKeyLen     = 1 << 16 // far above any real key
	ggufMaxCount      = 1 << 24 // tensors, keys or array elements
	ggufDefaultAlign  = 32
	ggufHeaderMinSize = 4 + 4 + 8 + 8
)

// GGUFType is the type of a metadata value.
type GGUFType uint32

// Metadata value types, numbered as in the file.
const (
	GGUFUint8 GGUFType = iota
	GGUFInt8
	GGUFUint16
	GGUFInt16
	GGUFUint32
	GGUFInt32
	GGUFFloat32
	GGUFBool
	GGUFString
	GGUFArray
	GGUFUint64
	GGUFInt64
	GGUFFloat64
)

var ggufTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t GGUFType) String() string {
	if int(t) < len(ggufTypeNames) {
		return ggufTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// size is the encoded size of a fixed-size value; 0 for strings and arrays.
func (t GGUFType) size() int {
	switch t {
	case GGUFUint8, GGUFInt8, GGUFBool:
		return 1
	case GGUFUint16, GGUFInt16:
		return 2
	case GGUFUint32, GGUFInt32, GGUFFloat32:
		return 4
	case GGUFUint64, GGUFInt64, GGUFFloat64:
		return 8
	}
	return 0
}

// GGUFKV is one metadata entry. Value holds the Go type matching Type
// (uint8 ... float64, bool, string) or, for an array, a slice of the element
// type ([]string, []int32, ...) with Elem naming it.
type GGUFKV struct {
	Key   string
	Type  GGUFType
	Elem  GGUFType // element type of an array
	Value any
}

// GGMLType is a tensor type id (ggml's enum ggml_type).
type GGMLType uint32

// ggmlTypes are the block layouts of every tensor type GGUF files use (from
// gguf-py's GGML_QUANT_SIZES); the loader runs the ones with a DType.
var ggmlTypes = map[GGMLType]struct {
	name              string
	blockElems, bytes int64
	dtype             DType
}{
	0: {"F32", 1, 4, DTypeF32}, 1: {"F16", 1, 2, DTypeF16}, 2: {"Q4_0", 32, 18, DTypeQ4_0},
	3: {"Q4_1", 32, 20, DTypeQ4_1}, 6: {"Q5_0", 32, 22, ""}, 7: {"Q5_1", 32, 24, ""},
	8: {"Q8_0", 32, 34, DTypeQ8_0}, 9: {"Q8_1", 32, 40, ""}, 10: {"Q2_K", 256, 84, ""},
	11: {"Q3_K", 256, 110, ""}, 12: {"Q4_K", 256, 144, DTypeQ4_K}, 13: {"Q5_K", 256, 176, ""},
	14: {"Q6_K", 256, 210, DTypeQ6_K}, 15: {"Q8_K", 256, 292, ""}, 16: {"IQ2_XXS", 256, 66, ""},
	17: {"IQ2_XS", 256, 74, ""}, 18: {"IQ3_XXS", 256, 98, ""}, 19: {"IQ1_S", 256, 50, ""},
	20: {"IQ4_NL", 32, 18, ""}, 21: {"IQ3_S", 256, 110, ""}, 22: {"IQ2_S", 256, 82, ""},
	23: {"IQ4_XS", 256, 136, ""}, 24: {"I8", 1, 1, ""}, 25: {"I16", 1, 2, ""},
	26: {"I32", 1, 4, ""}, 27: {"I64", 1, 8, ""}, 28: {"F64", 1, 8, ""},
	29: {"IQ1_M", 256, 56, ""}, 30: {"BF16", 1, 2, DTypeBF16}, 34: {"TQ1_0", 256, 54, ""},
	35: {"TQ2_0", 256, 66, ""}, 39: {"MXFP4", 32, 17, ""},
}

func (t GGMLType) String() string {
	if info, ok := ggmlTypes[t]; ok {
		return info.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// DType is the weight type of t, or "" when this package does not run it.
func (t GGMLType) DType() DType { return ggmlTypes[t].dtype }

// GGUFTensorInfo describes one tensor. Dims are as stored, fastest-varying
// first: a [rows, cols] matrix is listed [cols, rows].
type GGUFTensorInfo struct {
	Name   string
	Dims   []int64
	Type   GGMLType
	Offset int64 // from the start of the data section
	Size   int64 // bytes
}

// GGUFFile is a parsed, validated GGUF file. Metadata and tensor infos are
// copied out of the file; tensor data is read through the read-only
// mapping, valid until Close.
type GGUFFile struct {
	Path       string
	Version    uint32
	Alignment  int64
	DataOffset int64 // file offset of the tensor data section
	KVs        []GGUFKV
	Tensors    []GGUFTensorInfo

	kv      map[string]int
	data    []byte // the data section
	mapping []byte
}

// OpenGGUF maps path read-only and parses and validates its header. Every
// validation error wraps ErrCorrupt (or ErrUnsupported for a valid file of a
// kind this reader does not take) and names the file.
func OpenGGUF(path string) (*GGUFFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open gguf: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open gguf: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	size := st.Size()
	if size < ggufHeaderMinSize {
		return nil, fmt.Errorf("%s: %w: file is %d bytes, too short for the %d-byte GGUF header", path, ErrCorrupt, size, ggufHeaderMinSize)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("%s: file of %d bytes is too large to map", path, size)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%s: mmap: %w", path, err)
	}
	g, err := ParseGGUF(m)
	if err != nil {
		syscall.Munmap(m)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	g.Path, g.mapping = path, m
	return g, nil
}

// Close unmaps the file; tensor data must not be used afterwards.
func (g *GGUFFile) Close() error {
	if g == nil || g.mapping == nil {
		return nil
	}
	m := g.mapping
	g.mapping, g.data = nil, nil
	if err := syscall.Munmap(m); err != nil {
		return fmt.Errorf("munmap %s: %w", g.Path, err)
	}
	return nil
}

// TensorData is the bytes of a tensor of g.Tensors, a slice of the mapping.
func (g *GGUFFile) TensorData(t *GGUFTensorInfo) []byte {
	return g.data[t.Offset : t.Offset+t.Size : t.Offset+t.Size]
}

// ParseGGUF parses and validates a whole GGUF file held in b: header,
// metadata and tensor infos, and the placement of every tensor inside the
// data section. The returned file's tensor data aliases b.
func ParseGGUF(b []byte) (*GGUFFile, error) {
	r := &ggufReader{b: b}
	if len(b) < ggufHeaderMinSize {
		return nil, r.bad("file is %d bytes, too short for the %d-byte GGUF header", len(b), ggufHeaderMinSize)
	}
	if string(b[:4]) != ggufMagic {
		return nil, r.bad("bad magic %q, want %q", b[:4], ggufMagic)
	}
	r.off = 4
	g := &GGUFFile{Alignment: ggufDefaultAlign, kv: map[string]int{}}
	g.Version = r.u32("version")
	switch {
	case g.Version == 2 || g.Version == 3:
	case g.Version == 0:
		return nil, r.bad("version 0")
	case g.Version == 1:
		return nil, fmt.Errorf("%w: GGUF version 1 (convert it with a current llama.cpp)", ErrUnsupported)
	case bits.ReverseBytes32(g.Version) <= 3:
		return nil, fmt.Errorf("%w: big-endian GGUF", ErrUnsupported)
	default:
		return nil, r.bad("version %d (supported: 2, 3)", g.Version)
	}
	nTensors, nKV := r.u64("tensor_count"), r.u64("metadata_kv_count")
	// Each tensor info takes at least 8+4+8+4+8 bytes, each key/value 8+4+1.
	if err := r.count("tensor_count", nTensors, 32); err != nil {
		return nil, err
	}
	if err := r.count("metadata_kv_count", nKV, 13); err != nil {
		return nil, err
	}
	g.KVs = make([]GGUFKV, 0, nKV)
	for i := range nKV {
		kv, err := r.keyValue(i)
		if err != nil {
			return nil, err
		}
		if _, dup := g.kv[kv.Key]; dup {
			return nil, r.bad("metadata key %q appears twice", kv.Key)
		}
		g.kv[kv.Key] = len(g.KVs)
		g.KVs = append(g.KVs, kv)
	}
	if i, ok := g.kv["general.alignment"]; ok {
		kv := g.KVs[i]
		a, isU32 := kv.Value.(uint32)
		if !isU32 || a == 0 || a&(a-1) != 0 {
			return nil, r.bad("general.alignment %v (%s) is not a power-of-two uint32", kv.Value, kv.Type)
		}
		g.Alignment = int64(a)
	}
	g.Tensors = make([]GGUFTensorInfo, 0, nTensors)
	names := map[string]bool{}
	for i := range nTensors {
		t, err := r.tensorInfo(i)
		if err != nil {
			return nil, err
		}
		if names[t.Name] {
			return nil, r.bad("tensor %q appears twice", t.Name)
		}
		names[t.Name] = true
		g.Tensors = append(g.Tensors, t)
	}
	g.DataOffset = (int64(r.off) + g.Alignment - 1) / g.Alignment * g.Alignment
	if len(g.Tensors) == 0 {
		return g, nil
	}
	if g.DataOffset > int64(len(b)) {
		return nil, r.bad("tensor data would start at %d, past the end of the %d-byte file", g.DataOffset, len(b))
	}
	g.data = b[g.DataOffset:]
	if err := g.checkPlacement(); err != nil {
		return nil, err
	}
	return g, nil
}

// checkPlacement requires every tensor to start on the alignment, to lie in
// the data section and not to overlap another.
func (g *GGUFFile) checkPlacement() error {
	dataLen := int64(len(g.data))
	order := make([]int, len(g.Tensors))
	for i := range order {
		order[i] = i
	}
	for _, t := range g.Tensors {
		if t.Offset%g.Alignment != 0 {
			return fmt.Errorf("%w: tensor %q: offset %d is not a multiple of the alignment %d", ErrCorrupt, t.Name, t.Offset, g.Alignment)
		}
		if t.Offset > dataLen || t.Size > dataLen-t.Offset {
			return fmt.Errorf("%w: tensor %q: data [%d, %d) ends past the %d-byte data section", ErrCorrupt, t.Name, t.Offset, t.Offset+t.Size, dataLen)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		x, y := g.Tensors[a], g.Tensors[b]
		if x.Offset != y.Offset {
			return int(sign(x.Offset - y.Offset))
		}
		return int(sign(x.Size - y.Size))
	})
	for k := 1; k < len(order); k++ {
		prev, t := g.Tensors[order[k-1]], g.Tensors[order[k]]
		if t.Offset < prev.Offset+prev.Size {
			return fmt.Errorf("%w: tensor %q: data at %d overlaps tensor %q, which ends at %d", ErrCorrupt, t.Name, t.Offset, prev.Name, prev.Offset+prev.Size)
		}
	}
	return nil
}

func sign(x int64) int64 {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}
