package compilecost

import (
	"fmt"
	"math"
)

// Names of the fit models (Fit.Model).
const (
	// FitNone means there was nothing to fit; At returns 0.
	FitNone = "none"
	// FitConstant is t = a, used for a single measured rung.
	FitConstant = "a"
	// FitLinear is t = a + b·C, least squares.
	FitLinear = "a+b*C"
	// FitPower is t = a·C^b, least squares in log-log space.
	FitPower = "a*C^b"
)

// Fit models median compile time t (seconds) against capacity C (tokens).
type Fit struct {
	// Model is one of FitNone, FitConstant, FitLinear, FitPower.
	Model string `json:"model"`
	// A is the intercept (line), the scale (power law) or the constant.
	A float64 `json:"a"`
	// B is the slope (line) or the exponent (power law); unused by FitConstant.
	B float64 `json:"b"`
	// R2 is the coefficient of determination on the measured medians, in
	// linear space for both models so that they compare. It is 1 for a fit
	// through every point and 0 when undefined (fewer than two rungs).
	R2 float64 `json:"r2"`
	// MaxRelErr is the largest |fit-measured|/measured over the rungs.
	MaxRelErr float64 `json:"max_rel_err"`
	// N is the number of rungs fitted.
	N int `json:"n"`
	// Note says why a model was chosen or what limits the fit.
	Note string `json:"note,omitempty"`
	// FloorS and FloorCapacity bound the fit from below (Floor): the
	// smallest positive median measured and the smallest capacity measured
	// with one. Absent from older profiles, which Load fills in.
	FloorS        float64 `json:"floor_s,omitempty"`
	FloorCapacity int     `json:"floor_capacity,omitempty"`
}

// Floor is the least compile time the fit predicts at capacity: the rule
// against extrapolating to free compiles. Compiling a graph of more slots
// is never cheaper, and a graph of fewer slots costs at most
// proportionally less (its fixed part, the weights and the layer graph,
// does not shrink at all), so:
//
//   - a fit that falls with capacity (Falls: a line of negative slope, a
//     power law of negative exponent; noise around a flat cost, or a
//     hand-edited cost.json) is not used: FitProfile keeps the constant
//     model at the mean of the medians instead, Checked refits a stored
//     one, and the note says so;
//   - no prediction is below the floor: the smallest positive median
//     measured (FloorS) at or above the smallest capacity measured
//     (FloorCapacity), and that cost scaled by C/FloorCapacity below it,
//     so a line with a negative intercept no longer predicts 0 s for
//     small rungs.
//
// A fit without a floor (no positive median measured) has Floor 0.
func (f Fit) Floor(capacity int) float64 {
	if f.FloorS <= 0 || f.FloorCapacity <= 0 || capacity <= 0 {
		return 0
	}
	return f.FloorS * min(1, float64(capacity)/float64(f.FloorCapacity))
}

// Falls reports whether the fit predicts less for more capacity.
func (f Fit) Falls() bool {
	return (f.Model == FitLinear || f.Model == FitPower) && f.B < 0
}

// At returns the fit's compile time at capacity, never below Floor nor 0
// (a linear fit with a negative intercept would otherwise predict negative
// times for small capacities). Unknown models and FitNone return Floor.
func (f Fit) At(capacity int) float64 {
	return max(f.at(capacity), f.Floor(capacity))
}

// at is the model's value at capacity, clamped at 0.
func (f Fit) at(capacity int) float64 {
	c := float64(capacity)
	var t float64
	switch f.Model {
	case FitConstant:
		t = f.A
	case FitLinear:
		t = f.A + f.B*c
	case FitPower:
		if c <= 0 {
			return 0
		}
		t = f.A * math.Pow(c, f.B)
	}
	if math.IsNaN(t) || t < 0 {
		return 0
	}
	return t
}

// FitProfile fits median compile time against capacity.
//
// With two or more rungs it fits both a line t = a + b·C (ordinary least
// squares) and a power law t = a·C^b (least squares on log t against log C,
// possible when every median is positive) and keeps the one with the higher
// R², both R² computed on t itself. A tie (within 1e-12) keeps the line, the
// simpler extrapolation. Two rungs are fitted exactly by either, so the line
// is kept and the note says so. One rung gives the constant model t = a;
// no rungs give FitNone. The rungs should have distinct capacities (as a
// valid Profile does); if all capacities are equal the mean is used. A
// model that falls with capacity is replaced by the constant model at the
// mean of the medians, and the fit's floor is set (see Floor).
func FitProfile(rungs []Rung) Fit {
	f := fitProfile(rungs)
	if f.Falls() { // neither model may fall with capacity (see Floor)
		was := fmt.Sprintf("%s fitted b = %.4g, a cost falling with capacity (noise, or no dependence on it)", f.Model, f.B)
		f = Fit{Model: FitConstant, A: meanMedian(rungs), N: f.N, Note: was + ": constant model at the mean of the medians"}
		f.R2, f.MaxRelErr = score(f, capacities(rungs), medians(rungs))
	}
	f.FloorS, f.FloorCapacity = floorOf(rungs)
	return f
}

func capacities(rungs []Rung) []float64 {
	out := make([]float64, len(rungs))
	for i, r := range rungs {
		out[i] = float64(r.Capacity)
	}
	return out
}

func medians(rungs []Rung) []float64 {
	out := make([]float64, len(rungs))
	for i, r := range rungs {
		out[i] = r.median()
	}
	return out
}

func meanMedian(rungs []Rung) float64 {
	var sum float64
	for _, r := range rungs {
		sum += r.median()
	}
	return sum / float64(len(rungs))
}

// floorOf is the smallest positive median of the rungs and the smallest
// capacity measured with a positive median (0, 0 when there is none).
func floorOf(rungs []Rung) (seconds float64, capacity int) {
	for _, r := range rungs {
		m := r.median()
		if m <= 0 || math.IsNaN(m) || math.IsInf(m, 0) || r.Capacity <= 0 {
			continue
		}
		if seconds == 0 || m < seconds {
			seconds = m
		}
		if capacity == 0 || r.Capacity < capacity {
			capacity = r.Capacity
		}
	}
	return seconds, capacity
}

// Checked is f made safe to extrapolate from the rungs it was fitted to (a
// stored fit, maybe from an older or a hand-edited cost.json): a fit that
// falls with capacity is replaced by FitProfile's, with a note saying why,
// and the floor is taken from the rungs. Without rungs f is returned as it
// is.
func Checked(f Fit, rungs []Rung) Fit {
	s, c := floorOf(rungs)
	if c == 0 {
		return f
	}
	if f.Falls() {
		was := fmt.Sprintf("stored fit %s with b = %.4g falls with capacity", f.Model, f.B)
		f = FitProfile(rungs)
		f.Note = was + "; refitted: " + f.Note
		return f
	}
	f.FloorS, f.FloorCapacity = s, c
	return f
}

func fitProfile(rungs []Rung) Fit {
	n := len(rungs)
	switch n {
	case 0:
		return Fit{Model: FitNone, Note: "no rungs measured"}
	case 1:
		return Fit{Model: FitConstant, A: rungs[0].median(), N: 1, Note: "one rung: constant model"}
	}
	xs := make([]float64, n)
	ys := make([]float64, n)
	allPositive := true
	for i, r := range rungs {
		xs[i] = float64(r.Capacity)
		ys[i] = r.median()
		if xs[i] <= 0 || ys[i] <= 0 {
			allPositive = false
		}
	}
	a, b, ok := leastSquares(xs, ys)
	if !ok {
		var mean float64
		for _, y := range ys {
			mean += y
		}
		f := Fit{Model: FitConstant, A: mean / float64(n), N: n, Note: "all capacities equal: constant model"}
		f.R2, f.MaxRelErr = score(f, xs, ys)
		return f
	}
	best := Fit{Model: FitLinear, A: a, B: b, N: n}
	best.R2, best.MaxRelErr = score(best, xs, ys)

	if allPositive {
		lx := make([]float64, n)
		ly := make([]float64, n)
		for i := range xs {
			lx[i], ly[i] = math.Log(xs[i]), math.Log(ys[i])
		}
		if la, pb, ok := leastSquares(lx, ly); ok {
			pow := Fit{Model: FitPower, A: math.Exp(la), B: pb, N: n}
			pow.R2, pow.MaxRelErr = score(pow, xs, ys)
			if pow.R2 > best.R2+1e-12 {
				pow.Note = fmt.Sprintf("power law R² %.6f beats line R² %.6f", pow.R2, best.R2)
				return pow
			}
			best.Note = fmt.Sprintf("line R² %.6f, power law R² %.6f", best.R2, pow.R2)
		}
	} else {
		best.Note = "a median is not positive: power law not fitted"
	}
	if n == 2 {
		best.Note = "two rungs: exact line, no residual degrees of freedom"
	}
	return best
}

// leastSquares fits y = a + b·x; ok is false when x has no spread.
func leastSquares(xs, ys []float64) (a, b float64, ok bool) {
	n := float64(len(xs))
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= n
	my /= n
	var sxx, sxy float64
	for i := range xs {
		dx := xs[i] - mx
		sxx += dx * dx
		sxy += dx * (ys[i] - my)
	}
	if sxx == 0 {
		return 0, 0, false
	}
	b = sxy / sxx
	return my - b*mx, b, true
}

// score returns R² and the maximum relative error of f on the points, both
// in linear space, using the unclamped model value.
func score(f Fit, xs, ys []float64) (r2, maxRel float64) {
	var my float64
	for _, y := range ys {
		my += y
	}
	my /= float64(len(ys))
	var ssRes, ssTot float64
	for i, x := range xs {
		var pred float64
		switch f.Model {
		case FitConstant:
			pred = f.A
		case FitLinear:
			pred = f.A + f.B*x
		case FitPower:
			pred = f.A * math.Pow(x, f.B)
		}
		res := ys[i] - pred
		ssRes += res * res
		d := ys[i] - my
		ssTot += d * d
		if ys[i] != 0 {
			maxRel = max(maxRel, math.Abs(res)/math.Abs(ys[i]))
		}
	}
	switch {
	case ssTot > 0:
		r2 = 1 - ssRes/ssTot
	case ssRes <= 1e-24*float64(len(ys)):
		r2 = 1 // flat data, fitted exactly
	}
	return r2, maxRel
}
