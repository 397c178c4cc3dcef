package compilecost

import (
	"math"
	"strings"
	"testing"
)

func rungsOf(caps []int, f func(c float64) float64) []Rung {
	out := make([]Rung, len(caps))
	for i, c := range caps {
		y := f(float64(c))
		out[i] = Rung{Capacity: c, CompileS: []float64{y}, MedianS: y}
	}
	return out
}

func near(a, b, relTol float64) bool {
	return math.Abs(a-b) <= relTol*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func TestFitProfile(t *testing.T) {
	ladder := []int{1024, 2048, 4096, 8192}
	tests := []struct {
		name      string
		rungs     []Rung
		wantModel string
		wantA     float64
		wantB     float64
		wantR2    float64
		wantN     int
		noteHas   string
	}{
		{name: "no rungs", rungs: nil, wantModel: FitNone, noteHas: "no rungs"},
		{name: "one rung is constant", rungs: rungsOf([]int{2048}, func(float64) float64 { return 7.5 }),
			wantModel: FitConstant, wantA: 7.5, wantN: 1, noteHas: "one rung"},
		{name: "two rungs: exact line", rungs: rungsOf([]int{1024, 4096}, func(c float64) float64 { return 0.01 * math.Pow(c, 1.2) }),
			wantModel: FitLinear, wantA: 0.01*math.Pow(1024, 1.2) - (0.01*math.Pow(4096, 1.2)-0.01*math.Pow(1024, 1.2))/3072*1024,
			wantB: (0.01*math.Pow(4096, 1.2) - 0.01*math.Pow(1024, 1.2)) / 3072, wantR2: 1, wantN: 2, noteHas: "two rungs"},
		{name: "exact linear data recovers a and b", rungs: rungsOf(ladder, func(c float64) float64 { return 3 + 0.002*c }),
			wantModel: FitLinear, wantA: 3, wantB: 0.002, wantR2: 1, wantN: 4},
		{name: "exact power data picks the power law", rungs: rungsOf(ladder, func(c float64) float64 { return 0.01 * math.Pow(c, 1.5) }),
			wantModel: FitPower, wantA: 0.01, wantB: 1.5, wantR2: 1, wantN: 4, noteHas: "power law"},
		{name: "sub-linear power data picks the power law", rungs: rungsOf(ladder, func(c float64) float64 { return 2 * math.Pow(c, 0.5) }),
			wantModel: FitPower, wantA: 2, wantB: 0.5, wantR2: 1, wantN: 4},
		{name: "flat data", rungs: rungsOf(ladder, func(float64) float64 { return 4 }),
			wantModel: FitLinear, wantA: 4, wantB: 0, wantR2: 1, wantN: 4},
		{name: "a zero median rules out the power law", rungs: []Rung{{Capacity: 1, MedianS: 0, CompileS: []float64{0}}, {Capacity: 2, MedianS: 1}, {Capacity: 3, MedianS: 2}},
			wantModel: FitLinear, wantA: -1, wantB: 1, wantR2: 1, wantN: 3, noteHas: "not positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := FitProfile(tc.rungs)
			if f.Model != tc.wantModel || f.N != tc.wantN {
				t.Fatalf("model %q n %d, want %q %d (fit %+v)", f.Model, f.N, tc.wantModel, tc.wantN, f)
			}
			if !near(f.A, tc.wantA, 1e-9) || !near(f.B, tc.wantB, 1e-9) || !near(f.R2, tc.wantR2, 1e-9) {
				t.Errorf("a=%.12g b=%.12g r2=%.12g, want %.12g %.12g %.12g", f.A, f.B, f.R2, tc.wantA, tc.wantB, tc.wantR2)
			}
			if tc.wantR2 == 1 && f.MaxRelErr > 1e-9 {
				t.Errorf("exact fit has max rel err %g", f.MaxRelErr)
			}
			if !strings.Contains(f.Note, tc.noteHas) {
				t.Errorf("note %q lacks %q", f.Note, tc.noteHas)
			}
		})
	}
}

func TestFitProfileNoisy(t *testing.T) {
	// Medians 10, 21, 39, 82 at 1K..8K: roughly linear; check the reported
	// R² and max relative error against a direct computation of the chosen
	// model, and that it beat the other one.
	rungs := []Rung{{Capacity: 1024, MedianS: 10}, {Capacity: 2048, MedianS: 21}, {Capacity: 4096, MedianS: 39}, {Capacity: 8192, MedianS: 82}}
	f := FitProfile(rungs)
	var ssRes, ssTot, maxRel float64
	mean := (10.0 + 21 + 39 + 82) / 4
	for _, r := range rungs {
		res := r.MedianS - f.At(r.Capacity)
		ssRes += res * res
		ssTot += (r.MedianS - mean) * (r.MedianS - mean)
		maxRel = math.Max(maxRel, math.Abs(res)/r.MedianS)
	}
	if !near(f.R2, 1-ssRes/ssTot, 1e-12) || !near(f.MaxRelErr, maxRel, 1e-12) {
		t.Errorf("fit %+v: want r2 %v max rel %v", f, 1-ssRes/ssTot, maxRel)
	}
	if f.R2 < 0.99 || f.R2 >= 1 {
		t.Errorf("r2 = %v, want in [0.99, 1)", f.R2)
	}
}

func TestFitAt(t *testing.T) {
	tests := []struct {
		name     string
		fit      Fit
		capacity int
		want     float64
	}{
		{name: "linear", fit: Fit{Model: FitLinear, A: 1, B: 0.5}, capacity: 10, want: 6},
		{name: "linear clamps negative", fit: Fit{Model: FitLinear, A: -5, B: 0.001}, capacity: 1000, want: 0},
		{name: "power", fit: Fit{Model: FitPower, A: 2, B: 2}, capacity: 3, want: 18},
		{name: "power at zero capacity", fit: Fit{Model: FitPower, A: 2, B: -1}, capacity: 0, want: 0},
		{name: "constant", fit: Fit{Model: FitConstant, A: 4}, capacity: 99, want: 4},
		{name: "none", fit: Fit{Model: FitNone}, capacity: 99, want: 0},
		{name: "unknown", fit: Fit{Model: "a*exp(b*C)", A: 1}, capacity: 99, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.fit.At(tc.capacity); got != tc.want {
				t.Errorf("At(%d) = %v, want %v", tc.capacity, got, tc.want)
			}
		})
	}
}
