package stats

import (
	"math"
	"testing"
)

// bruteSignFlip is an independent reference: recursive enumeration of all
// sign vectors comparing means, with an absolute tie tolerance.
func bruteSignFlip(d []float64) float64 {
	obs := math.Abs(Mean(d))
	var hits, total int
	var rec func(i int, s float64)
	rec = func(i int, s float64) {
		if i == len(d) {
			total++
			if math.Abs(s/float64(len(d))) >= obs-1e-12 {
				hits++
			}
			return
		}
		rec(i+1, s+d[i])
		rec(i+1, s-d[i])
	}
	rec(0, 0)
	return float64(hits) / float64(total)
}

func TestSignFlipP(t *testing.T) {
	tests := []struct {
		name  string
		diffs []float64
		want  float64
	}{
		{name: "empty", diffs: nil, want: 1},
		{name: "one positive", diffs: []float64{3}, want: 1},
		{name: "five all positive", diffs: []float64{1.2, 0.8, 2.5, 1.9, 0.4}, want: 2.0 / 32},
		{name: "five all negative", diffs: []float64{-19, -18.5, -20, -19.2, -18.9}, want: 0.0625},
		{name: "six all positive", diffs: []float64{1, 2, 3, 4, 5, 6}, want: 0.03125},
		{name: "all zero", diffs: []float64{0, 0, 0}, want: 1},
		{name: "equal magnitudes tie exactly", diffs: []float64{0.1, 0.1, 0.1, 0.1, 0.1}, want: 2.0 / 32},
		// Hand count (and bruteSignFlip): 10 of 128 assignments reach |Σ| >= 5.5.
		{name: "mixed signs", diffs: []float64{1.5, -0.5, 2.0, 0.7, -0.2, 1.1, 0.9}, want: 10.0 / 128},
		{name: "twenty all positive is exact", diffs: ramp(20, 1), want: 2.0 / (1 << 20)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := SignFlipP(tc.diffs); math.Abs(got-tc.want) > 1e-15 {
				t.Errorf("SignFlipP = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSignFlipMatchesBruteForce(t *testing.T) {
	sets := []struct {
		name  string
		diffs []float64
	}{
		{name: "small noisy", diffs: []float64{0.3, -0.1, 0.25, 0.05, -0.4, 0.2}},
		{name: "seed savings", diffs: []float64{-18.7, -19.3, -19.0, -18.9, -19.1, -18.8, 0.2, -0.1}},
		{name: "integers with ties", diffs: []float64{1, -1, 2, -2, 3, 1, 1, 0, 2}},
	}
	for _, tc := range sets {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := SignFlipP(tc.diffs), bruteSignFlip(tc.diffs); math.Abs(got-want) > 1e-15 {
				t.Errorf("SignFlipP = %v, brute force %v", got, want)
			}
		})
	}
}

func TestSignFlipMonteCarlo(t *testing.T) {
	// 24 pairs, all positive: the exact p is 2/2^24 ≈ 1.2e-7, so the estimate
	// sits at its floor 1/(draws+1) give or take a chance hit; a balanced set
	// has p near 1.
	if got := SignFlipP(ramp(24, 1)); got < 1.0/(SignFlipDraws+1) || got > 5.0/(SignFlipDraws+1) {
		t.Errorf("all positive, n=24: p = %v, want about %v", got, 1.0/(SignFlipDraws+1))
	}
	balanced := make([]float64, 22)
	for i := range balanced {
		balanced[i] = float64(i%2*2-1) * float64(i/2+1) // -1, 1, -2, 2, ...
	}
	if got := SignFlipP(balanced); got < 0.99 {
		t.Errorf("balanced, n=22: p = %v, want about 1", got)
	}
	// Deterministic: same input, same p.
	d := ramp(25, -0.3)
	for i := range d {
		d[i] = math.Sin(float64(i)) + 0.2
	}
	p1, p2 := SignFlipP(d), SignFlipP(d)
	if p1 != p2 {
		t.Errorf("Monte Carlo p not deterministic: %v then %v", p1, p2)
	}
	// The estimate is close to the exact value of an equivalent statistic:
	// compare with a normal approximation of Σ±d (variance Σd²), tolerance
	// 0.01 (Monte Carlo SE at 200000 draws is about 0.001).
	var sum, ss float64
	for _, x := range d {
		sum += x
		ss += x * x
	}
	approx := math.Erfc(math.Abs(sum) / math.Sqrt(2*ss))
	if math.Abs(p1-approx) > 0.02 {
		t.Errorf("Monte Carlo p = %v, normal approximation %v", p1, approx)
	}
}

func ramp(n int, start float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = start + float64(i)
	}
	return out
}
