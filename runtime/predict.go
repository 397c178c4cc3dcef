package runtime

import "github.com/ovtoolkit/ovrun/compilecost"

// Predictor predicts how long a graph takes to be ready from a
// compile-cost profile, and corrects the prediction online from the
// compiles that finished (Learn). The sequential ladder's schedule
// (Budgeted) and the batched engine's static variants both budget with it.
type Predictor struct {
	profile *compilecost.Profile
	// ratios are actual/profile of the finished compiles, per basis: the
	// online correction (Correction).
	ratios map[string][]float64
}

// NewPredictor predicts from profile.
func NewPredictor(profile *compilecost.Profile) *Predictor {
	return &Predictor{profile: profile, ratios: map[string][]float64{}}
}

// Prediction is what a Predictor says of a graph.
type Prediction struct {
	Seconds    float64 // ProfileS x Correction
	ProfileS   float64 // the profile's figure
	Correction float64
	Measured   bool   // the profile measured this capacity (not the fit)
	Basis      string // the figure's kind: "import", "decode.under_decode", "decode.successor" ...
}

// Predict is the time until capacity's graph is ready: PredictReady's
// figure (its import where cached says the compiled-rung cache holds it)
// times the correction learnt for its basis. A compile measured under
// decode runs at that pace only while decoding goes on beside it: with
// overlap >= 0, the seconds of decoding it is expected to have beside it,
// the figure is compilecost.Overlapped of the under-decode and solo
// (successor) figures; overlap < 0 (not known yet) keeps the under-decode
// figure.
func (p *Predictor) Predict(capacity int, cached bool, overlap float64) Prediction {
	s, measured, basis := p.profile.PredictReady(capacity, cached)
	if basis == compilecost.UnderDecodeKind.String() && overlap >= 0 {
		solo, _ := p.profile.PredictSuccessor(capacity)
		s = compilecost.Overlapped(s, solo, overlap)
	}
	c := p.Correction(basis)
	return Prediction{Seconds: s * c, ProfileS: s, Correction: c, Measured: measured, Basis: basis}
}

// Correction is the factor applied to the profile's figures of a basis:
// the median of actual/profile over the compiles of that basis that have
// finished (robust to one outlier, a compile that met a page fault storm),
// 1 before the first.
func (p *Predictor) Correction(basis string) float64 {
	if r := p.ratios[basis]; len(r) > 0 {
		return compilecost.Median(r)
	}
	return 1
}

// Learn records a finished compile of a basis whose profile figure was
// profileS and that took actualS.
func (p *Predictor) Learn(basis string, profileS, actualS float64) {
	if profileS > 0 && actualS > 0 {
		p.ratios[basis] = append(p.ratios[basis], actualS/profileS)
	}
}

// NewBudget opens a budget of capacity from a prediction, launched for a
// reason with window seconds left before a sequence needs it (0: not known).
func NewBudget(capacity int, p Prediction, window float64, reason string) *Budget {
	bu := &Budget{Capacity: capacity, PredictedS: p.Seconds, Measured: p.Measured, WindowS: window,
		Imported: p.Basis == compilecost.BasisImport, ProfileS: p.ProfileS, Basis: p.Basis, Correction: p.Correction, Reason: reason}
	if miss := p.Seconds - window; window != 0 && miss > 0 {
		bu.MissedS = miss
	}
	return bu
}

// Finish fills what the compile took and reports whether it overran.
func (bu *Budget) Finish(seconds float64) (overran bool) {
	bu.ActualS = seconds
	if bu.PredictedS > 0 {
		bu.Error = seconds/bu.PredictedS - 1
	}
	if o := seconds - bu.PredictedS; o > 0 && !bu.Reused { // a reused rung compiles nothing to budget
		bu.OverrunS = o
		return true
	}
	return false
}
