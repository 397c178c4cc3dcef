package runtime

import "github.com/ovtoolkit/ovrun/compilecost"

// Budget is one rung's compile budget from a compile-cost profile: the
// predicted compile time, the decode window it had to fit in when it was
// launched, and what actually happened.
type Budget struct {
	Capacity   int     `json:"capacity"`
	PredictedS float64 `json:"predicted_s"`          // T_compile from the profile
	Measured   bool    `json:"measured"`             // the profile measured this capacity (not the fit)
	WindowS    float64 `json:"window_s"`             // predicted T_decode of the tokens before its boundary
	Lookahead  int     `json:"lookahead"`            // rungs ahead of the decoding one at launch
	ActualS    float64 `json:"actual_s"`             // compile time observed
	OverrunS   float64 `json:"overrun_s"`            // ActualS - PredictedS when positive
	MissedS    float64 `json:"deadline_missed_by_s"` // predicted miss at launch, when positive
}

// budgets plans successor launches from a compile-cost profile.
type budgets struct {
	profile *compilecost.Profile
	byCap   map[int]*Budget
	order   []int
	checked map[int]bool // rungs whose two-ahead decision was made
}

func newBudgets(p *compilecost.Profile) *budgets {
	if p == nil {
		return nil
	}
	return &budgets{profile: p, byCap: map[int]*Budget{}, checked: map[int]bool{}}
}

// open records the budget of a rung launched lookahead rungs ahead with a
// predicted decode window (0: not known yet; planAhead fills it in once the
// decode rate is measured).
func (b *budgets) open(capacity, lookahead int, window float64) *Budget {
	pred, measured := b.profile.Predict(capacity)
	bu := &Budget{Capacity: capacity, PredictedS: pred, Measured: measured, WindowS: window, Lookahead: lookahead}
	if miss := pred - window; window != 0 && miss > 0 {
		bu.MissedS = miss
	}
	b.byCap[capacity] = bu
	b.order = append(b.order, capacity)
	return bu
}

// close fills the observed compile time.
func (b *budgets) close(capacity int, actual float64) {
	bu := b.byCap[capacity]
	if bu == nil {
		return
	}
	bu.ActualS = actual
	if o := actual - bu.PredictedS; o > 0 {
		bu.OverrunS = o
	}
}

func (b *budgets) list() []Budget {
	out := make([]Budget, 0, len(b.order))
	for _, c := range b.order {
		out = append(out, *b.byCap[c])
	}
	return out
}

// stepTime is the measured seconds per decode step of the current rung, 0
// before enough steps.
func (r *run) stepTime() float64 {
	rs := r.s.Rungs[r.cur]
	if rs.FirstStep < 0 || rs.LastStep-rs.FirstStep < 7 || rs.DecodeS <= 0 {
		return 0
	}
	return rs.DecodeS / float64(rs.LastStep-rs.FirstStep+1)
}

// planAhead runs once per rung after a few decode steps: with a measured
// decode rate it predicts each pending successor's deadline, and when the
// rung after next cannot be compiled within the next rung's decode window it
// launches it now, two ahead, so it gets this rung's remaining window too.
func (r *run) planAhead() {
	b := r.budgets
	if b == nil || !r.policy.background() || b.checked[r.cur] {
		return
	}
	st := r.stepTime()
	if st == 0 {
		return
	}
	b.checked[r.cur] = true
	pos := len(r.fed) // next position to be written
	// The one-ahead successor launched at this rung's start: its window is
	// the rest of this rung.
	if next := r.cur + 1; next < len(r.rungs) {
		if bu := b.byCap[r.rungs[next]]; bu != nil && bu.WindowS == 0 {
			bu.WindowS = float64(r.rungs[r.cur]-pos) * st
			bu.MissedS = max(0, bu.PredictedS-bu.WindowS)
			if miss := bu.MissedS; miss > 0 {
				r.note("rung %d: predicted compile %.2f s exceeds the %.2f s left to its boundary; expect a wait of about %.2f s", bu.Capacity, bu.PredictedS, bu.WindowS, miss)
			}
		}
	}
	two := r.cur + 2
	if two >= len(r.rungs) || r.jobs[two] != nil {
		return
	}
	nextPred, _ := b.profile.Predict(r.rungs[r.cur+1])
	pred, _ := b.profile.Predict(r.rungs[two])
	// One ahead, rung two would start when the next rung begins decoding and
	// would have that rung's whole window.
	window := float64(r.rungs[r.cur+1]-r.rungs[r.cur]) * st
	if pred <= window {
		return
	}
	// Launched now it queues behind the next rung's compile and gets this
	// rung's remaining window as well.
	earlyWindow := float64(r.rungs[r.cur+1]-pos)*st - nextPred
	r.note("rung %d: predicted compile %.2f s exceeds rung %d's %.2f s decode window; launching it two ahead now", r.rungs[two], pred, r.rungs[r.cur+1], window)
	b.open(r.rungs[two], 2, earlyWindow)
	r.jobs[two] = r.sch.background(r.decodeSpec(two))
}

// budgetLaunch records a one-ahead launch's budget; its window is filled
// in by planAhead once the decode rate is known.
func (r *run) budgetLaunch(i int) {
	if r.budgets != nil {
		r.budgets.open(r.rungs[i], 1, 0)
	}
}

func (r *run) budgetDone(i int, j *compileJob) {
	if r.budgets != nil && j.err == nil {
		r.budgets.close(r.rungs[i], j.seconds())
		if bu := r.budgets.byCap[r.rungs[i]]; bu != nil && bu.OverrunS > 0 {
			r.note("rung %d: compile took %.2f s, %.2f s over its %.2f s budget", bu.Capacity, bu.ActualS, bu.OverrunS, bu.PredictedS)
		}
	}
}
