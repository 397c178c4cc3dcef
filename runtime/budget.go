package runtime

import (
	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/ladder"
)

// Budget is one rung's compile budget from a compile-cost profile: the
// predicted compile time, the decode window it had to fit in when it was
// launched, and what actually happened.
type Budget struct {
	Capacity   int     `json:"capacity"`
	PredictedS float64 `json:"predicted_s"` // T_compile predicted at launch: ProfileS x Correction
	Measured   bool    `json:"measured"`    // the profile measured this capacity (not the fit)
	// ProfileS is the profile's figure; Basis names it: "import", or the
	// compile kind ("decode.under_decode" where the profile measured
	// compiles beside decoding, else "decode.successor" or
	// "decode.first"). Correction is the factor the runtime applied,
	// learnt from the compiles of the same basis that finished before
	// this one launched (the median of actual/profile; 1 before any).
	ProfileS   float64 `json:"profile_s"`
	Basis      string  `json:"basis,omitempty"`
	Correction float64 `json:"correction"`
	// Error is the prediction's relative error once the rung is ready:
	// ActualS/PredictedS - 1 (0.25: the compile took 25% longer).
	Error     float64 `json:"error"`
	WindowS   float64 `json:"window_s"`             // predicted T_decode of the tokens before its boundary
	Lookahead int     `json:"lookahead"`            // rungs ahead of the decoding one at launch
	ActualS   float64 `json:"actual_s"`             // compile time observed
	OverrunS  float64 `json:"overrun_s"`            // ActualS - PredictedS when positive
	MissedS   float64 `json:"deadline_missed_by_s"` // predicted miss at launch, when positive

	// Imported: the rung was in the compiled-rung cache at launch, so
	// PredictedS is the profile's import, not its compile.
	Imported bool `json:"imported,omitempty"`
	// Reused: at launch the rung would be a new infer request on a graph
	// already compiled for an earlier rung (a paged graph serves every
	// capacity): nothing to compile, PredictedS 0.
	Reused bool `json:"reused,omitempty"`
}

// Budgeted is the one-ahead schedule with per-rung budgets from a
// compile-cost profile, following ladder's launch rule: once a rung's
// decode rate is measured (ladder.RateSteps steps) it predicts each pending
// successor's deadline, and when the rung after next cannot be compiled
// within the next rung's decode window (ladder.LaunchTwoAhead) it launches
// it at once, two ahead, so that it also gets the rest of this rung's
// window.
type Budgeted struct {
	OneAhead
	profile *compilecost.Profile
	byCap   map[int]*Budget
	order   []int
	checked map[int]bool // rungs whose two-ahead decision was made
	// Cached, when set, says whether a capacity's decode graph is in the
	// compiled-rung cache: its budget is then the profile's import time.
	Cached func(capacity int) bool
	// Reused, when set, says whether a capacity's decode graph would reuse
	// one compiled already (Reuser): its budget is then 0.
	Reused func(capacity int) bool
	// ratios are actual/profile of the finished compiles, per basis: the
	// online correction (Correction).
	ratios map[string][]float64
}

// prediction is what predict says of a rung.
type prediction struct {
	seconds, profile, correction float64
	measured, reused             bool
	basis                        string
}

// predict is the time until capacity's graph is ready: 0 for a reused
// graph, else PredictReady's times the correction learnt for its basis.
// A compile measured under decode runs at that pace only while the rung
// below decodes: with overlap >= 0, the seconds of decoding it is expected
// to have beside it, the figure is compilecost.Overlapped of the
// under-decode and solo (successor) figures; overlap < 0 (not known yet)
// keeps the under-decode figure.
func (b *Budgeted) predict(capacity int, overlap float64) prediction {
	if b.Reused != nil && b.Reused(capacity) {
		return prediction{correction: 1, reused: true}
	}
	s, measured, basis := b.profile.PredictReady(capacity, b.Cached != nil && b.Cached(capacity))
	if basis == compilecost.UnderDecodeKind.String() && overlap >= 0 {
		solo, _ := b.profile.PredictSuccessor(capacity)
		s = compilecost.Overlapped(s, solo, overlap)
	}
	c := b.Correction(basis)
	return prediction{seconds: s * c, profile: s, correction: c, measured: measured, basis: basis}
}

// Correction is the factor the budgets apply to the profile's figures of
// a basis: the median of actual/profile over the compiles of that basis
// that have finished (robust to one outlier, a compile that met a page
// fault storm), 1 before the first.
func (b *Budgeted) Correction(basis string) float64 {
	if r := b.ratios[basis]; len(r) > 0 {
		return compilecost.Median(r)
	}
	return 1
}

// NewBudgeted is a budgeted one-ahead schedule over profile.
func NewBudgeted(profile *compilecost.Profile) *Budgeted {
	return &Budgeted{profile: profile, byCap: map[int]*Budget{}, checked: map[int]bool{}}
}

// Bound launches the successor one ahead and opens its budget; the window
// is filled in by Stepped once the decode rate is known.
func (b *Budgeted) Bound(l Launcher, i int) {
	if next := i + 1; next < l.Rungs() && !l.Launched(next) {
		l.Launch(next)
		b.open(l.Capacity(next), 1, 0, -1)
	}
}

// Stepped makes the deadline and two-ahead decisions once per rung.
func (b *Budgeted) Stepped(l Launcher, cur int, st float64, pos int) {
	if b.checked[cur] || st == 0 {
		return
	}
	b.checked[cur] = true
	// The one-ahead successor launched at this rung's start: its window,
	// and the decoding beside its compile, is the rest of this rung.
	rest := float64(l.Capacity(cur)-pos) * st
	if next := cur + 1; next < l.Rungs() {
		if bu := b.byCap[l.Capacity(next)]; bu != nil && bu.WindowS == 0 {
			bu.WindowS = rest
			if bu.ActualS == 0 { // still compiling: predicted again, now that its overlap is known
				p := b.predict(bu.Capacity, rest)
				bu.PredictedS, bu.ProfileS, bu.Correction = p.seconds, p.profile, p.correction
			}
			bu.MissedS = max(0, bu.PredictedS-bu.WindowS)
			if miss := bu.MissedS; miss > 0 {
				l.Note("rung %d: predicted compile %.2f s exceeds the %.2f s left to its boundary; expect a wait of about %.2f s", bu.Capacity, bu.PredictedS, bu.WindowS, miss)
			}
		}
	}
	two := cur + 2
	if two >= l.Rungs() || l.Launched(two) {
		return
	}
	caps := make([]int, l.Rungs())
	for i := range caps {
		caps[i] = l.Capacity(i)
	}
	nextCap := caps[cur+1]
	nextPred := b.predict(nextCap, rest).seconds
	window := ladder.TwoAheadWindow(caps, cur, st)
	pred := b.predict(caps[two], window).seconds
	// One ahead, rung two would start when the next rung begins decoding and
	// would have that rung's whole window.
	if !ladder.LaunchTwoAhead(caps, cur, st, pred) {
		return
	}
	// Launched now it queues behind the next rung's compile and gets this
	// rung's remaining window as well; once it starts, the next rung
	// decodes beside it.
	earlyWindow := float64(nextCap-pos)*st - nextPred
	l.Note("rung %d: predicted compile %.2f s exceeds rung %d's %.2f s decode window; launching it two ahead now", l.Capacity(two), pred, nextCap, window)
	b.open(l.Capacity(two), 2, earlyWindow, window)
	l.Launch(two)
}

// Compiled fills the observed compile time.
func (b *Budgeted) Compiled(l Launcher, i int, seconds float64) {
	bu := b.byCap[l.Capacity(i)]
	if bu == nil {
		return
	}
	bu.ActualS = seconds
	if bu.PredictedS > 0 {
		bu.Error = seconds/bu.PredictedS - 1
	}
	if bu.ProfileS > 0 && seconds > 0 && !bu.Reused {
		if b.ratios == nil {
			b.ratios = map[string][]float64{}
		}
		b.ratios[bu.Basis] = append(b.ratios[bu.Basis], seconds/bu.ProfileS)
	}
	if o := seconds - bu.PredictedS; o > 0 && !bu.Reused { // a reused rung compiles nothing to budget
		bu.OverrunS = o
		l.Note("rung %d: compile took %.2f s, %.2f s over its %.2f s budget", bu.Capacity, bu.ActualS, bu.OverrunS, bu.PredictedS)
	}
}

// open records the budget of a rung launched lookahead rungs ahead with a
// predicted decode window (0: not known yet) and the decoding expected
// beside its compile (overlap, -1: not known yet).
func (b *Budgeted) open(capacity, lookahead int, window, overlap float64) {
	p := b.predict(capacity, overlap)
	bu := &Budget{Capacity: capacity, PredictedS: p.seconds, Measured: p.measured, WindowS: window, Lookahead: lookahead,
		Imported: p.basis == compilecost.BasisImport, Reused: p.reused, ProfileS: p.profile, Basis: p.basis, Correction: p.correction}
	if miss := p.seconds - window; window != 0 && miss > 0 {
		bu.MissedS = miss
	}
	if b.byCap[capacity] == nil {
		b.order = append(b.order, capacity)
	}
	b.byCap[capacity] = bu
}

// Budgets lists the budgets in launch order.
func (b *Budgeted) Budgets() []Budget {
	out := make([]Budget, 0, len(b.order))
	for _, c := range b.order {
		out = append(out, *b.byCap[c])
	}
	return out
}
