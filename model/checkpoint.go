package model

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/tokenizer"
)

// File names of a Hugging Face checkpoint directory.
const (
	SafetensorsName = "model.safetensors"
	IndexName       = "model.safetensors.index.json"
)

// Checkpoint is a loaded, validated model: a Hugging Face directory or a
// GGUF file. Tensor data are slices of read-only file mappings, valid until
// Close.
type Checkpoint struct {
	Dir     string             // the checkpoint directory, or the .gguf file
	Config  *Config            // from config.json, or built from GGUF metadata
	Tensors map[string]*Tensor // Hugging Face names; all shards merged
	GGUF    *GGUFFile          // the GGUF file's metadata (tokenizer.*), nil for a directory

	files []*SafetensorsFile

	tokOnce sync.Once // Tokenizer builds it once
	tok     *tokenizer.Tokenizer
	tokErr  error
}

// Load opens a checkpoint: a GGUF file (see docs/benchmarks.md "GGUF weights"),
// or a directory with config.json and model.safetensors or, when that is
// absent (the order transformers uses), the shards named by
// model.safetensors.index.json. It then checks that every tensor the
// architecture needs is present with the right shape (see CheckTensors).
func Load(dir string) (*Checkpoint, error) {
	if st, err := os.Stat(dir); err == nil && st.Mode().IsRegular() {
		return loadGGUF(dir)
	}
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Dir: dir, Config: cfg, Tensors: map[string]*Tensor{}}
	if err := c.open(); err != nil {
		c.Close()
		return nil, err
	}
	if err := CheckTensors(cfg, c.Tensors); err != nil {
		c.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := checkLayerCount(cfg, c.Tensors); err != nil {
		c.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := checkUnused(cfg, c.Tensors); err != nil {
		c.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return c, nil
}

// checkLayerCount refuses a checkpoint with layers beyond num_hidden_layers:
// running only the first layers of a deeper model gives wrong answers
// without any other sign.
func checkLayerCount(cfg *Config, tensors map[string]*Tensor) error {
	deepest := -1
	for name := range tensors {
		rest, ok := strings.CutPrefix(name, "model.layers.")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		if n, err := strconv.Atoi(num); err == nil && n > deepest {
			deepest = n
		}
	}
	if deepest >= cfg.NumHiddenLayers {
		return fmt.Errorf("%w: the checkpoint has tensors of layer %d but config.json says num_hidden_layers %d",
			ErrCorrupt, deepest, cfg.NumHiddenLayers)
	}
	return nil
}

// NonFinite names the first NaN or infinity among the weights the decoder
// uses, in RequiredTensors order: the tensor, the element index and its
// value. ok is false when every weight is finite. It reads every weight, so
// it is for explaining a failure, not for every load.
func (c *Checkpoint) NonFinite() (name string, index int64, value float32, ok bool) {
	for _, s := range RequiredTensors(c.Config) {
		t := c.Tensors[s.Name]
		if t == nil {
			continue
		}
		if i, v, found := firstNonFinite(t); found {
			return s.Name, i, v, true
		}
	}
	return "", 0, 0, false
}

// firstNonFinite scans a float tensor's raw data.
func firstNonFinite(t *Tensor) (int64, float32, bool) {
	switch t.DType {
	case DTypeF32:
		for i := 0; i+4 <= len(t.Data); i += 4 {
			if b := binary.LittleEndian.Uint32(t.Data[i:]); b&0x7f800000 == 0x7f800000 {
				return int64(i / 4), math.Float32frombits(b), true
			}
		}
	case DTypeF16:
		for i := 0; i+2 <= len(t.Data); i += 2 {
			if h := binary.LittleEndian.Uint16(t.Data[i:]); h&0x7c00 == 0x7c00 {
				return int64(i / 2), F16ToFloat32(h), true
			}
		}
	case DTypeBF16:
		for i := 0; i+2 <= len(t.Data); i += 2 {
			if h := binary.LittleEndian.Uint16(t.Data[i:]); h&0x7f80 == 0x7f80 {
				return int64(i / 2), BF16ToFloat32(h), true
			}
		}
	}
	return 0, 0, false
}

func (c *Checkpoint) open() error {
	single := filepath.Join(c.Dir, SafetensorsName)
	if _, err := os.Stat(single); err == nil {
		sf, err := OpenSafetensors(single)
		if err != nil {
			return err
		}
		c.files = append(c.files, sf)
		c.Tensors = sf.Tensors
		return nil
	}
	indexPath := filepath.Join(c.Dir, IndexName)
	weightMap, err := readIndex(indexPath)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("checkpoint %s: no %s or %s", c.Dir, SafetensorsName, IndexName)
	}
	if err != nil {
		return err
	}
	shards := slices.Compact(slices.Sorted(maps.Values(weightMap)))
	owner := map[string]string{} // tensor name -> shard it was found in
	for _, shard := range shards {
		sf, err := OpenSafetensors(filepath.Join(c.Dir, shard))
		if err != nil {
			return err
		}
		c.files = append(c.files, sf)
		for _, name := range sf.Names() {
			if prev, dup := owner[name]; dup {
				return fmt.Errorf("%s: %w: tensor %q is in both %s and %s", indexPath, ErrCorrupt, name, prev, shard)
			}
			owner[name] = shard
			c.Tensors[name] = sf.Tensors[name]
		}
	}
	for _, name := range slices.Sorted(maps.Keys(weightMap)) {
		if want := weightMap[name]; owner[name] != want {
			return fmt.Errorf("%s: %w: tensor %q is mapped to %s but is not in it", indexPath, ErrCorrupt, name, want)
		}
	}
	return nil
}

// readIndex parses a shard index and returns its weight_map. A missing file
// is reported with an error matching os.ErrNotExist.
func readIndex(path string) (map[string]string, error) {
	b, err := safefile.ReadFile(path, MaxIndexBytes)
	if err != nil {
		return nil, err
	}
	var idx struct {
		WeightMap json.RawMessage `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrCorrupt, err)
	}
	weightMap := map[string]string{}
	if len(idx.WeightMap) > 0 && string(idx.WeightMap) != "null" {
		fields, err := objectFields(idx.WeightMap)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: weight_map: %v", path, ErrCorrupt, err)
		}
		for name, raw := range fields {
			var f string
			if err := json.Unmarshal(raw, &f); err != nil {
				return nil, fmt.Errorf("%s: %w: weight_map: tensor %q maps to %s, not a file name", path, ErrCorrupt, name, raw)
			}
			weightMap[name] = f
		}
	}
	if len(weightMap) == 0 {
		return nil, fmt.Errorf("%s: %w: empty or missing weight_map", path, ErrCorrupt)
	}
	for _, name := range slices.Sorted(maps.Keys(weightMap)) {
		if f := weightMap[name]; f == "" || f != filepath.Base(f) || f == "." || f == ".." {
			return nil, fmt.Errorf("%s: %w: tensor %q maps to %q, not a file in the checkpoint directory", path, ErrCorrupt, name, f)
		}
	}
	return weightMap, nil
}

// MaxIndexBytes is the largest shard index read (a 405B model's is 0.1 MiB).
const MaxIndexBytes = 64 << 20

// Tensor returns the named tensor or an error wrapping ErrMissingTensor.
func (c *Checkpoint) Tensor(name string) (*Tensor, error) {
	t, ok := c.Tensors[name]
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: %w %q", c.Dir, ErrMissingTensor, name)
	}
	return t, nil
}

// Close unmaps every file; tensor data must not be used afterwards.
func (c *Checkpoint) Close() error {
	if c == nil {
		return nil
	}
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	errs = append(errs, c.GGUF.Close())
	c.files = nil
	return errors.Join(errs...)
}
