package compilecost

import (
	"math"
	"os"
	"path/filepath"
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
	if f.Model != FitLinear {
		t.Fatalf("model %s, want the line", f.Model)
	}
	var ssRes, ssTot, maxRel float64
	mean := (10.0 + 21 + 39 + 82) / 4
	for _, r := range rungs {
		res := r.MedianS - (f.A + f.B*float64(r.Capacity)) // the model itself, not At's floor
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

// TestFitNeverFallsNorPredictsFree: compile cost never falls with capacity
// and never reaches 0 s: a falling fit becomes the constant model, and no
// prediction is below the smallest measured cost (scaled by capacity under
// the smallest rung).
func TestFitNeverFallsNorPredictsFree(t *testing.T) {
	falling := []Rung{{Capacity: 1024, MedianS: 5}, {Capacity: 2048, MedianS: 4}, {Capacity: 4096, MedianS: 3}}
	f := FitProfile(falling)
	if f.Falls() || f.Model != FitConstant || !near(f.A, 4, 1e-12) || !strings.Contains(f.Note, "falling with capacity") {
		t.Errorf("falling medians: fit %+v, want the constant 4 s with a note", f)
	}
	for _, c := range []int{64, 512, 1024, 8192, 1 << 20} {
		if got, floor := f.At(c), 3*min(1, float64(c)/1024); got < floor || got <= 0 {
			t.Errorf("falling medians: At(%d) = %v, want at least %v", c, got, floor)
		}
	}
	power := rungsOf([]int{1024, 2048, 4096}, func(c float64) float64 { return 100 * math.Pow(c, -0.5) })
	if f := FitProfile(power); f.Falls() || f.At(1<<20) < power[2].MedianS {
		t.Errorf("falling power law: fit %+v predicts %v at 1M", f, f.At(1<<20))
	}
	// A rising line with a negative intercept: 0 s below 512 before.
	steep := rungsOf([]int{1024, 2048, 4096}, func(c float64) float64 { return c/512 - 1 })
	f = FitProfile(steep)
	if f.Model != FitLinear || f.A >= 0 {
		t.Fatalf("steep line: fit %+v, want a line with a negative intercept", f)
	}
	if got := f.At(256); !near(got, 1*256.0/1024, 1e-12) {
		t.Errorf("steep line: At(256) = %v, want the floor %v", got, 256.0/1024)
	}

	// A stored fit is checked against the rungs: a falling one is
	// refitted with a note, another gets the floor.
	stored := Checked(Fit{Model: FitLinear, A: 9, B: -0.002}, falling)
	if stored.Falls() || !strings.Contains(stored.Note, "stored fit") || stored.At(8192) < 3 {
		t.Errorf("stored falling fit: %+v", stored)
	}
	stored = Checked(Fit{Model: FitLinear, A: -10, B: 0.001}, falling)
	if stored.A != -10 || stored.At(2048) != 3 {
		t.Errorf("stored fit below the floor: %+v, At(2048) = %v, want 3", stored, stored.At(2048))
	}
}

// TestLoadChecksAStoredFit: a cost.json whose fit falls with capacity is
// refitted on Load, and Save writes the floor.
func TestLoadChecksAStoredFit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cost.json")
	body := `{"model":"m","device":"CPU","rungs":[{"capacity":1024,"compile_s":[5]},{"capacity":2048,"compile_s":[4]}],
		"fit":{"model":"a+b*C","a":6,"b":-0.001}}`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Fit.Falls() || !strings.Contains(p.Fit.Note, "falls with capacity") {
		t.Errorf("fit %+v, want a refit with a note", p.Fit)
	}
	for _, c := range []int{4096, 8192, 65536} {
		if s, _ := p.Predict(c); s < 4 {
			t.Errorf("Predict(%d) = %v, want at least the smallest measured 4 s", c, s)
		}
	}
	if err := p.Save(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), `"floor_s": 4`) || !strings.Contains(string(b), `"floor_capacity": 1024`) {
		t.Errorf("saved profile lacks the floor:\n%s", b)
	}
}
