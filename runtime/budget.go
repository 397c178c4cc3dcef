package runtime

import (
	"maps"
	"time"

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
	// Batch is the graph's batch size, for the batched engine's static
	// variants (capacity x batch); 0 for a sequential ladder's rung.
	Batch int `json:"batch,omitempty"`
	// Reason is why the compile was launched (ladder.ReasonOneAhead ...).
	Reason string `json:"reason"`
	// WaitS is the longest a sequence (or, for an admission launch, a
	// request) waited for this compile: for any other reason a missed
	// deadline.
	WaitS float64 `json:"wait_s,omitempty"`

	// LaunchS and ReadyS are when the compile was launched and its graph
	// ready (0: not yet), as offsets from a run's start (BudgetsAt).
	LaunchS float64 `json:"launch_s"`
	ReadyS  float64 `json:"ready_s,omitempty"`

	launchSeq           int // launch order, for the queue before a compile
	launchedAt, readyAt time.Time

	// Imported: the rung was in the compiled-rung cache at launch, so
	// PredictedS is the profile's import, not its compile.
	Imported bool `json:"imported,omitempty"`
	// Reused: at launch the rung would be a new infer request on a graph
	// already compiled for an earlier rung (a paged graph serves every
	// capacity): nothing to compile, PredictedS 0.
	Reused bool `json:"reused,omitempty"`
}

// Budgeted is the schedule with per-rung budgets from a compile-cost
// profile. One ahead (ovrun run) it follows ladder's launch rule: once a
// rung's decode rate is measured (ladder.RateSteps steps) it predicts each
// pending successor's deadline, and when the rung after next cannot be
// compiled within the next rung's decode window (ladder.LaunchTwoAhead) it
// launches it at once, two ahead, so that it also gets the rest of this
// rung's window. By deadline (a kept ladder: ovrun serve) it follows
// ladder's deadline rule instead (ladder.Due): nothing is launched when a
// rung is bound; after each step of any sequence, the rungs above it are
// launched once the time left before it needs them falls to their
// predicted compile plus a margin.
type Budgeted struct {
	*Predictor
	deadline bool
	rate     map[int]float64 // by rung: the last step time measured there (deadline rule)
	launches map[string]int  // by reason
	misses   map[string]int  // by kind: see Misses
	launched int             // budgets opened: the next one's launchSeq
	now      func() time.Time
	byCap    map[int]*Budget
	order    []int
	checked  map[int]bool // rungs whose two-ahead decision was made
	// Cached, when set, says whether a capacity's decode graph is in the
	// compiled-rung cache: its budget is then the profile's import time.
	Cached func(capacity int) bool
	// Reused, when set, says whether a capacity's decode graph would reuse
	// one compiled already (Reuser): its budget is then 0.
	Reused func(capacity int) bool
}

// basisReused is predict's basis for a reused graph (none: nothing compiles).
const basisReused = "reused"

// predict is the time until capacity's graph is ready: 0 for a reused
// graph, else the Predictor's (see Predict).
func (b *Budgeted) predict(capacity int, overlap float64) Prediction {
	if b.Reused != nil && b.Reused(capacity) {
		return Prediction{Correction: 1, Basis: basisReused}
	}
	return b.Predict(capacity, b.Cached != nil && b.Cached(capacity), overlap)
}

// NewBudgeted is a budgeted one-ahead schedule over profile.
func NewBudgeted(profile *compilecost.Profile) *Budgeted {
	return &Budgeted{Predictor: NewPredictor(profile), byCap: map[int]*Budget{}, checked: map[int]bool{}, launches: map[string]int{}, misses: map[string]int{}, now: time.Now}
}

// NewDeadlineBudgeted is a budgeted schedule over profile that launches by
// deadline (see Budgeted).
func NewDeadlineBudgeted(profile *compilecost.Profile) *Budgeted {
	b := NewBudgeted(profile)
	b.deadline, b.rate = true, map[int]float64{}
	return b
}

// Foreground is the first rung: only it is compiled before a sequence decodes.
func (b *Budgeted) Foreground(first, rungs int) int { return first }

// Bound launches the successor one ahead and opens its budget; the window
// is filled in by Stepped once the decode rate is known. By deadline it
// launches nothing.
func (b *Budgeted) Bound(l Launcher, i int) {
	if b.deadline {
		return
	}
	if next := i + 1; next < l.Rungs() && !l.Launched(next) {
		l.Launch(next)
		b.open(l.Capacity(next), 1, 0, -1, ladder.ReasonOneAhead)
	}
}

// Stepped makes the deadline and two-ahead decisions once per rung, or by
// deadline the deadline rule's after every step.
func (b *Budgeted) Stepped(l Launcher, cur int, st float64, pos, reach int) {
	if b.deadline {
		b.dueLaunches(l, cur, st, pos, reach)
		return
	}
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
				bu.PredictedS, bu.ProfileS, bu.Correction = p.Seconds, p.ProfileS, p.Correction
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
	nextPred := b.predict(nextCap, rest).Seconds
	window := ladder.TwoAheadWindow(caps, cur, st)
	pred := b.predict(caps[two], window).Seconds
	// One ahead, rung two would start when the next rung begins decoding and
	// would have that rung's whole window.
	if !ladder.LaunchTwoAhead(caps, cur, st, pred) {
		return
	}
	// Launched now it queues behind the next rung's compile and gets this
	// rung's remaining window as well; once it starts, the next rung
	// decodes beside it.
	// Its compile starts once the next rung's is done (nextPred from now)
	// and runs beside decoding until the sequence reaches it: the sequence
	// enters the next rung when it gets there (rest) or, when that compile
	// is late, once it is ready, then decodes the next rung's window.
	// That time, not the next rung's whole window, is its overlap and the
	// window it has to fit in.
	avail := window + max(0, rest-nextPred)
	l.Note("rung %d: predicted compile %.2f s exceeds rung %d's %.2f s decode window; launching it two ahead now", l.Capacity(two), pred, nextCap, window)
	b.open(l.Capacity(two), 2, avail, avail, ladder.ReasonTwoAhead)
	l.Launch(two)
}

// Compiled fills the observed compile time.
func (b *Budgeted) Compiled(l Launcher, i int, seconds float64) {
	bu := b.byCap[l.Capacity(i)]
	if bu == nil {
		return
	}
	if !bu.Reused {
		b.Learn(bu.Basis, bu.ProfileS, seconds)
	}
	if bu.Finish(seconds) {
		b.misses[MissActual]++
		l.Note("rung %d: compile took %.2f s, %.2f s over its %.2f s budget", bu.Capacity, bu.ActualS, bu.OverrunS, bu.PredictedS)
	}
}

// dueLaunches is the deadline rule (ladder.Due) after a step of a
// sequence on rung cur that writes position pos next, at st seconds a step
// (0 until measured: the last rate measured on the rung by any sequence).
func (b *Budgeted) dueLaunches(l Launcher, cur int, st float64, pos, reach int) {
	if st > 0 {
		b.rate[cur] = st
	} else if st = b.rate[cur]; st == 0 {
		return
	}
	caps := make([]int, l.Rungs())
	for i := range caps {
		caps[i] = l.Capacity(i)
	}
	due := ladder.DueRungs(caps, cur, pos, reach, st, b.queued(l), l.Launched, func(j int, overlap float64) float64 {
		return b.predict(caps[j], overlap).Seconds
	})
	for _, d := range due {
		b.open(caps[d.Rung], d.Rung-cur, d.LeftS, d.OverlapS(), ladder.ReasonDeadline)
		bu := b.byCap[caps[d.Rung]]
		if d.LeftS <= 0 && bu.PredictedS > 0 { // due at the last step: open takes a 0 window for unknown
			bu.MissedS = bu.PredictedS
			b.misses[MissPredicted]++
		}
		l.Launch(d.Rung)
		l.Note("rung %d: launched by deadline, %.2f s before a sequence on rung %d needs it (predicted compile %.2f s)", bu.Capacity, d.LeftS, caps[cur], bu.PredictedS)
	}
}

// queued is the predicted remainder of the background compiles launched
// and not finished: what a compile launched now waits for.
func (b *Budgeted) queued(l Launcher) float64 {
	var s float64
	for i := range l.Rungs() {
		q, elapsed := l.Queued(i)
		if bu := b.byCap[l.Capacity(i)]; q && bu != nil {
			s += max(0, bu.PredictedS-elapsed)
		}
	}
	return s
}

// Launch opens the budget of a rung launched for a reason outside the
// schedule's rules (ladder.ReasonAdmission, ladder.ReasonBoundary), which
// the caller launches, and returns the predicted seconds until it is
// ready: its compile and the queue before it.
//
// decoding says whether sequences decode beside the compile: without, it
// is predicted at the solo pace (an idle server's admission).
func (b *Budgeted) Launch(l Launcher, i int, reason string, decoding bool) float64 {
	ahead := b.queued(l)
	overlap := -1.0 // under decode throughout
	if !decoding {
		overlap = 0
	}
	b.open(l.Capacity(i), 0, 0, overlap, reason)
	return ahead + b.byCap[l.Capacity(i)].PredictedS
}

// remaining is the predicted seconds until rung i, queued or compiling,
// is ready: the remainder of its compile and of those queued before it.
func (b *Budgeted) remaining(l Launcher, i int) float64 {
	mine := b.byCap[l.Capacity(i)]
	if mine == nil {
		return -1
	}
	var s float64
	for k := range l.Rungs() {
		q, elapsed := l.Queued(k)
		if bu := b.byCap[l.Capacity(k)]; q && bu != nil && bu.launchSeq <= mine.launchSeq {
			s += max(0, bu.PredictedS-elapsed)
		}
	}
	return s
}

// Waited records that a sequence or request waited seconds for rung i's
// compile.
func (b *Budgeted) Waited(l Launcher, i int, seconds float64) {
	if bu := b.byCap[l.Capacity(i)]; bu != nil && seconds > 0 {
		if bu.WaitS == 0 && bu.Reason != ladder.ReasonAdmission {
			b.misses[MissWaited]++
		}
		bu.WaitS = max(bu.WaitS, seconds)
	}
}

// The kinds of budget miss Misses counts.
const (
	MissActual    = "actual" // the compile took longer than predicted
	MissPredicted = "missed" // predicted at launch to exceed the time left
	MissWaited    = "waited" // a sequence reached the rung before it was ready
)

// Misses counts the budgets that went wrong, by kind, since the start
// (relaunches of a rung included).
func (b *Budgeted) Misses() map[string]int { return maps.Clone(b.misses) }

// Launches counts the budgeted launches by reason, relaunches of a rung
// freed and needed again included.
func (b *Budgeted) Launches() map[string]int {
	return maps.Clone(b.launches)
}

// open records the budget of a rung launched lookahead rungs ahead with a
// predicted decode window (0: not known yet) and the decoding expected
// beside its compile (overlap, -1: not known yet), for a reason.
func (b *Budgeted) open(capacity, lookahead int, window, overlap float64, reason string) {
	p := b.predict(capacity, overlap)
	bu := NewBudget(capacity, p, window, reason)
	bu.Lookahead, bu.Reused, bu.launchSeq, bu.launchedAt = lookahead, p.Basis == basisReused, b.launched, b.now()
	if bu.Reused {
		bu.Basis = ""
	}
	if bu.MissedS > 0 {
		b.misses[MissPredicted]++
	}
	b.launched++
	if b.byCap[capacity] == nil {
		b.order = append(b.order, capacity)
	}
	b.byCap[capacity] = bu
	b.launches[reason]++
}

// Ready records when rung i's graph was ready.
func (b *Budgeted) Ready(l Launcher, i int, at time.Time) {
	if bu := b.byCap[l.Capacity(i)]; bu != nil {
		bu.readyAt = at
	}
}

// BudgetStats are a budgeted schedule's (or batched engine's) compile
// budgets: each rung's (or static variant's) latest launch, in launch
// order, the launches by reason (ladder.LaunchReasons) and the budgets
// missed by kind (MissActual ...) since the start, relaunches included.
type BudgetStats struct {
	Budgets          []Budget
	Launches, Misses map[string]int
}

// Stats are the budgets, their times as offsets from origin, and the
// counts.
func (b *Budgeted) Stats(origin time.Time) BudgetStats {
	return BudgetStats{Budgets: b.Budgets(origin), Launches: b.Launches(), Misses: b.Misses()}
}

// Budgets lists the budgets in launch order, their times as offsets from
// origin.
func (b *Budgeted) Budgets(origin time.Time) []Budget {
	out := make([]Budget, 0, len(b.order))
	for _, c := range b.order {
		bu := *b.byCap[c]
		bu.LaunchS = bu.launchedAt.Sub(origin).Seconds()
		if !bu.readyAt.IsZero() {
			bu.ReadyS = bu.readyAt.Sub(origin).Seconds()
		}
		out = append(out, bu)
	}
	return out
}
