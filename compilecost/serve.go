package compilecost

import (
	"errors"
	"fmt"
	"math"

	"github.com/ovtoolkit/ovrun/internal/traffic"
)

// Limits of a served load the simulator plans: the server's own
// --max-seqs range, and a bound on the work so that a mistyped flag is an
// error rather than minutes of simulation.
const (
	MaxServeSeqs  = 256
	MaxServeQueue = 1 << 20
	// MaxServeSteps bounds the decode steps of a load (its requests'
	// answers summed).
	MaxServeSteps = 20_000_000
)

// QueueUnbounded is ServeConfig.Queue for a queue that refuses nothing.
const QueueUnbounded = -1

// ErrInvalidServeConfig is wrapped by ServeConfig.Validate's errors.
var ErrInvalidServeConfig = errors.New("invalid serve simulation config")

// ServeConfig describes ovrun serve --batching off with --compile-cost (a
// kept ladder whose rungs launch by ladder.Due), the load it is given, and
// the costs to plan it with. Times are seconds, from the moment the server
// is ready (its first rung compiled).
//
// A request of n prompt tokens and an answer of a tokens starts on the
// smallest rung holding n+1 tokens; its prompt gives the first token and
// a-1 decode steps give the rest, step i (1-based) writing position
// n+i-1, so it needs n+a <= the largest capacity (the server's room).
type ServeConfig struct {
	// Ladder holds the capacities, strictly ascending; the first is
	// compiled at the start.
	Ladder []int
	// MaxSeqs is how many sequences decode at once (--max-seqs); more wait
	// for a slot, first come first served.
	MaxSeqs int
	// Queue is how many requests may wait beyond MaxSeqs, for a slot or for
	// the rung their prompt starts on (--queue); one more is refused (the
	// server's 429). QueueUnbounded refuses none.
	Queue int
	// Traffic is the load; Arrivals, when set, replaces it with these
	// requests (ascending AtS).
	Traffic  traffic.Mix
	Arrivals []traffic.Request
	// CompileS is a rung's background compile beside decoding, as the
	// server's budgets predict it (Profile.PredictBackground: the
	// under-decode figure where the profile has one, else the successor).
	// It is both the compile's duration and the prediction the deadline
	// rule uses.
	CompileS func(capacity int) float64
	// CompileSoloS, when set, is the same compile with no sequence
	// decoding (Profile.PredictSuccessor): a compile progresses at the
	// CompileS pace while any sequence decodes or prefills and at this
	// pace otherwise, and predictions blend the two as the runtime's do
	// (Overlapped, with the time left as the overlap). Nil: every compile
	// takes CompileS.
	CompileSoloS func(capacity int) float64
	// DecodeStepS is one decode step on a capacity's graph with one
	// sequence decoding alone.
	DecodeStepS func(capacity int) float64
	// PrefillTokensPerS is the prompt's rate; 0 takes the first rung's
	// decode rate (1/DecodeStepS), as a prompt fed through the decode graph.
	PrefillTokensPerS float64
	// Parallel is how the shared cores take several sequences: with c > 1
	// of them busy (decoding or prefilling) each progresses at
	// 1/max(1, c/Parallel) of its solo pace (processor sharing); alone, at
	// its solo pace. 0 is 1: one sequence alone keeps the cores busy.
	// Below 1, sequences side by side slow each other more than sharing
	// would (two OpenVINO streams on 2 cores: about 0.76).
	Parallel float64
	// KVBytesPerToken is the KV size of one token over all layers.
	KVBytesPerToken int64
	// RungIdleS, when > 0, frees a rung other than the first that no
	// sequence is on, nor on the rung below, and none was on for that long
	// (--rung-idle), checked every RungIdleS/4 (10 ms to 1 s) as the ladder
	// does; a later need launches it again.
	RungIdleS float64
}

// ServeRung is what happened to one rung over the load.
type ServeRung struct {
	Capacity int `json:"capacity"`
	// Launches counts its background compiles (a freed rung compiles again).
	Launches int `json:"launches"`
	// CompileS is the time those compiles took.
	CompileS float64 `json:"compile_s"`
	// ReadyS is when it was first ready (0 for the first rung; -1: never).
	ReadyS float64 `json:"ready_s"`
	// BoundaryWaits and BoundaryWaitS are the sequences that waited for it
	// at a boundary and the time they waited; AdmissionWaits and
	// AdmissionWaitS the requests that waited for it in the queue.
	BoundaryWaits  int     `json:"boundary_waits"`
	BoundaryWaitS  float64 `json:"boundary_wait_s"`
	AdmissionWaits int     `json:"admission_waits"`
	AdmissionWaitS float64 `json:"admission_wait_s"`
	// Releases counts the times it was freed after RungIdleS.
	Releases int `json:"releases,omitempty"`
}

// ServeResult is the predicted outcome of a load. Its fields are named as
// ovrun loadtest's where both report a quantity (docs/planning-a-server.md).
type ServeResult struct {
	// Requests counts the requests sent; Refused those the queue turned
	// away (the server's 429); Answered the rest, all answered in full.
	Requests int `json:"requests"`
	Refused  int `json:"refused"`
	Answered int `json:"answered"`
	// Tokens is the answers' tokens.
	Tokens int `json:"tokens"`
	// MakespanS is the start to the last answer's last token;
	// TokensPerS and RequestsPerS are Tokens and Answered over it.
	MakespanS    float64 `json:"makespan_s"`
	TokensPerS   float64 `json:"tokens_per_s"`
	RequestsPerS float64 `json:"requests_per_s"`
	// TTFT is arrival to first token (the rung wait, the queue for a slot
	// and the prompt), over the answered requests.
	TTFTP50S float64 `json:"ttft_p50_s"`
	TTFTP99S float64 `json:"ttft_p99_s"`
	// BoundaryWaits counts the waits of a sequence at a boundary for its
	// next rung's graph, BoundaryWaitS sums them, and the quantiles are
	// over them (0 without any): ovrun_boundary_wait_seconds.
	BoundaryWaits    int     `json:"boundary_waits"`
	BoundaryWaitS    float64 `json:"boundary_wait_s"`
	BoundaryWaitP50S float64 `json:"boundary_wait_p50_s"`
	BoundaryWaitP99S float64 `json:"boundary_wait_p99_s"`
	// AdmissionWaits counts the requests that waited in the queue for the
	// rung their prompt starts on, AdmissionWaitS sums their waits:
	// ovrun_rung_wait_seconds.
	AdmissionWaits int     `json:"admission_waits"`
	AdmissionWaitS float64 `json:"admission_wait_s"`
	// Compiles counts the background compiles, CompileS sums their time
	// (the first rung's, before the start, is not counted):
	// ovrun_compile_seconds_total.
	Compiles int     `json:"compiles"`
	CompileS float64 `json:"compile_s"`
	// Launches counts the compiles by why they were launched
	// (ladder.LaunchReasons): ovrun_compile_launches_total.
	Launches map[string]int `json:"launches"`
	// PeakSeqs is the most sequences holding a slot at once.
	PeakSeqs int `json:"peak_seqs"`
	// PeakKVReservedBytes is the most KV the sequences holding a slot
	// reserved at once, each its rung's capacity: ovrun_kv_reserved_bytes.
	PeakKVReservedBytes int64 `json:"peak_kv_reserved_bytes"`
	// RungReleases counts rungs freed after RungIdleS.
	RungReleases int `json:"rung_releases"`
	// Rungs is per rung, ascending capacity.
	Rungs []ServeRung `json:"rungs"`
}

// Validate checks the config, one field at a time. Errors wrap
// ErrInvalidServeConfig.
func (c ServeConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidServeConfig, fmt.Sprintf(format, args...))
	}
	if err := ValidateLadder(c.Ladder); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidServeConfig, err)
	}
	maxCap := c.Ladder[len(c.Ladder)-1]
	switch {
	case c.MaxSeqs < 1 || c.MaxSeqs > MaxServeSeqs:
		return bad("max seqs %d: want 1..%d", c.MaxSeqs, MaxServeSeqs)
	case c.Queue < QueueUnbounded || c.Queue > MaxServeQueue:
		return bad("queue %d: want 0..%d, or %d for unbounded", c.Queue, MaxServeQueue, QueueUnbounded)
	case c.CompileS == nil || c.DecodeStepS == nil:
		return bad("CompileS and DecodeStepS are required")
	case !(c.PrefillTokensPerS == 0 || c.PrefillTokensPerS > 0 && c.PrefillTokensPerS <= 1e9):
		return bad("prefill rate %v: want 0 (the decode rate) or a rate up to 1e9 tokens per second", c.PrefillTokensPerS)
	case !(c.Parallel == 0 || c.Parallel >= 0.1 && c.Parallel <= MaxServeSeqs):
		return bad("parallel %v: want 0 (1) or 0.1..%d", c.Parallel, MaxServeSeqs)
	case c.KVBytesPerToken < 0 || c.KVBytesPerToken > 1<<40:
		return bad("KV bytes per token %d: want 0..%d", c.KVBytesPerToken, int64(1<<40))
	case !(c.RungIdleS == 0 || c.RungIdleS > 0 && c.RungIdleS <= 1e6):
		return bad("rung idle %v s: want 0 (keep every rung) or up to 1e6 s", c.RungIdleS)
	}
	for _, capacity := range c.Ladder {
		if v := c.CompileS(capacity); !finiteNonNeg(v) || math.IsNaN(v) {
			return bad("compile time %v for capacity %d is not a finite non-negative time", v, capacity)
		}
		if c.CompileSoloS != nil {
			if v := c.CompileSoloS(capacity); !finiteNonNeg(v) || math.IsNaN(v) {
				return bad("solo compile time %v for capacity %d is not a finite non-negative time", v, capacity)
			}
		}
		if v := c.DecodeStepS(capacity); !(v > 0 && v <= 3600) {
			return bad("decode step time %v for capacity %d: want more than 0, at most an hour", v, capacity)
		}
	}
	if c.Arrivals == nil {
		if err := c.Traffic.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidServeConfig, err)
		}
		p, a := maxOf(c.Traffic.Prompt), maxOf(c.Traffic.Answer)
		if p+a > maxCap {
			return bad("the longest prompt (%d tokens) and the longest answer (%d) need %d tokens; the largest rung holds %d: shorten the mix or add a rung",
				p, a, p+a, maxCap)
		}
		if steps := int64(c.Traffic.Requests) * int64(a); steps > MaxServeSteps {
			return bad("%d requests of up to %d answer tokens: more than the %d decode steps the simulator plans", c.Traffic.Requests, a, MaxServeSteps)
		}
		return nil
	}
	if len(c.Arrivals) == 0 || len(c.Arrivals) > traffic.MaxRequests {
		return bad("%d arrivals: want 1..%d", len(c.Arrivals), traffic.MaxRequests)
	}
	var steps int64
	for i, r := range c.Arrivals {
		switch {
		case !(r.AtS >= 0 && r.AtS <= 1e9) || i > 0 && r.AtS < c.Arrivals[i-1].AtS:
			return bad("arrival %d at %v s: want ascending times from 0", i, r.AtS)
		case r.Prompt < 1 || r.Answer < 1:
			return bad("arrival %d: prompt %d and answer %d tokens, want at least 1 each", i, r.Prompt, r.Answer)
		case r.Prompt+r.Answer > maxCap:
			return bad("arrival %d: a prompt of %d tokens and an answer of %d need %d; the largest rung holds %d", i, r.Prompt, r.Answer, r.Prompt+r.Answer, maxCap)
		}
		steps += int64(r.Answer)
	}
	if steps > MaxServeSteps {
		return bad("%d answer tokens: more than the %d decode steps the simulator plans", steps, MaxServeSteps)
	}
	return nil
}

func maxOf(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// SimulateServe predicts how ovrun serve --batching off --compile-cost
// handles cfg's load, in virtual time (a discrete-event simulation; no
// clock, no goroutines): the same config gives the same result.
//
// What it follows, as the server and its kept ladder do: a request whose
// first rung is not compiled launches it (ladder.ReasonAdmission) and waits
// for it without a slot; then it waits for one of MaxSeqs slots, first come
// first served; its prompt runs at PrefillTokensPerS and gives the first
// token; each decode step then takes DecodeStepS of its rung, shared
// (Parallel) with the other sequences prefilling or decoding. After every
// step the deadline rule (ladder.Due, at the sequence's step time once it
// has made ladder.RateSteps steps on its rung, else the rung's last
// measured) launches the rungs above it that are due, with the rungs
// between; a sequence that reaches a rung no rule launched launches it
// (ladder.ReasonBoundary). Background compiles run one at a time in launch
// order.
//
// What it leaves out: the first rung's compile before the start, prefill
// graphs (the prompt runs at a rate), the slowdown a compile causes to
// decoding, a correction of predictions learnt online (its predictions are
// exact unless CompileSoloS makes a compile's pace depend on decoding),
// per-rung locks between sequences on one rung (processor sharing stands
// for them), timeouts, and the time to tokenize and stream.
func SimulateServe(cfg ServeConfig) (ServeResult, error) {
	if err := cfg.Validate(); err != nil {
		return ServeResult{}, err
	}
	arrivals := cfg.Arrivals
	if arrivals == nil {
		var err error
		if arrivals, err = traffic.Draw(cfg.Traffic); err != nil {
			return ServeResult{}, fmt.Errorf("%w: %w", ErrInvalidServeConfig, err)
		}
	}
	s := newServeSim(cfg, arrivals)
	if err := s.run(); err != nil {
		return ServeResult{}, err
	}
	return s.result(), nil
}
