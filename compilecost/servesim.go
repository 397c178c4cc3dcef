package compilecost

import (
	"cmp"
	"container/heap"
	"errors"
	"math"

	"github.com/ovtoolkit/ovrun/internal/stats"
	"github.com/ovtoolkit/ovrun/internal/traffic"
	"github.com/ovtoolkit/ovrun/ladder"
)

// The serve simulator's event loop. Virtual time t advances from event to
// event: an arrival, the end of a sequence's unit of work (its prompt or
// one decode step), the end of the running compile, an idle check. Under
// processor sharing every busy sequence progresses at the same pace, so
// each unit's end is kept as a point on a shared work clock v (solo
// seconds done by every busy sequence) in a heap: O(log n) an event.

// waitTol is the shortest wait counted: rounding in sums of step times.
const waitTol = 1e-9

type seqState int

const (
	seqAdmission seqState = iota // waiting, without a slot, for its first rung
	seqQueued                    // waiting for a slot
	seqBusy                      // prefilling or decoding a step
	seqBoundary                  // holding a slot, waiting for a rung's graph
)

type simSeq struct {
	id          int
	req         traffic.Request
	state       seqState
	prefilled   bool
	cur         int     // rung index
	steps, done int     // decode steps to run, run
	waitFrom    float64 // when its wait began
	unitStart   float64 // when its unit of work began
	vEnd        float64 // the work clock at the end of its unit
	rungSteps   int     // decode steps on the current rung
	rungS       float64 // and their time
}

// seqHeap orders busy sequences by the end of their unit, then by id.
type seqHeap []*simSeq

func (h seqHeap) Len() int { return len(h) }
func (h seqHeap) Less(i, j int) bool {
	if h[i].vEnd != h[j].vEnd {
		return h[i].vEnd < h[j].vEnd
	}
	return h[i].id < h[j].id
}
func (h seqHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *seqHeap) Push(x any)   { *h = append(*h, x.(*simSeq)) }
func (h *seqHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type simCompile struct {
	rung      int
	predicted float64 // what the deadline rule's queue counts
	started   bool
	startedAt float64
	left      float64 // share of the compile still to do
}

type simRung struct {
	launched, ready bool
	lastUsed        float64
	used            bool // lastUsed is set
	admission       []*simSeq
	boundary        []*simSeq
	ServeRung
}

type serveSim struct {
	cfg      ServeConfig
	arrivals []traffic.Request
	caps     []int
	step     []float64 // solo decode step per rung
	parallel float64

	t, v     float64
	next     int // next arrival
	busy     seqHeap
	slotQ    []*simSeq
	slots    int // sequences holding a slot
	open     map[*simSeq]bool
	waiting  int // requests arrived and not answered
	compiles []*simCompile
	rungs    []*simRung
	rate     map[int]float64 // by rung: the last step time measured there
	nextTick float64

	res         ServeResult
	reserved    int64
	ttft, waits []float64
	answered    int
}

func newServeSim(cfg ServeConfig, arrivals []traffic.Request) *serveSim {
	s := &serveSim{cfg: cfg, arrivals: arrivals, caps: cfg.Ladder, parallel: cmp.Or(cfg.Parallel, 1),
		open: map[*simSeq]bool{}, rate: map[int]float64{}, nextTick: math.Inf(1)}
	for i, c := range cfg.Ladder {
		s.step = append(s.step, cfg.DecodeStepS(c))
		r := &simRung{ServeRung: ServeRung{Capacity: c, ReadyS: -1}}
		if i == 0 {
			r.launched, r.ready, r.ReadyS = true, true, 0
		}
		s.rungs = append(s.rungs, r)
	}
	if cfg.RungIdleS > 0 {
		s.nextTick = s.tickEvery()
	}
	s.res.Requests = len(arrivals)
	s.res.Launches = map[string]int{}
	for _, r := range ladder.LaunchReasons {
		s.res.Launches[r] = 0
	}
	return s
}

// tickEvery is how often the ladder looks for idle rungs.
func (s *serveSim) tickEvery() float64 { return min(max(s.cfg.RungIdleS/4, 0.01), 1) }

// factor is how much slower than solo each busy sequence progresses.
func (s *serveSim) factor() float64 {
	if len(s.busy) <= 1 {
		return 1 // alone: its own pace
	}
	return max(1, float64(len(s.busy))/s.parallel)
}

// pace is the running compile's duration at the current state: its
// under-decode figure while sequences are busy, else its solo figure.
func (s *serveSim) pace(c *simCompile) float64 {
	capacity := s.caps[c.rung]
	if s.cfg.CompileSoloS == nil || len(s.busy) > 0 {
		return s.cfg.CompileS(capacity)
	}
	return s.cfg.CompileSoloS(capacity)
}

// predict is the runtime's prediction for rung j's compile with overlap
// seconds of decoding beside it (< 0: not known).
func (s *serveSim) predict(j int, overlap float64) float64 {
	under := s.cfg.CompileS(s.caps[j])
	if s.cfg.CompileSoloS == nil || overlap < 0 {
		return under
	}
	return Overlapped(under, s.cfg.CompileSoloS(s.caps[j]), overlap)
}

// overlap is the decoding expected beside a compile launched at admission
// or at a boundary, as the runtime's budgets take it: throughout (the
// under-decode figure) when sequences decode, none (the solo figure) when
// none does.
func (s *serveSim) overlap(decoding bool) float64 {
	if decoding {
		return -1
	}
	return 0
}

var errStalled = errors.New("serve simulation stalled: sequences wait and nothing is left to happen (a bug)")

func (s *serveSim) run() error {
	const (
		evNone = iota
		evCompile
		evUnit
		evArrival
		evTick
	)
	for s.answered+s.res.Refused < len(s.arrivals) {
		dt, ev := math.Inf(1), evNone
		if len(s.compiles) > 0 {
			c := s.compiles[0]
			if d := c.left * s.pace(c); d < dt {
				dt, ev = d, evCompile
			}
		}
		if len(s.busy) > 0 {
			if d := (s.busy[0].vEnd - s.v) * s.factor(); d < dt {
				dt, ev = max(d, 0), evUnit
			}
		}
		if s.next < len(s.arrivals) {
			if d := s.arrivals[s.next].AtS - s.t; d < dt {
				dt, ev = max(d, 0), evArrival
			}
		}
		if ev == evNone {
			return errStalled // the idle checks alone would run forever
		}
		if s.idleCandidates() {
			if every := s.tickEvery(); s.nextTick < s.t { // no check was due while nothing could be freed
				s.nextTick = math.Ceil(s.t/every) * every
			}
			if d := s.nextTick - s.t; d < dt {
				dt, ev = max(d, 0), evTick
			}
		}
		s.advance(dt)
		switch ev {
		case evCompile:
			s.compiled()
		case evUnit:
			q := heap.Pop(&s.busy).(*simSeq)
			s.v = q.vEnd
			s.unitDone(q)
		case evArrival:
			s.t = max(s.t, s.arrivals[s.next].AtS)
			s.arrive(s.arrivals[s.next])
			s.next++
		case evTick:
			s.tick()
		}
		s.fillSlots()
	}
	return nil
}

// advance moves time on by dt: the work clock and the running compile
// progress at the current paces.
func (s *serveSim) advance(dt float64) {
	if len(s.compiles) > 0 {
		c := s.compiles[0]
		if p := s.pace(c); p > 0 {
			c.left = max(0, c.left-dt/p)
		} else {
			c.left = 0
		}
	}
	if len(s.busy) > 0 {
		s.v += dt / s.factor()
	}
	s.t += dt
}

func (s *serveSim) arrive(r traffic.Request) {
	if s.cfg.Queue != QueueUnbounded && s.waiting >= s.cfg.MaxSeqs+s.cfg.Queue {
		s.res.Refused++
		return
	}
	s.waiting++
	q := &simSeq{id: s.next, req: r, steps: r.Answer - 1}
	q.cur, _ = RungFor(s.caps, r.Prompt+1)
	rg := s.rungs[q.cur]
	if rg.ready {
		q.state = seqQueued
		s.slotQ = append(s.slotQ, q)
		return
	}
	if !rg.launched {
		s.launch(q.cur, ladder.ReasonAdmission, s.predict(q.cur, s.overlap(len(s.open) > 0)))
	}
	q.state, q.waitFrom = seqAdmission, s.t
	rg.admission = append(rg.admission, q)
}

// fillSlots starts queued requests while slots are free.
func (s *serveSim) fillSlots() {
	for len(s.slotQ) > 0 && s.slots < s.cfg.MaxSeqs {
		q := s.slotQ[0]
		s.slotQ = s.slotQ[1:]
		s.slots++
		s.res.PeakSeqs = max(s.res.PeakSeqs, s.slots)
		s.open[q] = true
		s.touch(q.cur)
		s.reserve(int64(s.caps[q.cur]))
		s.enter(q, q.cur)
	}
}

// enter puts q on rung j (its first, or the next at a boundary) and starts
// its next unit, or makes it wait for j's graph.
func (s *serveSim) enter(q *simSeq, j int) {
	rg := s.rungs[j]
	if !rg.ready {
		if !rg.launched { // others may decode beside it; q waits
			s.launch(j, ladder.ReasonBoundary, s.predict(j, s.overlap(len(s.open) > 1)))
		}
		q.state, q.waitFrom = seqBoundary, s.t
		rg.boundary = append(rg.boundary, q)
		return
	}
	if j != q.cur {
		s.reserve(int64(s.caps[j] - s.caps[q.cur]))
		q.cur, q.rungSteps, q.rungS = j, 0, 0
		s.touch(j)
	}
	s.startUnit(q)
}

// startUnit begins q's prompt or its next decode step.
func (s *serveSim) startUnit(q *simSeq) {
	work := s.step[q.cur]
	if !q.prefilled {
		rate := s.cfg.PrefillTokensPerS
		if rate == 0 {
			rate = 1 / s.step[q.cur]
		}
		work = float64(q.req.Prompt) / rate
	}
	q.state, q.unitStart, q.vEnd = seqBusy, s.t, s.v+work
	heap.Push(&s.busy, q)
}

func (s *serveSim) unitDone(q *simSeq) {
	s.res.Tokens++
	if !q.prefilled {
		q.prefilled = true
		s.ttft = append(s.ttft, s.t-q.req.AtS)
	} else {
		q.done++
		q.rungSteps++
		q.rungS += s.t - q.unitStart
		st := 0.0
		if q.rungSteps >= ladder.RateSteps {
			st = q.rungS / float64(q.rungSteps)
			s.rate[q.cur] = st
		} else {
			st = s.rate[q.cur]
		}
		if st > 0 {
			s.dueLaunches(q.cur, st, q.req.Prompt+q.done, q.req.Prompt+q.steps)
		}
	}
	if q.done == q.steps {
		s.finish(q)
		return
	}
	if p := q.req.Prompt + q.done; p >= s.caps[q.cur] { // the input position of the next step
		s.enter(q, q.cur+1) // Validate made room: a rung above exists
		return
	}
	s.startUnit(q)
}

// dueLaunches is the deadline rule after a step of a sequence on rung cur
// that writes position pos next, at st seconds a step: runtime.Budgeted's.
func (s *serveSim) dueLaunches(cur int, st float64, pos, reach int) {
	due := ladder.DueRungs(s.caps, cur, pos, reach, st, s.queued(), func(j int) bool { return s.rungs[j].launched }, s.predict)
	for _, d := range due {
		s.launch(d.Rung, ladder.ReasonDeadline, s.predict(d.Rung, d.OverlapS()))
	}
}

// queued is the predicted remainder of the compiles launched and not
// finished: what a compile launched now waits for.
func (s *serveSim) queued() float64 {
	var sum float64
	for _, c := range s.compiles {
		elapsed := 0.0
		if c.started {
			elapsed = s.t - c.startedAt
		}
		sum += max(0, c.predicted-elapsed)
	}
	return sum
}

func (s *serveSim) launch(j int, reason string, predicted float64) {
	rg := s.rungs[j]
	rg.launched = true
	rg.Launches++
	s.res.Launches[reason]++
	s.compiles = append(s.compiles, &simCompile{rung: j, predicted: predicted, left: 1})
	s.startCompile()
}

func (s *serveSim) startCompile() {
	if len(s.compiles) > 0 && !s.compiles[0].started {
		s.compiles[0].started, s.compiles[0].startedAt = true, s.t
	}
}

// compiled finishes the running compile and lets its waiters go on.
func (s *serveSim) compiled() {
	c := s.compiles[0]
	s.compiles = s.compiles[1:]
	rg := s.rungs[c.rung]
	took := s.t - c.startedAt
	rg.ready = true
	rg.CompileS += took
	if rg.ReadyS < 0 {
		rg.ReadyS = s.t
	}
	s.res.Compiles++
	s.res.CompileS += took
	for _, q := range rg.admission {
		w := s.t - q.waitFrom
		rg.AdmissionWaits++
		rg.AdmissionWaitS += w
		q.state = seqQueued
		s.slotQ = append(s.slotQ, q)
	}
	rg.admission = nil
	waiters := rg.boundary
	rg.boundary = nil
	for _, q := range waiters {
		if w := s.t - q.waitFrom; w > waitTol {
			rg.BoundaryWaits++
			rg.BoundaryWaitS += w
			s.waits = append(s.waits, w)
		}
		s.enter(q, c.rung)
	}
	s.startCompile()
}

func (s *serveSim) finish(q *simSeq) {
	s.slots--
	s.waiting--
	s.answered++
	s.reserve(-int64(s.caps[q.cur]))
	s.touch(q.cur)
	delete(s.open, q)
	s.res.MakespanS = s.t
}

// reserve adds tokens of KV to the reservation and tracks its peak.
func (s *serveSim) reserve(tokens int64) {
	s.reserved += tokens * s.cfg.KVBytesPerToken
	s.res.PeakKVReservedBytes = max(s.res.PeakKVReservedBytes, s.reserved)
}

// touch records that a sequence is on rung k now.
func (s *serveSim) touch(k int) { s.rungs[k].lastUsed, s.rungs[k].used = s.t, true }

// idleCandidates reports whether an idle check could free anything: a
// rung above the first is compiled.
func (s *serveSim) idleCandidates() bool {
	if s.cfg.RungIdleS <= 0 {
		return false
	}
	for _, r := range s.rungs[1:] {
		if r.ready {
			return true
		}
	}
	return false
}

// tick is the ladder's idle check (runtime.CompiledLadder.ReleaseIdle).
func (s *serveSim) tick() {
	s.nextTick += s.tickEvery()
	for k := 1; k < len(s.rungs); k++ {
		r := s.rungs[k]
		if !r.ready || s.onOrBelow(k) {
			continue
		}
		if !r.used {
			r.lastUsed, r.used = s.t, true
		}
		if s.t-r.lastUsed < s.cfg.RungIdleS-waitTol {
			continue
		}
		r.ready, r.launched, r.used = false, false, false
		r.Releases++
		s.res.RungReleases++
	}
}

// onOrBelow reports whether an open sequence is on rung k or the rung below.
func (s *serveSim) onOrBelow(k int) bool {
	for q := range s.open {
		if q.cur == k || q.cur == k-1 {
			return true
		}
	}
	return false
}

func (s *serveSim) result() ServeResult {
	r := s.res
	r.Answered = s.answered
	if r.MakespanS > 0 {
		r.TokensPerS = float64(r.Tokens) / r.MakespanS
		r.RequestsPerS = float64(r.Answered) / r.MakespanS
	}
	r.TTFTP50S, r.TTFTP99S = stats.Quantile(s.ttft, 0.5), stats.Quantile(s.ttft, 0.99)
	r.BoundaryWaitP50S, r.BoundaryWaitP99S = stats.Quantile(s.waits, 0.5), stats.Quantile(s.waits, 0.99)
	for _, rg := range s.rungs {
		r.BoundaryWaits += rg.BoundaryWaits
		r.BoundaryWaitS += rg.BoundaryWaitS
		r.AdmissionWaits += rg.AdmissionWaits
		r.AdmissionWaitS += rg.AdmissionWaitS
		r.Rungs = append(r.Rungs, rg.ServeRung)
	}
	return r
}
