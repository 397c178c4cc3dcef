package stats

import (
	"strings"
	"testing"
)

func TestCheckPairs(t *testing.T) {
	tests := []struct {
		arms, pairs int
		want        string // "" accepts
	}{
		{arms: 2, pairs: 6},
		{arms: 2, pairs: 8},
		{arms: 2, pairs: 5, want: "5 pairs: use an even number >= 6 (with n pairs the smallest two-sided exact sign-flip p is 2/2^n = 0.0625 here"},
		{arms: 2, pairs: 7, want: "7 pairs: use an even number >= 6"},
		{arms: 2, pairs: 4, want: "use an even number >= 6"},
		{arms: 3, pairs: 6},
		{arms: 3, pairs: 12},
		{arms: 3, pairs: 8, want: "8 pairs: a Williams design for 3 arms comes in blocks of 6 sequences; use a multiple of 6 that is >= 6 (e.g. 6)"},
		{arms: 4, pairs: 8},
		{arms: 4, pairs: 6, want: "use a multiple of 4 that is >= 6 (e.g. 8)"},
		{arms: 4, pairs: 4, want: "use a multiple of 4 that is >= 6 (e.g. 8)"},
		{arms: 5, pairs: 10},
		{arms: 5, pairs: 6, want: "blocks of 10 sequences"},
	}
	for _, tc := range tests {
		err := CheckPairs(tc.arms, tc.pairs)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%d arms, %d pairs: %v", tc.arms, tc.pairs, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%d arms, %d pairs: %v, want %q", tc.arms, tc.pairs, err, tc.want)
		}
	}
}

// With BalancedPairs blocks every arm takes every position equally often.
func TestBalancedPairsBalancesPositions(t *testing.T) {
	for arms := 2; arms <= 6; arms++ {
		n := BalancedPairs(arms)
		if n < MinPairs || CheckPairs(arms, n) != nil {
			t.Fatalf("BalancedPairs(%d) = %d is not an accepted design", arms, n)
		}
		count := make([][]int, arms)
		for i := range count {
			count[i] = make([]int, arms)
		}
		for _, o := range Orders(arms, n) {
			for pos, arm := range o {
				count[arm][pos]++
			}
		}
		for arm := range count {
			for pos := range count[arm] {
				if count[arm][pos] != n/arms {
					t.Errorf("%d arms, %d blocks: arm %d at position %d %d times, want %d", arms, n, arm, pos, count[arm][pos], n/arms)
				}
			}
		}
	}
}

func TestSignFlipFloor(t *testing.T) {
	for n, want := range map[int]float64{1: 1, 5: 0.0625, 6: 0.03125} {
		if got := SignFlipFloor(n); got != want {
			t.Errorf("SignFlipFloor(%d) = %g, want %g", n, got, want)
		}
	}
	if CycleLen(1) != 1 || CycleLen(2) != 2 || CycleLen(3) != 6 || CycleLen(4) != 4 {
		t.Errorf("cycle lengths %d %d %d %d", CycleLen(1), CycleLen(2), CycleLen(3), CycleLen(4))
	}
}
