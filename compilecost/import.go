package compilecost

// PredictImport returns the predicted time in seconds to import the decode
// graph of a capacity from a compiled-rung cache: the median of the
// measured imports at that capacity, else a fit of the measured medians
// against capacity. ok is false when the profile measured no import (an
// older profile, or ovtrace compile --import=false).
func (p Profile) PredictImport(capacity int) (seconds float64, ok bool) {
	var rungs []Rung
	for _, r := range p.Rungs {
		if len(r.ImportS) == 0 {
			continue
		}
		m := Median(r.ImportS)
		if r.Capacity == capacity {
			return m, true
		}
		rungs = append(rungs, Rung{Capacity: r.Capacity, MedianS: m})
	}
	if len(rungs) == 0 {
		return 0, false
	}
	return FitProfile(rungs).At(capacity), true
}

// PredictReady returns the predicted time in seconds until the decode graph
// of a capacity compiled in the background (after another graph, beside
// decoding) is ready: its import when cached and the profile measured
// imports, else its background compile (PredictBackground). basis names
// the figure: "import", or the compile kind's name; measured is whether
// the time was measured at this capacity rather than fitted.
func (p Profile) PredictReady(capacity int, cached bool) (seconds float64, measured bool, basis string) {
	if cached {
		if s, ok := p.PredictImport(capacity); ok {
			return s, p.measuredImport(capacity), BasisImport
		}
	}
	return p.PredictBackground(capacity)
}

// BasisImport is PredictReady's basis for a rung imported from a
// compiled-rung cache.
const BasisImport = "import"

func (p Profile) measuredImport(capacity int) bool {
	for _, r := range p.Rungs {
		if r.Capacity == capacity && len(r.ImportS) > 0 {
			return true
		}
	}
	return false
}

// CachedFunc returns a cost function that is base except at the capacities
// cached says are in a compiled-rung cache, where it is the predicted
// import (when the profile measured imports).
func (p Profile) CachedFunc(base func(capacity int) float64, cached func(capacity int) bool) func(capacity int) float64 {
	return func(capacity int) float64 {
		if cached(capacity) {
			if s, ok := p.PredictImport(capacity); ok {
				return s
			}
		}
		return base(capacity)
	}
}
