package stats

import (
	"errors"
	"fmt"
	"math"
)

// Errors returned for input that cannot be summarized.
var (
	// ErrNoPairs means there were no observations.
	ErrNoPairs = errors.New("stats: no paired observations")
	// ErrLengthMismatch means control and treatment hold different numbers of values.
	ErrLengthMismatch = errors.New("stats: control and treatment differ in length")
	// ErrNonFinite means a value was NaN or infinite.
	ErrNonFinite = errors.New("stats: value is NaN or infinite")
)

// Summary is a paired-t summary of treatment minus control.
//
// Every field is finite. Quantities that are undefined are left zero and
// flagged: CIDefined is false with fewer than two pairs, PctDefined is false
// when the control mean is zero.
type Summary struct {
	// N is the number of pairs.
	N int
	// ControlMean and TreatmentMean are the arm means.
	ControlMean, TreatmentMean float64
	// DiffMean is the mean of treatment[i]-control[i].
	DiffMean float64
	// PctChange is DiffMean / ControlMean * 100; valid when PctDefined.
	PctChange float64
	// PctDefined reports whether ControlMean is non-zero.
	PctDefined bool
	// DiffSD is the sample standard deviation (n-1 denominator) of the
	// differences; 0 with one pair.
	DiffSD float64
	// TCrit is the 0.975 quantile of Student's t with N-1 degrees of freedom;
	// valid when CIDefined.
	TCrit float64
	// CI95Low and CI95High bound the two-sided 95% confidence interval of the
	// mean difference, DiffMean ± TCrit·DiffSD/√N. With zero variance the
	// interval collapses to DiffMean. Valid when CIDefined.
	CI95Low, CI95High float64
	// CIDefined reports whether N >= 2, so that the interval exists.
	CIDefined bool
}

// PairedT summarizes paired observations: control[i] and treatment[i] come
// from the same block (the same pair of runs). It returns ErrNoPairs,
// ErrLengthMismatch or ErrNonFinite (wrapped, naming the index) for unusable
// input. One pair is accepted: its Summary has means and a difference but
// CIDefined is false.
func PairedT(control, treatment []float64) (Summary, error) {
	if err := checkPairs(control, treatment); err != nil {
		return Summary{}, err
	}
	n := len(control)
	diffs := make([]float64, n)
	for i := range control {
		diffs[i] = treatment[i] - control[i]
	}
	s := Summary{
		N:             n,
		ControlMean:   Mean(control),
		TreatmentMean: Mean(treatment),
		DiffMean:      Mean(diffs),
	}
	if s.ControlMean != 0 {
		s.PctChange = s.DiffMean / s.ControlMean * 100
		s.PctDefined = true
	}
	if n < 2 {
		return s, nil
	}
	s.DiffSD = StdDev(diffs)
	s.TCrit = TQuantile(0.975, float64(n-1))
	half := s.TCrit * s.DiffSD / math.Sqrt(float64(n))
	s.CI95Low, s.CI95High = s.DiffMean-half, s.DiffMean+half
	s.CIDefined = true
	return s, nil
}

// checkPairs validates paired input.
func checkPairs(control, treatment []float64) error {
	if len(control) != len(treatment) {
		return fmt.Errorf("%w: %d control values, %d treatment values", ErrLengthMismatch, len(control), len(treatment))
	}
	if len(control) == 0 {
		return ErrNoPairs
	}
	for i := range control {
		if !isFinite(control[i]) {
			return fmt.Errorf("%w: control[%d] = %v", ErrNonFinite, i, control[i])
		}
		if !isFinite(treatment[i]) {
			return fmt.Errorf("%w: treatment[%d] = %v", ErrNonFinite, i, treatment[i])
		}
	}
	return nil
}

func isFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Mean returns the arithmetic mean of xs, or 0 for an empty slice.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	// Two-pass mean: sum, then correct by the mean residual, which keeps
	// large offsets (e.g. timestamps) from eating small differences.
	var sum float64
	for _, x := range xs {
		sum += x
	}
	m := sum / float64(len(xs))
	var r float64
	for _, x := range xs {
		r += x - m
	}
	return m + r/float64(len(xs))
}

// StdDev returns the sample standard deviation of xs (n-1 denominator), or 0
// when there are fewer than two values.
func StdDev(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	m := Mean(xs)
	var ss float64
	for _, x := range xs {
		d := x - m
		ss += d * d
	}
	return math.Sqrt(ss / float64(len(xs)-1))
}
