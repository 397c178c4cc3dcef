package rungcache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ovtoolkit/ovrun/model"
)

// FormatVersion is the version of the cache's layout and key recipe; a
// change of either bumps it, so old entries stop matching. Version 2 ends
// every blob file with its key (blob.go).
const FormatVersion = 2

// Key names an entry: the SHA-256 of its Parts.
type Key [sha256.Size]byte

// String is the key in hex (the entry's file name).
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// Short is the first 12 hex digits, for messages.
func (k Key) Short() string { return k.String()[:12] }

// ParseKey reads a key written by String.
func ParseKey(s string) (Key, error) {
	var k Key
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(k) {
		return k, fmt.Errorf("rung cache key %q is not %d hex digits", shortHex(s), 2*len(k))
	}
	copy(k[:], b)
	return k, nil
}

// Parts is everything that changes a compiled graph. Two compiles with
// equal Parts give interchangeable blobs.
type Parts struct {
	OpenVINO   string   `json:"openvino"`   // build number of the loaded library
	Device     string   `json:"device"`     // CPU, GPU, NPU
	Precision  string   `json:"precision"`  // asked INFERENCE_PRECISION_HINT ("" for the default)
	Properties []string `json:"properties"` // every compile property as KEY=VALUE, in the order they are passed
	WeightsSHA string   `json:"weights"`    // digest (SHA-256 based) of the weights blob the graph reads
	IRSHA      string   `json:"ir"`         // SHA-256 of the IR XML
	Kind       string   `json:"kind"`       // decode, prefill or shared
	Capacity   int      `json:"capacity"`
	Chunk      int      `json:"chunk"`
	// The graph's attention form and KV element type (model.GraphSpec);
	// the IR shows them too.
	Attention   string `json:"attention,omitempty"`
	KVPrecision string `json:"kv_precision,omitempty"`
	// Driver is the device's driver and compiler versions where it
	// reports them (NPU_DRIVER_VERSION=...,NPU_COMPILER_VERSION=...): a
	// blob compiled for one NPU driver may not import under another. The
	// CPU reports none, and an empty Driver leaves the key as it was.
	Driver string `json:"driver,omitempty"`
}

// KeyOf is the key of p under this FormatVersion.
func KeyOf(p Parts) Key {
	b, _ := json.Marshal(struct {
		Format int `json:"format"`
		Parts
	}{FormatVersion, p}) // a struct of strings and ints always marshals
	return sha256.Sum256(b)
}

// Meta is an entry's metadata file: what the blob must be (size,
// CRC-32C) and, for people, what it is.
type Meta struct {
	Format    int       `json:"format"`
	Key       string    `json:"key"`
	Size      int64     `json:"size"`   // blob file bytes: the export and its key trailer
	CRC32C    []uint32  `json:"crc32c"` // of each 16 MiB piece of the blob (Castagnoli)
	Kind      string    `json:"kind"`
	Capacity  int       `json:"capacity"`
	Chunk     int       `json:"chunk"`
	Device    string    `json:"device"`
	Precision string    `json:"precision,omitempty"`
	Model     string    `json:"model,omitempty"`
	OpenVINO  string    `json:"openvino,omitempty"`
	CompileS  float64   `json:"compile_s,omitempty"` // what compiling it cost
	Created   time.Time `json:"created"`
	// Object is the name of the object that holds the blob in a Store
	// (under the store's prefix): each writer uploads its own, and the
	// metadata, written last, names the one it describes. Empty in a
	// folder.
	Object string `json:"object,omitempty"`
}

// maxMetaBytes bounds a metadata file read.
const maxMetaBytes = 64 << 10

// maxBlobBytes bounds a blob's stated size (a hostile metadata file must
// not make Get allocate without limit).
const maxBlobBytes = 64 << 30

// Graph is the graph's name as the runtime writes it (decode-c1024).
func (m Meta) Graph() string {
	if m.Capacity == 0 {
		return "?"
	}
	return model.GraphSpec{Capacity: m.Capacity, Chunk: max(m.Chunk, 1), Shared: m.Kind == "shared"}.Name()
}

// Short is the key's first 12 hex digits.
func (m Meta) Short() string { return shortHex(m.Key) }

func shortHex(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

func (m Meta) marshal() ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("rung cache: metadata of %s: %w", m.Short(), err)
	}
	return append(b, '\n'), nil
}

// ParseMeta reads and checks a metadata file: our format version, a key,
// a positive bounded size.
func ParseMeta(b []byte) (Meta, error) {
	var m Meta
	if len(b) > maxMetaBytes {
		return m, fmt.Errorf("metadata is %d bytes, more than %d", len(b), maxMetaBytes)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return Meta{}, fmt.Errorf("metadata is not valid JSON: %w", err)
	}
	switch {
	case m.Format != FormatVersion:
		return Meta{}, fmt.Errorf("metadata format %d, this ovrun reads %d", m.Format, FormatVersion)
	case m.Size <= 0 || m.Size > maxBlobBytes:
		return Meta{}, fmt.Errorf("metadata states a blob of %d bytes", m.Size)
	}
	if _, err := ParseKey(m.Key); err != nil {
		return Meta{}, err
	}
	return m, nil
}
