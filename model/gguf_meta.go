package model

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Typed accessors of GGUF metadata, for the configuration here and for
// tokenizers (tokenizer.ggml.*, tokenizer.chat_template).

// ErrMissingKey is wrapped by the metadata accessors when a key is absent.
var ErrMissingKey = errors.New("missing metadata key")

// Lookup returns the metadata entry of key.
func (g *GGUFFile) Lookup(key string) (GGUFKV, bool) {
	i, ok := g.kv[key]
	if !ok {
		return GGUFKV{}, false
	}
	return g.KVs[i], true
}

// Has reports whether key is present.
func (g *GGUFFile) Has(key string) bool { _, ok := g.kv[key]; return ok }

func (g *GGUFFile) get(key string) (GGUFKV, error) {
	kv, ok := g.Lookup(key)
	if !ok {
		return kv, fmt.Errorf("gguf: %w %q", ErrMissingKey, key)
	}
	return kv, nil
}

func typeErr(kv GGUFKV, want string) error {
	t := kv.Type.String()
	if kv.Type == GGUFArray {
		t = "array of " + kv.Elem.String()
	}
	return fmt.Errorf("gguf: metadata key %q holds %s, not %s", kv.Key, t, want)
}

// String returns a string value.
func (g *GGUFFile) String(key string) (string, error) {
	kv, err := g.get(key)
	if err != nil {
		return "", err
	}
	s, ok := kv.Value.(string)
	if !ok {
		return "", typeErr(kv, "a string")
	}
	return s, nil
}

// Strings returns an array of strings (tokenizer.ggml.tokens, .merges).
func (g *GGUFFile) Strings(key string) ([]string, error) {
	kv, err := g.get(key)
	if err != nil {
		return nil, err
	}
	s, ok := kv.Value.([]string)
	if !ok {
		return nil, typeErr(kv, "an array of strings")
	}
	return s, nil
}

// Bool returns a bool value.
func (g *GGUFFile) Bool(key string) (bool, error) {
	kv, err := g.get(key)
	if err != nil {
		return false, err
	}
	b, ok := kv.Value.(bool)
	if !ok {
		return false, typeErr(kv, "a bool")
	}
	return b, nil
}

// Int returns an integer value of any integer type.
func (g *GGUFFile) Int(key string) (int64, error) {
	kv, err := g.get(key)
	if err != nil {
		return 0, err
	}
	v, ok := toInt(kv.Value)
	if !ok {
		return 0, typeErr(kv, "an integer below 2^63")
	}
	return v, nil
}

// Float returns a numeric value as float64 (float or integer types).
func (g *GGUFFile) Float(key string) (float64, error) {
	kv, err := g.get(key)
	if err != nil {
		return 0, err
	}
	switch v := kv.Value.(type) {
	case float32:
		return float64(v), nil
	case float64:
		return v, nil
	}
	if v, ok := toInt(kv.Value); ok {
		return float64(v), nil
	}
	return 0, typeErr(kv, "a number")
}

// Ints returns an array of any integer type (tokenizer.ggml.token_type).
func (g *GGUFFile) Ints(key string) ([]int64, error) {
	kv, err := g.get(key)
	if err != nil {
		return nil, err
	}
	var out []int64
	ok := true
	switch v := kv.Value.(type) {
	case []uint8:
		out = widen(v)
	case []int8:
		out = widen(v)
	case []uint16:
		out = widen(v)
	case []int16:
		out = widen(v)
	case []uint32:
		out = widen(v)
	case []int32:
		out = widen(v)
	case []int64:
		out = slices.Clone(v)
	case []uint64:
		out = make([]int64, len(v))
		for i, x := range v {
			ok = ok && x <= math.MaxInt64
			out[i] = int64(x)
		}
	default:
		ok = false
	}
	if !ok {
		return nil, typeErr(kv, "an array of integers below 2^63")
	}
	return out, nil
}

// Floats returns an array of float32 or float64 (tokenizer.ggml.scores).
func (g *GGUFFile) Floats(key string) ([]float64, error) {
	kv, err := g.get(key)
	if err != nil {
		return nil, err
	}
	switch v := kv.Value.(type) {
	case []float32:
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out, nil
	case []float64:
		return slices.Clone(v), nil
	}
	return nil, typeErr(kv, "an array of floats")
}

func widen[T int8 | uint8 | int16 | uint16 | int32 | uint32](v []T) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint64:
		return int64(x), x <= math.MaxInt64
	}
	return 0, false
}
