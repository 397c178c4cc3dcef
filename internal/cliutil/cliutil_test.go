package cliutil

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestParsers(t *testing.T) {
	if got, err := ParseInts("ladder", "256, 512,1024"); err != nil || !slices.Equal(got, []int{256, 512, 1024}) {
		t.Errorf("ParseInts = %v, %v", got, err)
	}
	if _, err := ParseInts("ladder", "256,x"); err == nil || err.Error() != `--ladder: "x" is not an integer` {
		t.Errorf("ParseInts bad input: %v", err)
	}
	if p, err := ParsePrecision("BF16"); err != nil || p != "bf16" {
		t.Errorf("ParsePrecision = %q, %v", p, err)
	}
	if _, err := ParsePrecision("int4"); err == nil {
		t.Error("ParsePrecision accepted int4")
	}
	if m, err := ParseProps([]string{"A=1", "B=x=y"}); err != nil || m["A"] != "1" || m["B"] != "x=y" {
		t.Errorf("ParseProps = %v, %v", m, err)
	}
	if _, err := ParseProps([]string{"=1"}); err == nil {
		t.Error("ParseProps accepted an empty key")
	}
	if got := OneLine(errors.New("a\n  b\tc")); got != "a b c" {
		t.Errorf("OneLine = %q", got)
	}
}

func TestWriteJSONLeavesNoTemporary(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.json")
	if err := WriteJSON(path, map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "{\n  \"a\": 1\n}\n" {
		t.Fatalf("file = %q, %v", b, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files left, want 1", len(entries))
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"512", 512, true}, {"8GiB", 8 << 30, true}, {"8 GiB", 8 << 30, true}, {"100m", 100 << 20, true}, {"1TB", 1 << 40, true},
		{"", 0, false}, {"-1", 0, false}, {"1.5G", 0, false}, {"8XB", 0, false}, {"99999999999T", 0, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSize("cache-max", tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("ParseSize(%q) = %d, %v", tc.in, got, err)
			}
		})
	}
}
