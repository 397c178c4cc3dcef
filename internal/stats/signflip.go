package stats

import (
	"math"
	"math/rand/v2"
)

const (
	// SignFlipExactMax is the largest number of pairs for which SignFlipP
	// enumerates all 2^n sign assignments; above it SignFlipP samples.
	SignFlipExactMax = 20
	// SignFlipDraws is the number of random sign assignments SignFlipP draws
	// when n > SignFlipExactMax.
	SignFlipDraws = 200000
	// signFlipSeed1 and signFlipSeed2 seed the PCG generator of the Monte
	// Carlo branch, so that the same input always gives the same p.
	signFlipSeed1, signFlipSeed2 = 0x5eed51f1, 0x0b5e55ed
	// signFlipRelTol is the relative tolerance (of Σ|d|) under which a
	// permuted |sum| counts as a tie with the observed one.
	signFlipRelTol = 1e-9
)

// SignFlipP returns the two-sided p-value of the sign-flip (paired
// permutation) test of "the mean paired difference is zero".
//
// Under the null each difference is equally likely to carry either sign. The
// p-value is the fraction of sign assignments whose |mean| is at least the
// observed |mean|, ties counted as at least (within a relative tolerance of
// 1e-9 of Σ|d|, so rounding cannot split equal sums). For n <= 20 all 2^n
// assignments are enumerated and p is exact: with n pairs all of one sign
// p = 2/2^n (0.0625 for 5 pairs, 0.03125 for 6), which is why experiments use
// at least 6 pairs. For n > 20 it draws SignFlipDraws assignments from a PCG
// generator with a fixed seed (deterministic for a given input) and returns
// (hits+1)/(draws+1), the usual Monte Carlo estimate that counts the observed
// assignment and never returns 0.
//
// An empty slice gives 1. Values must be finite; NaN in gives NaN out.
func SignFlipP(diffs []float64) float64 {
	n := len(diffs)
	if n == 0 {
		return 1
	}
	var obs, abs float64
	for _, d := range diffs {
		obs += d
		abs += math.Abs(d)
	}
	if math.IsNaN(obs) || math.IsNaN(abs) || math.IsInf(abs, 0) {
		return math.NaN()
	}
	// Compare sums, not means: n is the same for every assignment.
	threshold := math.Abs(obs) - signFlipRelTol*abs
	if n <= SignFlipExactMax {
		total := uint32(1) << n
		var hits uint32
		for mask := range total {
			var s float64
			for i, d := range diffs {
				if mask&(1<<i) != 0 {
					s -= d
				} else {
					s += d
				}
			}
			if math.Abs(s) >= threshold {
				hits++
			}
		}
		return float64(hits) / float64(total)
	}
	rng := rand.New(rand.NewPCG(signFlipSeed1, signFlipSeed2))
	var hits int
	for range SignFlipDraws {
		var s float64
		var bits uint64
		for i, d := range diffs {
			if i%64 == 0 {
				bits = rng.Uint64()
			}
			if bits&1 != 0 {
				s -= d
			} else {
				s += d
			}
			bits >>= 1
		}
		if math.Abs(s) >= threshold {
			hits++
		}
	}
	return float64(hits+1) / float64(SignFlipDraws+1)
}
