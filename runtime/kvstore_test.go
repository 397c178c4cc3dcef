package runtime

import (
	"os"
	"slices"
	"testing"

	"github.com/ovtoolkit/ovrun/ladder"
)

// fillRows writes a recognizable byte pattern into the first n token rows
// of every layer.
func fillRows(kv *KV, n, rowBytes int) {
	for l := range kv.K {
		for i := range n * rowBytes {
			kv.K[l][i] = byte(3*l + i%251 + 1)
			kv.V[l][i] = byte(5*l + i%241 + 2)
		}
	}
}

// rowsEqual reports whether the first n rows of every layer of a and b agree.
func rowsEqual(a, b *KV, n, rowBytes int) bool {
	for l := range a.K {
		if !slices.Equal(a.K[l][:n*rowBytes], b.K[l][:n*rowBytes]) || !slices.Equal(a.V[l][:n*rowBytes], b.V[l][:n*rowBytes]) {
			return false
		}
	}
	return true
}

func checkView(t *testing.T, kv *KV, capacity int) {
	t.Helper()
	rb := testShape.RowBytes()
	if kv.Capacity != capacity || len(kv.K) != testShape.Layers || len(kv.V) != testShape.Layers {
		t.Fatalf("view of %d slots, %d/%d layers; want %d slots, %d layers", kv.Capacity, len(kv.K), len(kv.V), capacity, testShape.Layers)
	}
	for l := range kv.K {
		if len(kv.K[l]) != capacity*rb || len(kv.V[l]) != capacity*rb {
			t.Fatalf("layer %d: K %d V %d bytes, want %d", l, len(kv.K[l]), len(kv.V[l]), capacity*rb)
		}
	}
}

// TestKVStores checks each store through a ladder 64 -> 128 -> 256 with 40
// and then 100 live tokens: what it maps and reserves, the view it gives
// each rung, that growth keeps the live tokens, what it copies and what is
// mapped after Close.
func TestKVStores(t *testing.T) {
	rb, tb := testShape.RowBytes(), testShape.TokenBytes()
	page := int64(os.Getpagesize())
	slack := int64(2*testShape.Layers) * page // one partly written page per mapping
	tests := []struct {
		kind       ladder.Store
		accounting string
		mapped     func(capacity int) int64 // mapped bytes while on a rung
		reserved   func(capacity, live int) (lo, hi int64)
		copies     bool
	}{
		{kind: ladder.StoreMax, accounting: Allocated,
			mapped:   func(int) int64 { return testShape.BufferBytes(256) },
			reserved: func(int, int) (int64, int64) { return 256 * tb, 256 * tb }},
		{kind: ladder.StoreCopy, accounting: Allocated, copies: true,
			mapped:   func(c int) int64 { return testShape.BufferBytes(c) },
			reserved: func(c, _ int) (int64, int64) { return int64(c) * tb, int64(c) * tb }},
		{kind: ladder.StoreRemap, accounting: Committed,
			mapped:   func(int) int64 { return testShape.BufferBytes(256) },
			reserved: func(_, live int) (int64, int64) { return int64(live) * tb, int64(live)*tb + slack }},
	}
	for _, tc := range tests {
		t.Run(string(tc.kind), func(t *testing.T) {
			base := MappedKVBytes()
			store, err := NewKVStore(tc.kind, testShape, 256)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := store.Grow(128, 0, nil); err == nil {
				t.Error("Grow before Open succeeded")
			}
			if store.Accounting() != tc.accounting {
				t.Errorf("accounting %q, want %q", store.Accounting(), tc.accounting)
			}
			kv, err := store.Open(64)
			if err != nil {
				t.Fatal(err)
			}
			checkView(t, kv, 64)
			if got := MappedKVBytes() - base; got != tc.mapped(64) {
				t.Errorf("open: %d bytes mapped, want %d", got, tc.mapped(64))
			}
			fillRows(kv, 40, rb)
			if lo, hi := tc.reserved(64, 40); store.Reserved() < lo || store.Reserved() > hi {
				t.Errorf("40 tokens on 64: reserved %d, want %d..%d", store.Reserved(), lo, hi)
			}
			snapshot := func(kv *KV) *KV { // a copy, so the old view may be freed
				c := &KV{Capacity: kv.Capacity}
				for l := range kv.K {
					c.K = append(c.K, slices.Clone(kv.K[l]))
					c.V = append(c.V, slices.Clone(kv.V[l]))
				}
				return c
			}
			before := snapshot(kv)
			var levels []int64
			kv2, copied, err := store.Grow(128, 40, func(b int64) { levels = append(levels, b) })
			if err != nil {
				t.Fatal(err)
			}
			checkView(t, kv2, 128)
			if !rowsEqual(kv2, before, 40, rb) {
				t.Error("growth lost the live tokens")
			}
			wantCopied, wantLevels := int64(0), []int64(nil)
			if tc.copies {
				wantCopied = 40 * tb
				wantLevels = []int64{(64 + 128) * tb, 128 * tb} // both buffers during the copy, then the new one
			}
			if copied != wantCopied || !slices.Equal(levels, wantLevels) {
				t.Errorf("grow to 128: copied %d bytes through levels %v, want %d through %v", copied, levels, wantCopied, wantLevels)
			}
			if got := MappedKVBytes() - base; got != tc.mapped(128) {
				t.Errorf("after growth: %d bytes mapped, want %d", got, tc.mapped(128))
			}
			if !tc.copies && &kv2.K[0][0] != &kv.K[0][0] {
				t.Error("a view of a larger rung does not share the first rung's memory")
			}
			fillRows(kv2, 100, rb)
			if lo, hi := tc.reserved(128, 100); store.Reserved() < lo || store.Reserved() > hi {
				t.Errorf("100 tokens on 128: reserved %d, want %d..%d", store.Reserved(), lo, hi)
			}
			if _, _, err := store.Grow(512, 100, nil); err == nil {
				t.Error("growing past the largest capacity succeeded")
			}
			if err := store.Close(); err != nil {
				t.Fatal(err)
			}
			if got := MappedKVBytes(); got != base || store.Reserved() != 0 {
				t.Errorf("after Close: %d bytes mapped (want %d), reserved %d", got, base, store.Reserved())
			}
		})
	}
	if _, err := NewKVStore("paged", testShape, 256); err == nil {
		t.Error("an unknown store was made")
	}
}
