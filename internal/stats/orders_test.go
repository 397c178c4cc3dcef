package stats

import (
	"fmt"
	"reflect"
	"testing"
)

func TestABBA(t *testing.T) {
	tests := []struct {
		name   string
		nPairs int
		want   [][]int
	}{
		{name: "zero", nPairs: 0, want: nil},
		{name: "one", nPairs: 1, want: [][]int{{0, 1}}},
		{name: "four", nPairs: 4, want: [][]int{{0, 1}, {1, 0}, {0, 1}, {1, 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ABBA(tc.nPairs); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ABBA(%d) = %v, want %v", tc.nPairs, got, tc.want)
			}
		})
	}
}

func TestWilliamsBalance(t *testing.T) {
	for k := 2; k <= 6; k++ {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			w := Williams(k)
			wantRows, perCell := k, 1
			if k%2 == 1 {
				wantRows, perCell = 2*k, 2
			}
			if len(w) != wantRows {
				t.Fatalf("%d rows, want %d", len(w), wantRows)
			}
			position := make([][]int, k) // position[pos][arm] counts
			for i := range position {
				position[i] = make([]int, k)
			}
			adjacent := map[[2]int]int{}
			for r, row := range w {
				if len(row) != k {
					t.Fatalf("row %d has %d entries", r, len(row))
				}
				seen := make([]bool, k)
				for pos, arm := range row {
					if arm < 0 || arm >= k || seen[arm] {
						t.Fatalf("row %d = %v is not a permutation of 0..%d", r, row, k-1)
					}
					seen[arm] = true
					position[pos][arm]++
					if pos > 0 {
						adjacent[[2]int{row[pos-1], arm}]++
					}
				}
			}
			for pos := range k {
				for arm := range k {
					if position[pos][arm] != perCell {
						t.Errorf("arm %d appears %d times at position %d, want %d", arm, position[pos][arm], pos, perCell)
					}
				}
			}
			for a := range k {
				for b := range k {
					if a == b {
						continue
					}
					if got := adjacent[[2]int{a, b}]; got != perCell {
						t.Errorf("ordered pair %d→%d adjacent %d times, want %d", a, b, got, perCell)
					}
				}
			}
		})
	}
}

func TestWilliamsSmall(t *testing.T) {
	tests := []struct {
		name string
		k    int
		want [][]int
	}{
		{name: "zero", k: 0, want: nil},
		{name: "one", k: 1, want: [][]int{{0}}},
		{name: "two", k: 2, want: [][]int{{0, 1}, {1, 0}}},
		{name: "four", k: 4, want: [][]int{{0, 1, 3, 2}, {1, 2, 0, 3}, {2, 3, 1, 0}, {3, 0, 2, 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Williams(tc.k); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Williams(%d) = %v, want %v", tc.k, got, tc.want)
			}
		})
	}
}

func TestOrders(t *testing.T) {
	tests := []struct {
		name         string
		arms, blocks int
		want         [][]int
	}{
		{name: "no arms", arms: 0, blocks: 3, want: nil},
		{name: "no blocks", arms: 2, blocks: 0, want: nil},
		{name: "one arm", arms: 1, blocks: 2, want: [][]int{{0}, {0}}},
		{name: "two arms use ABBA", arms: 2, blocks: 6, want: ABBA(6)},
		{name: "three arms cycle the 6 Williams rows", arms: 3, blocks: 8,
			want: append(Williams(3), Williams(3)[:2]...)},
		{name: "four arms", arms: 4, blocks: 4, want: Williams(4)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Orders(tc.arms, tc.blocks)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Orders(%d, %d) = %v, want %v", tc.arms, tc.blocks, got, tc.want)
			}
		})
	}
	// Rows are independent slices.
	o := Orders(3, 7)
	o[0][0] = 99
	if o[6][0] == 99 {
		t.Error("Orders rows share storage")
	}
}
