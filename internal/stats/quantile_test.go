package stats

import "testing"

func TestQuantile(t *testing.T) {
	xs := []float64{9, 1, 8, 2, 7, 3, 6, 4, 5, 10}
	for _, tc := range []struct{ q, want float64 }{{0, 1}, {0.1, 2}, {0.5, 6}, {0.9, 10}, {1, 10}, {-1, 1}} {
		if got := Quantile(xs, tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if xs[0] != 9 {
		t.Error("Quantile sorted its input")
	}
	if Quantile(nil, 0.5) != 0 {
		t.Error("Quantile of no values is not 0")
	}
}
