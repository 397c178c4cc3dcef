package compilecost

import (
	"errors"
	"testing"
)

func TestRungFor(t *testing.T) {
	ladder := []int{1024, 2048, 4096, 8192}
	tests := []struct {
		name    string
		ladder  []int
		tokens  int
		wantIdx int
		wantOK  bool
	}{
		{name: "negative tokens", ladder: ladder, tokens: -1, wantIdx: -1},
		{name: "zero tokens fit the smallest", ladder: ladder, tokens: 0, wantIdx: 0, wantOK: true},
		{name: "one token", ladder: ladder, tokens: 1, wantIdx: 0, wantOK: true},
		{name: "one below the first capacity", ladder: ladder, tokens: 1023, wantIdx: 0, wantOK: true},
		{name: "exactly the first capacity", ladder: ladder, tokens: 1024, wantIdx: 0, wantOK: true},
		{name: "one past the first capacity rounds up", ladder: ladder, tokens: 1025, wantIdx: 1, wantOK: true},
		{name: "exactly the second", ladder: ladder, tokens: 2048, wantIdx: 1, wantOK: true},
		{name: "one past the second", ladder: ladder, tokens: 2049, wantIdx: 2, wantOK: true},
		{name: "one below the largest", ladder: ladder, tokens: 8191, wantIdx: 3, wantOK: true},
		{name: "exactly the largest", ladder: ladder, tokens: 8192, wantIdx: 3, wantOK: true},
		{name: "one past the largest", ladder: ladder, tokens: 8193, wantIdx: -1},
		{name: "empty ladder", ladder: nil, tokens: 1, wantIdx: -1},
		{name: "single rung", ladder: []int{16}, tokens: 16, wantIdx: 0, wantOK: true},
		{name: "unsorted ladder still picks the smallest fit", ladder: []int{4096, 1024, 2048}, tokens: 1500, wantIdx: 2, wantOK: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			idx, ok := RungFor(tc.ladder, tc.tokens)
			if idx != tc.wantIdx || ok != tc.wantOK {
				t.Errorf("RungFor(%v, %d) = %d, %v; want %d, %v", tc.ladder, tc.tokens, idx, ok, tc.wantIdx, tc.wantOK)
			}
		})
	}
}

func TestRungForPositionRule(t *testing.T) {
	// A token at position p needs capacity > p: position 1023 fits 1024,
	// position 1024 needs 2048.
	ladder := []int{1024, 2048}
	for _, tc := range []struct {
		pos, want int
	}{{0, 0}, {1023, 0}, {1024, 1}, {2047, 1}} {
		if idx, _ := RungFor(ladder, tc.pos+1); idx != tc.want {
			t.Errorf("position %d: rung %d, want %d", tc.pos, idx, tc.want)
		}
	}
}

func TestValidateLadder(t *testing.T) {
	tests := []struct {
		name    string
		ladder  []int
		wantErr bool
	}{
		{name: "ok", ladder: []int{1024, 2048, 4096, 8192}},
		{name: "single", ladder: []int{64}},
		{name: "empty", ladder: nil, wantErr: true},
		{name: "zero", ladder: []int{0, 8}, wantErr: true},
		{name: "negative", ladder: []int{-8}, wantErr: true},
		{name: "duplicate", ladder: []int{8, 8}, wantErr: true},
		{name: "descending", ladder: []int{16, 8}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateLadder(tc.ladder)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ValidateLadder(%v) = %v, wantErr %v", tc.ladder, err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalidLadder) {
				t.Errorf("error %v does not wrap ErrInvalidLadder", err)
			}
		})
	}
}
