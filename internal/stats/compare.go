package stats

// Comparison is the per-endpoint report of a paired experiment (docs/design.md
// §7): arm means, paired difference and % change, paired-t 95% CI, exact
// two-sided sign-flip p, wins and the raw per-run values.
//
// It never holds NaN or ±Inf, so it always marshals to JSON. Undefined
// quantities are nil and omitted: pct_change when the control mean is zero,
// ci95_low and ci95_high with fewer than two pairs.
type Comparison struct {
	// Endpoint names the measured quantity, e.g. "critical_path_s".
	Endpoint string `json:"endpoint"`
	// N is the number of pairs.
	N int `json:"n"`
	// ControlValues are the raw control values, pair i at index i.
	ControlValues []float64 `json:"control_values"`
	// TreatmentValues are the raw treatment values, pair i at index i.
	TreatmentValues []float64 `json:"treatment_values"`
	// ControlMean is the control arm's mean.
	ControlMean float64 `json:"control_mean"`
	// TreatmentMean is the treatment arm's mean.
	TreatmentMean float64 `json:"treatment_mean"`
	// DiffMean is the mean of treatment minus control.
	DiffMean float64 `json:"diff_mean"`
	// PctChange is DiffMean / ControlMean * 100; nil when ControlMean is 0.
	PctChange *float64 `json:"pct_change,omitempty"`
	// CI95Low is the lower bound of the paired-t 95% CI of DiffMean; nil when N < 2.
	CI95Low *float64 `json:"ci95_low,omitempty"`
	// CI95High is the upper bound of that CI; nil when N < 2.
	CI95High *float64 `json:"ci95_high,omitempty"`
	// PSignFlip is the two-sided sign-flip p-value (see SignFlipP).
	PSignFlip float64 `json:"p_signflip"`
	// TreatmentWins counts pairs where treatment was strictly better.
	TreatmentWins int `json:"treatment_wins"`
}

// Compare builds the Comparison of one endpoint from paired values
// (control[i] and treatment[i] from pair i). lowerIsBetter says which
// direction counts as a win (true for times and bytes). It returns the same
// errors as PairedT.
func Compare(endpoint string, control, treatment []float64, lowerIsBetter bool) (Comparison, error) {
	s, err := PairedT(control, treatment)
	if err != nil {
		return Comparison{}, err
	}
	c := Comparison{
		Endpoint:        endpoint,
		N:               s.N,
		ControlValues:   append([]float64(nil), control...),
		TreatmentValues: append([]float64(nil), treatment...),
		ControlMean:     s.ControlMean,
		TreatmentMean:   s.TreatmentMean,
		DiffMean:        s.DiffMean,
		TreatmentWins:   Wins(control, treatment, lowerIsBetter),
	}
	if s.PctDefined {
		c.PctChange = ptr(s.PctChange)
	}
	if s.CIDefined {
		c.CI95Low, c.CI95High = ptr(s.CI95Low), ptr(s.CI95High)
	}
	diffs := make([]float64, s.N)
	for i := range diffs {
		diffs[i] = treatment[i] - control[i]
	}
	c.PSignFlip = SignFlipP(diffs)
	return c, nil
}

// Wins counts the pairs in which treatment beat control strictly: a lower
// value when lowerIsBetter, a higher one otherwise. Ties are not wins. Only
// the first min(len(control), len(treatment)) pairs are counted.
func Wins(control, treatment []float64, lowerIsBetter bool) int {
	n := min(len(control), len(treatment))
	wins := 0
	for i := range n {
		if lowerIsBetter && treatment[i] < control[i] || !lowerIsBetter && treatment[i] > control[i] {
			wins++
		}
	}
	return wins
}

func ptr(x float64) *float64 { return &x }
