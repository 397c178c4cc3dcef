package model

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Synthesize writes a deterministic random checkpoint of a preset to dir:
// config.json and model.safetensors. The same preset, seed and dtype give
// byte-identical files. An empty dtype means DefaultDType(preset).
//
// Each tensor draws from its own PCG stream seeded by (seed, FNV-1a 64 of its
// name), so values do not depend on tensor order. The distributions are:
//
//	model.embed_tokens.weight, lm_head.weight  N(0, 1)
//	*norm.weight                               1 + N(0, 0.1²)
//	*.bias                                     N(0, 0.1²)
//	o_proj.weight, down_proj.weight [out, in]  N(0, 36/in), std 6/sqrt(fan_in)
//	other weights [out, in]                    N(0, 1/in), std 1/sqrt(fan_in)
//
// The residual-branch projections (o_proj, down_proj) are scaled up so each
// layer's output outweighs the token's embedding in the residual stream:
// with unit scale a tied lm_head predicts the input token itself at almost
// every position and the output barely depends on the context, which makes
// tests of attention and the KV cache unable to fail. With this choice the
// tiny presets' logits have a top-1 vs top-2 gap above 0.05 at about 97% of
// positions (median about 2), the greedy token is rarely the input token, and
// changing the first prompt token changes most later greedy tokens
// (TestSynthLogitGap).
//
// A family may draw some tensors otherwise (Family.SynthInit: Gemma's norm
// weights around 0, as it multiplies by 1 + w, and its o_proj and down_proj
// sqrt(hidden) times larger, as it scales the embeddings by sqrt(hidden)).
//
// Values are drawn as float64, converted to float32, then rounded to nearest
// even for F16 and BF16. Files are written to temporary names and renamed,
// model.safetensors first and config.json last, so an interrupted run never
// leaves a directory that Load accepts with partial data.
func Synthesize(preset string, seed uint64, dtype DType, dir string) error {
	cfg, err := PresetConfig(preset)
	if err != nil {
		return err
	}
	if dtype == "" {
		dtype = DefaultDType(preset)
	}
	if !dtype.IsFloatWeight() {
		return fmt.Errorf("synthesize %s: dtype %q is not F32, F16 or BF16", preset, dtype)
	}
	cfg.TorchDtype = dtype.TorchName()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("synthesize %s: %w", preset, err)
	}
	specs := RequiredTensors(cfg)
	slices.SortFunc(specs, func(a, b TensorSpec) int { return strings.Compare(a.Name, b.Name) })
	err = writeAtomic(filepath.Join(dir, SafetensorsName), func(w io.Writer) error {
		return writeSynthSafetensors(w, specs, seed, dtype, cfg.Family().SynthInit)
	})
	if err != nil {
		return fmt.Errorf("synthesize %s: %w", preset, err)
	}
	cj, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	err = writeAtomic(filepath.Join(dir, "config.json"), func(w io.Writer) error {
		_, err := w.Write(append(cj, '\n'))
		return err
	})
	if err != nil {
		return fmt.Errorf("synthesize %s: %w", preset, err)
	}
	return nil
}

// writeAtomic writes path through a temporary file in the same directory,
// synced and then renamed over path.
func writeAtomic(path string, write func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// EncodeSafetensorsHeader returns the 8-byte length and the JSON header for
// ts laid out contiguously in the given order (Data is ignored: sizes come
// from shape and dtype), padded with spaces to a multiple of 8 bytes as the
// reference writer does. Keys are sorted, so the bytes depend only on the
// names, dtypes, shapes, order and metadata.
func EncodeSafetensorsHeader(ts []*Tensor, metadata map[string]string) ([]byte, error) {
	type entry struct {
		DType       DType    `json:"dtype"`
		Shape       []int64  `json:"shape"`
		DataOffsets [2]int64 `json:"data_offsets"`
	}
	h := make(map[string]any, len(ts)+1)
	if len(metadata) > 0 {
		h["__metadata__"] = metadata
	}
	var off int64
	for _, t := range ts {
		if _, dup := h[t.Name]; dup || t.Name == "__metadata__" {
			return nil, fmt.Errorf("safetensors header: duplicate or reserved tensor name %q", t.Name)
		}
		if t.DType.Size() == 0 {
			return nil, fmt.Errorf("safetensors header: tensor %q has unknown dtype %q", t.Name, t.DType)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		n := t.NumElements() * int64(t.DType.Size())
		h[t.Name] = entry{t.DType, shape, [2]int64{off, off + n}}
		off += n
	}
	js, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	return append(binary.LittleEndian.AppendUint64(nil, uint64(len(js))), js...), nil
}

// WriteSafetensors writes ts, in order, as a safetensors file.
func WriteSafetensors(w io.Writer, ts []*Tensor, metadata map[string]string) error {
	head, err := EncodeSafetensorsHeader(ts, metadata)
	if err != nil {
		return err
	}
	for _, t := range ts {
		if want := t.NumElements() * int64(t.DType.Size()); int64(len(t.Data)) != want {
			return fmt.Errorf("write safetensors: tensor %q has %d bytes, want %d", t.Name, len(t.Data), want)
		}
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	for _, t := range ts {
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
	}
	return nil
}

// writeSynthSafetensors writes the tensors of specs drawn as Synthesize
// says, or as init says where it has a distribution of its own (ok).
func writeSynthSafetensors(w io.Writer, specs []TensorSpec, seed uint64, dtype DType, init func(TensorSpec) (mean, std float64, ok bool)) error {
	ts := make([]*Tensor, len(specs))
	for i, s := range specs {
		ts[i] = &Tensor{Name: s.Name, DType: dtype, Shape: s.Shape}
	}
	head, err := EncodeSafetensorsHeader(ts, map[string]string{"format": "pt"})
	if err != nil {
		return err
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	const chunk = 1 << 16
	buf := make([]byte, 0, chunk*dtype.Size())
	for _, s := range specs {
		mean, std := synthDistribution(s)
		if init != nil {
			if m, sd, ok := init(s); ok {
				mean, std = m, sd
			}
		}
		rng := rand.New(rand.NewPCG(seed, fnvName(s.Name)))
		for left := numElements(s.Shape); left > 0; {
			n := min(left, chunk)
			buf = buf[:0]
			for range n {
				buf = appendFloat(buf, dtype, float32(mean+std*rng.NormFloat64()))
			}
			if _, err := w.Write(buf); err != nil {
				return err
			}
			left -= n
		}
	}
	return nil
}

// synthDistribution is the mean and standard deviation of a tensor's values;
// see Synthesize.
func synthDistribution(s TensorSpec) (mean, std float64) {
	switch {
	case s.Name == "model.embed_tokens.weight" || s.Name == "lm_head.weight":
		return 0, 1
	case strings.HasSuffix(s.Name, "o_proj.weight") || strings.HasSuffix(s.Name, "down_proj.weight"):
		return 0, synthResidualGain / math.Sqrt(float64(s.Shape[1]))
	case strings.HasSuffix(s.Name, "norm.weight"):
		return 1, 0.1
	case strings.HasSuffix(s.Name, ".bias"):
		return 0, 0.1
	case len(s.Shape) == 2:
		return 0, 1 / math.Sqrt(float64(s.Shape[1]))
	}
	return 0, 1
}

// synthResidualGain scales o_proj and down_proj; see Synthesize.
const synthResidualGain = 6

func fnvName(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

func appendFloat(b []byte, d DType, f float32) []byte {
	switch d {
	case DTypeF16:
		return binary.LittleEndian.AppendUint16(b, Float32ToF16(f))
	case DTypeBF16:
		return binary.LittleEndian.AppendUint16(b, Float32ToBF16(f))
	}
	return binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
}
