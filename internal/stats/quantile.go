package stats

import "slices"

// Quantile is the nearest-rank q-quantile of xs (0 <= q <= 1): the value at
// rank floor(q*n) of the sorted values, the largest for q = 1; 0 for no
// values. xs is not changed.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, max(0, int(q*float64(len(s)))))]
}
