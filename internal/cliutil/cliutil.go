// Package cliutil holds the small pieces of flag parsing and output that
// the ovrun and ovtrace front ends share.
package cliutil

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

// ParseInts parses a comma-separated list of integers given to --flag.
func ParseInts(flag, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("--%s: %q is not an integer", flag, f)
		}
		out = append(out, v)
	}
	return out, nil
}

// ParsePrecision accepts an inference precision hint ("" keeps the device's).
func ParsePrecision(s string) (string, error) {
	switch p := strings.ToLower(s); p {
	case "", "f32", "bf16", "f16":
		return p, nil
	default:
		return "", fmt.Errorf("--precision %q: want f32, bf16 or f16", s)
	}
}

// ParseProps turns repeated --prop KEY=VALUE flags into a map.
func ParseProps(kvs []string) (map[string]string, error) {
	props := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--prop %q: want KEY=VALUE", kv)
		}
		props[k] = v
	}
	return props, nil
}

// WriteJSON writes v as indented JSON through safefile: atomically, never
// over a device, FIFO or symlink, "-" for standard output, and with null
// for a number JSON cannot hold.
func WriteJSON(path string, v any) error {
	return safefile.WriteJSON(path, v)
}

// CheckInt requires lo <= v <= hi for --flag.
func CheckInt(flag string, v, lo, hi int) error {
	if v < lo || v > hi {
		return fmt.Errorf("--%s %d: want %d..%d", flag, v, lo, hi)
	}
	return nil
}

// CheckFloat requires a finite --flag value in [lo, hi].
func CheckFloat(flag string, v, lo, hi float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < lo || v > hi {
		return fmt.Errorf("--%s %v: want a number in [%g, %g]", flag, v, lo, hi)
	}
	return nil
}

// OneLine keeps an error to a single line for the terminal.
func OneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ")), " ")
}

// OneOf is a flag action that accepts only the given values, so a bad value
// fails while the command line is parsed, before any work.
func OneOf(flag string, allowed ...string) func(*cli.Context, string) error {
	return func(_ *cli.Context, v string) error {
		if slices.Contains(allowed, v) {
			return nil
		}
		return fmt.Errorf("--%s %q: want one of %s", flag, v, strings.Join(allowed, ", "))
	}
}

// ParseSize reads a byte count given to --flag: a whole number with an
// optional unit B, KiB, MiB, GiB, TiB (K, M, G, T and KB, MB, GB, TB mean the
// same powers of 1024).
func ParseSize(flag, s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return r < '0' || r > '9' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.ToUpper(strings.TrimSpace(t[i:]))
	}
	shift := map[string]uint{"": 0, "B": 0, "K": 10, "KB": 10, "KIB": 10, "M": 20, "MB": 20, "MIB": 20, "G": 30, "GB": 30, "GIB": 30, "T": 40, "TB": 40, "TIB": 40}
	sh, ok := shift[unit]
	v, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || v < 0 || v > math.MaxInt64>>sh {
		return 0, fmt.Errorf("--%s %q: want a size such as 512MiB or 8GiB", flag, s)
	}
	return v << sh, nil
}
