package compilecost

import (
	"fmt"
	"math"
	"slices"
)

// Graph kinds of a compile.
const (
	// GraphDecode is a rung's decode graph (one token per call).
	GraphDecode = "decode"
	// GraphPrefill is a prefill graph of Kind.Chunk tokens per call.
	GraphPrefill = "prefill"
)

// Kind is one kind of compile: a decode graph or a prefill graph of Chunk
// tokens per call, compiled first in a fresh process or as a successor,
// after another graph in the same process (the runtime compiles the rungs
// of a ladder one after another, and the prefill graph before or after the
// first rung's decode graph). The two differ: an NPU compiler pays one-time
// set-up in the first compile, a CPU pays for faulting in fresh memory in
// later ones (docs/design.md §6).
type Kind struct {
	Graph     string // GraphDecode or GraphPrefill
	Chunk     int    // tokens per call of a prefill graph; 1 for decode
	Successor bool
	// UnderDecode (a decode successor only) is the compile as the runtime
	// makes it in the background: on its compile thread, at its nice
	// value, while the rung below decodes on the same cores.
	UnderDecode bool
}

// UnderDecodeKind is the decode graph compiled beside the decode loop of
// the rung below: what every background compile of a ladder is.
var UnderDecodeKind = Kind{Graph: GraphDecode, Chunk: 1, Successor: true, UnderDecode: true}

// String names the kind as the keys of Profile.Fits do: "decode.first",
// "decode.successor", "decode.under_decode", "prefill64.first",
// "prefill64.successor".
func (k Kind) String() string {
	g := k.Graph
	if g == GraphPrefill {
		g = fmt.Sprintf("%s%d", GraphPrefill, k.Chunk)
	}
	if k.UnderDecode {
		return g + ".under_decode"
	}
	if k.Successor {
		return g + ".successor"
	}
	return g + ".first"
}

// PrefillCost is the measured compile cost of the prefill graph of one
// capacity and chunk.
type PrefillCost struct {
	// Chunk is the prefill graph's tokens per call (> 1).
	Chunk int `json:"chunk"`
	// FirstS holds the wall time of each compile as the first of a fresh
	// process, seconds; FirstMedianS is their median.
	FirstS       []float64 `json:"first_s,omitempty"`
	FirstMedianS float64   `json:"first_median_s,omitempty"`
	// SuccessorS holds the wall time of each compile after the capacity's
	// decode graph in the same process, seconds (the order of --prefill
	// auto); SuccessorMedianS is their median.
	SuccessorS       []float64 `json:"successor_s,omitempty"`
	SuccessorMedianS float64   `json:"successor_median_s,omitempty"`
	// PeakRSSBytes is the peak resident set size seen while compiling it.
	PeakRSSBytes int64 `json:"peak_rss_bytes,omitempty"`
}

// kindMedian is the rung's median compile time of a kind, 0 when not measured.
func (r Rung) kindMedian(k Kind) float64 {
	switch {
	case k.Graph == GraphDecode && !k.Successor:
		return r.median()
	case k.Graph == GraphDecode && k.UnderDecode:
		return medianOr(r.UnderDecodeMedianS, r.UnderDecodeS)
	case k.Graph == GraphDecode:
		return medianOr(r.SuccessorMedianS, r.SuccessorS)
	}
	for _, p := range r.Prefill {
		if p.Chunk != k.Chunk {
			continue
		}
		if k.Successor {
			return medianOr(p.SuccessorMedianS, p.SuccessorS)
		}
		return medianOr(p.FirstMedianS, p.FirstS)
	}
	return 0
}

func medianOr(m float64, xs []float64) float64 {
	if m > 0 || len(xs) == 0 {
		return m
	}
	return Median(xs)
}

// Kinds lists the kinds the profile measured at some capacity, decode first.
func (p Profile) Kinds() []Kind {
	var out []Kind
	add := func(k Kind) {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	for _, r := range p.Rungs {
		if r.median() > 0 {
			add(Kind{Graph: GraphDecode, Chunk: 1})
		}
		if medianOr(r.SuccessorMedianS, r.SuccessorS) > 0 {
			add(Kind{Graph: GraphDecode, Chunk: 1, Successor: true})
		}
		if medianOr(r.UnderDecodeMedianS, r.UnderDecodeS) > 0 {
			add(UnderDecodeKind)
		}
		for _, pc := range r.Prefill {
			if medianOr(pc.FirstMedianS, pc.FirstS) > 0 {
				add(Kind{Graph: GraphPrefill, Chunk: pc.Chunk})
			}
			if medianOr(pc.SuccessorMedianS, pc.SuccessorS) > 0 {
				add(Kind{Graph: GraphPrefill, Chunk: pc.Chunk, Successor: true})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Kind) int {
		if a.UnderDecode != b.UnderDecode {
			if b.UnderDecode {
				return -1
			}
			return 1
		}
		if a.Graph != b.Graph {
			if a.Graph == GraphDecode {
				return -1
			}
			return 1
		}
		return a.Chunk - b.Chunk
	})
	return out
}

// KindRungs are the measured medians of a kind, one rung per capacity
// measured (MedianS set).
func (p Profile) KindRungs(k Kind) []Rung { return p.kindRungs(k) }

// kindRungs are the measured medians of a kind as rungs to fit.
func (p Profile) kindRungs(k Kind) []Rung {
	var out []Rung
	for _, r := range p.Rungs {
		if m := r.kindMedian(k); m > 0 {
			out = append(out, Rung{Capacity: r.Capacity, MedianS: m})
		}
	}
	return out
}

// PredictKind returns the predicted compile time in seconds of a kind at a
// capacity: the measured median when there is one, else the kind's fit (in
// Fits, or computed from the rungs). A successor kind the profile never
// measured falls back to the first-compile kind: a profile from an older
// ovtrace holds one number per rung, the decode graph compiled first. ok
// is false when the profile knows nothing of the graph (no decode rungs, or
// no prefill graph of that chunk).
func (p Profile) PredictKind(k Kind, capacity int) (seconds float64, ok bool) {
	if k.Graph == GraphDecode && !k.Successor {
		s, _ := p.Predict(capacity)
		return s, len(p.firstRungs()) > 0
	}
	for _, r := range p.Rungs {
		if r.Capacity == capacity {
			if m := r.kindMedian(k); m > 0 {
				return m, true
			}
		}
	}
	rungs := p.kindRungs(k)
	if len(rungs) == 0 {
		switch {
		case k.UnderDecode:
			return p.PredictKind(Kind{Graph: k.Graph, Chunk: k.Chunk, Successor: true}, capacity)
		case k.Successor:
			return p.PredictKind(Kind{Graph: k.Graph, Chunk: k.Chunk}, capacity)
		}
		return 0, false
	}
	f, have := p.Fits[k.String()]
	if !have {
		f = FitProfile(rungs)
	} else {
		f = Checked(f, rungs)
	}
	return f.At(capacity), true
}

// KindFunc returns PredictKind of a kind as a cost function of capacity
// (0 where the profile knows nothing of it).
func (p Profile) KindFunc(k Kind) func(capacity int) float64 {
	return func(capacity int) float64 {
		s, _ := p.PredictKind(k, capacity)
		return s
	}
}

// HasKind reports whether the profile measured a kind at some capacity
// (without falling back to another kind).
func (p Profile) HasKind(k Kind) bool { return slices.Contains(p.Kinds(), k) }

// validateKinds checks the kind fields of a rung.
func (r Rung) validateKinds(bad func(string, ...any) error) error {
	times := []struct {
		name string
		xs   []float64
	}{{"successor_s", r.SuccessorS}, {"successor_median_s", []float64{r.SuccessorMedianS}},
		{"under_decode_s", r.UnderDecodeS}, {"under_decode_median_s", []float64{r.UnderDecodeMedianS}}}
	seen := map[int]bool{}
	for i, pc := range r.Prefill {
		if pc.Chunk < 2 {
			return bad("capacity %d: prefill[%d] chunk %d is not above 1", r.Capacity, i, pc.Chunk)
		}
		if seen[pc.Chunk] {
			return bad("capacity %d: prefill chunk %d is duplicated", r.Capacity, pc.Chunk)
		}
		seen[pc.Chunk] = true
		if pc.PeakRSSBytes < 0 {
			return bad("capacity %d: prefill chunk %d: peak_rss_bytes %d is negative", r.Capacity, pc.Chunk, pc.PeakRSSBytes)
		}
		name := fmt.Sprintf("prefill[chunk %d].", pc.Chunk)
		times = append(times, struct {
			name string
			xs   []float64
		}{name + "first_s", append(slices.Clone(pc.FirstS), pc.FirstMedianS)}, struct {
			name string
			xs   []float64
		}{name + "successor_s", append(slices.Clone(pc.SuccessorS), pc.SuccessorMedianS)})
	}
	for _, f := range times {
		for j, x := range f.xs {
			if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
				return bad("capacity %d: %s[%d] = %v is not a finite non-negative time", r.Capacity, f.name, j, x)
			}
		}
	}
	return nil
}

// measuredAny reports whether the rung holds any compile time of any kind.
func (r Rung) measuredAny() bool {
	if len(r.CompileS) > 0 || r.MedianS > 0 || len(r.SuccessorS) > 0 || r.SuccessorMedianS > 0 || len(r.UnderDecodeS) > 0 {
		return true
	}
	for _, pc := range r.Prefill {
		if len(pc.FirstS) > 0 || pc.FirstMedianS > 0 || len(pc.SuccessorS) > 0 || pc.SuccessorMedianS > 0 {
			return true
		}
	}
	return false
}

// firstRungs are the rungs with a first-compile decode time.
func (p Profile) firstRungs() []Rung {
	var out []Rung
	for _, r := range p.Rungs {
		if r.median() > 0 || len(r.CompileS) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// fillKinds sets the missing medians of the kind fields and a fit for every
// kind other than the first-compiled decode graph (whose fit is Fit).
func (p *Profile) fillKinds() {
	for i := range p.Rungs {
		r := &p.Rungs[i]
		r.SuccessorMedianS = medianOr(r.SuccessorMedianS, r.SuccessorS)
		r.UnderDecodeMedianS = medianOr(r.UnderDecodeMedianS, r.UnderDecodeS)
		for j := range r.Prefill {
			pc := &r.Prefill[j]
			pc.FirstMedianS = medianOr(pc.FirstMedianS, pc.FirstS)
			pc.SuccessorMedianS = medianOr(pc.SuccessorMedianS, pc.SuccessorS)
		}
	}
	for _, k := range p.Kinds() {
		if k.Graph == GraphDecode && !k.Successor {
			continue
		}
		if f, ok := p.Fits[k.String()]; ok {
			p.Fits[k.String()] = Checked(f, p.kindRungs(k))
			continue
		}
		if p.Fits == nil {
			p.Fits = map[string]Fit{}
		}
		p.Fits[k.String()] = FitProfile(p.kindRungs(k))
	}
}

// PredictSuccessor is the predicted compile time of a capacity's decode
// graph compiled after other graphs in the same process, as every
// background compile is: the measured successor median (measured true),
// else the successor fit, else Predict's first-compile time (a profile
// without successor kinds).
func (p Profile) PredictSuccessor(capacity int) (seconds float64, measured bool) {
	return p.predictDecode(Kind{Graph: GraphDecode, Chunk: 1, Successor: true}, capacity)
}

// PredictBackground is the predicted compile time of a capacity's decode
// graph compiled in the background beside the decode loop of the rung
// below, as a ladder compiles its later rungs: the under-decode median or
// fit where the profile measured that kind (ovtrace compile
// --under-decode), else PredictSuccessor. basis names the figure used:
// the kind's String, or "decode.first" for a profile of first compiles only.
func (p Profile) PredictBackground(capacity int) (seconds float64, measured bool, basis string) {
	for _, k := range []Kind{UnderDecodeKind, {Graph: GraphDecode, Chunk: 1, Successor: true}} {
		if p.HasKind(k) {
			s, m := p.predictDecode(k, capacity)
			return s, m, k.String()
		}
	}
	s, m := p.Predict(capacity)
	return s, m, Kind{Graph: GraphDecode, Chunk: 1}.String()
}

// predictDecode is a decode kind's measured median at capacity (measured
// true), else its fit; Predict's first-compile time when the profile never
// measured the kind.
func (p Profile) predictDecode(k Kind, capacity int) (seconds float64, measured bool) {
	if !p.HasKind(k) {
		return p.Predict(capacity)
	}
	for _, r := range p.Rungs {
		if r.Capacity == capacity {
			if m := r.kindMedian(k); m > 0 {
				return m, true
			}
		}
	}
	s, _ := p.PredictKind(k, capacity)
	return s, false
}

// Overlapped is the wall time of a background compile that decoding
// overlaps for the first overlap seconds: while the rung below decodes it
// progresses at its under-decode pace (all of it in under seconds), and
// once decoding stops (the sequence waits at the boundary, or the run
// ends) at its solo pace (solo seconds for all of it). A compile that the
// window outlasts takes under; one that starts with nothing decoding,
// solo. A non-positive under or solo leaves the other figure.
func Overlapped(under, solo, overlap float64) float64 {
	switch {
	case under <= 0:
		return solo
	case solo <= 0 || overlap >= under:
		return under
	case overlap <= 0:
		return solo
	}
	return overlap + (1-overlap/under)*solo
}
