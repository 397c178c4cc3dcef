package compilecost

// Deadline is the one-ahead budget of one successor rung: its compile is
// launched when the rung before it is bound, and must finish before decode
// fills that rung.
type Deadline struct {
	// Capacity is the successor's capacity.
	Capacity int `json:"capacity"`
	// CompileS is its predicted compile time, seconds.
	CompileS float64 `json:"compile_s"`
	// DecodeS is the window the compile must fit in, seconds: from binding
	// the previous rung to its boundary, i.e. the prefill (first rung) or the
	// migrate into it, plus its decode steps, each slowed by
	// BackgroundSlowdown as they would be while the compile runs.
	DecodeS float64 `json:"decode_s"`
	// SlackS is DecodeS - CompileS; negative when the deadline is missed.
	SlackS float64 `json:"slack_s"`
	// Met reports SlackS >= 0 (within 1e-9 s of rounding).
	Met bool `json:"met"`
}

// deadlineTol absorbs rounding in window sums such as 100 × 0.1 s.
const deadlineTol = 1e-9

// Deadlines returns the one-ahead deadline of every successor rung the
// request reaches (the rungs after the first, up to the one holding the
// last decoded token), in ladder order. It assumes each compile starts as
// soon as its predecessor is bound; queueing behind a slow earlier compile
// is what Simulate adds. For the direct policy, which has no successors, it
// returns nil.
func Deadlines(cfg SimConfig) ([]Deadline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p, err := newPlan(cfg)
	if err != nil {
		return nil, err
	}
	return p.deadlines()
}

// deadlines computes the one-ahead deadlines of p's successor rungs.
func (p *plan) deadlines() ([]Deadline, error) {
	if p.cfg.Policy == PolicyDirect {
		return nil, nil
	}
	var out []Deadline
	for j := p.r0 + 1; j <= p.rEnd; j++ {
		prev := j - 1
		lead := p.prefillS
		if p.cfg.Prefill == PrefillAuto {
			lead = 0 // the successor launches after the prompt
		}
		if prev > p.r0 {
			m, err := p.migrate(prev - 1)
			if err != nil {
				return nil, err
			}
			lead = m
		}
		window := lead + float64(p.count(prev))*p.decodeStep[prev]*p.slowdown()
		c := p.compile[j]
		slack := window - c
		out = append(out, Deadline{
			Capacity: p.ladder[j],
			CompileS: c,
			DecodeS:  window,
			SlackS:   slack,
			Met:      slack >= -deadlineTol,
		})
	}
	return out, nil
}
