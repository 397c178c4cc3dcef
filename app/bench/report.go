package bench

import (
	"fmt"
	"math"
	"slices"

	"github.com/ovtoolkit/ovrun/internal/stats"
	"github.com/ovtoolkit/ovrun/runtime"
)

// ReportSchema is a Report's schema field (docs/outputs.md).
const ReportSchema = "ovrun.bench/1"

// Report is DIR/report.json.
type Report struct {
	Schema string `json:"schema"`
	// Partial is true when some planned run has no usable summary (the
	// campaign was interrupted or a run failed); Status says why.
	Partial bool   `json:"partial"`
	Status  string `json:"status"`
	// Arms are the policies compared; Control is Arms[0].
	Arms    []string `json:"arms"`
	Control string   `json:"control"`
	// Order is the arm sequence of each block (pair) in run order.
	Order    [][]string `json:"order"`
	Campaign Config     `json:"campaign"`
	// Runs are every planned run, warm-ups first, in run order.
	Runs []RunRecord `json:"runs"`
	// Comparisons hold every treatment arm against the control on every
	// endpoint, over the blocks in which both runs succeeded.
	Comparisons      []Comparison       `json:"comparisons"`
	BoundaryEvidence []BoundaryEvidence `json:"boundary_evidence"`
	Machine          Machine            `json:"machine"`
	OpenVINOVersion  string             `json:"openvino_version"`
	GoVersion        string             `json:"go_version"`
	// Command is the exact command line of the (last) invocation.
	Command string `json:"command"`
	// Plots are the SVG files next to the report.
	Plots []string `json:"plots,omitempty"`
	// Class is the requirement class of a queued campaign's class report
	// (ovrun bench --queue); Blocks say where each of its blocks ran.
	Class  string     `json:"class,omitempty"`
	Blocks []BlockRun `json:"blocks,omitempty"`
	// PooledClasses are the classes a pooled report (ovrun bench merge
	// --pool) joins; its pairs are numbered class after class.
	PooledClasses []string `json:"pooled_classes,omitempty"`
}

// RunRecord is one planned run and what became of it.
type RunRecord struct {
	Pair     int    `json:"pair"` // 1-based block; 0 for warm-ups
	Position int    `json:"position"`
	Arm      string `json:"arm"`
	Warmup   bool   `json:"warmup"`
	// SummaryFile is the run summary, relative to the campaign folder.
	SummaryFile string `json:"summary_file"`
	// Reused marks a run kept from an earlier invocation (--resume).
	Reused bool `json:"reused,omitempty"`
	// Error is why the run has no usable summary ("not run" when the
	// campaign stopped before it).
	Error   string           `json:"error,omitempty"`
	Summary *runtime.Summary `json:"summary,omitempty"`
}

func (r *RunRecord) ok() bool { return r.Error == "" && r.Summary != nil }

// Comparison is stats.Comparison of one treatment arm against the control.
type Comparison struct {
	Treatment string `json:"treatment"`
	Control   string `json:"control"`
	// Pairs are the blocks the values come from, in order.
	Pairs []int `json:"pairs"`
	stats.Comparison
}

// BoundaryEvidence summarizes the boundaries of one arm's measured runs.
type BoundaryEvidence struct {
	Arm  string `json:"arm"`
	Runs int    `json:"runs"`
	// Boundaries counts the rung switches crossed.
	Boundaries int `json:"boundaries"`
	// Successors counts background-compiled rungs reached at a boundary;
	// SuccessorsReady those whose graph was ready when decode got there.
	Successors      int `json:"successors"`
	SuccessorsReady int `json:"successors_ready"`
	// BoundaryWaitS is the total boundary wait of the arm's runs.
	BoundaryWaitS float64 `json:"boundary_wait_s"`
	// Verified counts boundary comparisons against a control that never
	// switched (runs with --verify); Top1Matches those with equal top-1.
	Verified    int      `json:"verified"`
	Top1Matches int      `json:"top1_matches"`
	MinCosine   *float64 `json:"min_cosine,omitempty"`
}

// Endpoint is a run-summary field compared across arms.
type Endpoint struct {
	// Name is the run-summary JSON field.
	Name string
	// Label is the human name.
	Label string
	// Bytes marks byte counts (otherwise seconds).
	Bytes bool
	Value func(*runtime.Summary) float64
	// HigherIsBetter marks the one endpoint where more is the goal: compile
	// time moved behind decode.
	HigherIsBetter bool
}

// Endpoints are the compared endpoints (docs/design.md §6); lower is better for
// every one but successor_compile_overlapped_s.
var Endpoints = []Endpoint{
	{"foreground_compile_s", "Foreground compile wall", false, func(s *runtime.Summary) float64 { return s.ForegroundCompileS }, false},
	{"ttft_s", "Time to first token", false, func(s *runtime.Summary) float64 { return s.TTFTS }, false},
	{"critical_path_s", "Critical path", false, func(s *runtime.Summary) float64 { return s.CriticalPathS }, false},
	{"decode_s", "Decode inference", false, func(s *runtime.Summary) float64 { return s.DecodeS }, false},
	{"boundary_wait_s", "Boundary wait", false, func(s *runtime.Summary) float64 { return s.BoundaryWaitS }, false},
	{"successor_compile_overlapped_s", "Successor compile overlapped", false, func(s *runtime.Summary) float64 { return s.SuccessorCompileOverlappedS }, true},
	{"kv_reserved_avg_bytes", "Reserved KV, time-weighted avg", true, func(s *runtime.Summary) float64 { return s.KVReservedAvgBytes }, false},
	{"kv_reserved_peak_bytes", "Reserved KV, peak", true, func(s *runtime.Summary) float64 { return float64(s.KVReservedPeakBytes) }, false},
	{"peak_rss_bytes", "Peak RSS", true, func(s *runtime.Summary) float64 { return float64(s.PeakRSSBytes) }, false},
}

// Meta is what a report says about where and how it was made.
type Meta struct {
	Machine   Machine
	GoVersion string
	Command   string
	// Status overrides the derived status line (e.g. "interrupted").
	Status string
}

// BuildReport assembles the report of a campaign from its run records (in
// plan order). It never fails: comparisons that cannot be formed (no
// complete pair) are left out and the report is marked partial.
func BuildReport(cfg *Config, runs []RunRecord, meta Meta) *Report {
	r := &Report{Schema: ReportSchema,
		Arms: cfg.Arms, Control: cfg.Control(), Order: Orders(cfg.Arms, cfg.Pairs),
		Campaign: *cfg, Runs: runs, Machine: meta.Machine, GoVersion: meta.GoVersion, Command: meta.Command,
		Comparisons: []Comparison{}, BoundaryEvidence: []BoundaryEvidence{},
	}
	failed, done, reused := 0, 0, 0
	for i := range runs {
		if runs[i].Reused {
			reused++
		}
		if runs[i].ok() {
			done++
			if r.OpenVINOVersion == "" {
				r.OpenVINOVersion = runs[i].Summary.OpenVINOVersion
			}
		} else {
			failed++
		}
	}
	r.Partial = failed > 0
	r.Status = meta.Status
	if r.Status == "" {
		if r.Partial {
			r.Status = fmt.Sprintf("partial: %d of %d runs have no usable summary", failed, len(runs))
		} else {
			r.Status = fmt.Sprintf("complete: %d runs", done)
		}
		if reused > 0 {
			r.Status += fmt.Sprintf(" (%d reused from an earlier invocation; machine load is this one's)", reused)
		}
	}
	byPair := measured(runs)
	for _, arm := range cfg.Arms[1:] {
		var pairs []int
		for p := 1; p <= cfg.Pairs; p++ {
			if byPair[p][cfg.Control()] != nil && byPair[p][arm] != nil {
				pairs = append(pairs, p)
			}
		}
		if len(pairs) == 0 {
			continue
		}
		for _, e := range Endpoints {
			ctl, trt := make([]float64, len(pairs)), make([]float64, len(pairs))
			for i, p := range pairs {
				ctl[i] = e.Value(byPair[p][cfg.Control()])
				trt[i] = e.Value(byPair[p][arm])
			}
			c, err := stats.Compare(e.Name, ctl, trt, !e.HigherIsBetter)
			if err != nil {
				continue // a non-finite value; the raw runs are in runs[]
			}
			r.Comparisons = append(r.Comparisons, Comparison{Treatment: arm, Control: cfg.Control(), Pairs: pairs, Comparison: c})
		}
	}
	for _, arm := range cfg.Arms {
		r.BoundaryEvidence = append(r.BoundaryEvidence, boundaryEvidence(arm, runs))
	}
	return r
}

// measured maps pair -> arm -> summary of the successful measured runs.
func measured(runs []RunRecord) map[int]map[string]*runtime.Summary {
	out := map[int]map[string]*runtime.Summary{}
	for i := range runs {
		rr := &runs[i]
		if rr.Warmup || !rr.ok() {
			continue
		}
		if out[rr.Pair] == nil {
			out[rr.Pair] = map[string]*runtime.Summary{}
		}
		out[rr.Pair][rr.Arm] = rr.Summary
	}
	return out
}

func boundaryEvidence(arm string, runs []RunRecord) BoundaryEvidence {
	ev := BoundaryEvidence{Arm: arm}
	minCos := math.Inf(1)
	for i := range runs {
		rr := &runs[i]
		if rr.Warmup || !rr.ok() || rr.Arm != arm {
			continue
		}
		s := rr.Summary
		ev.Runs++
		ev.BoundaryWaitS += s.BoundaryWaitS
		first := true
		for _, rg := range s.Rungs {
			if rg.FirstStep <= 0 {
				continue
			}
			if first { // the rung decode starts in: no boundary
				first = false
				continue
			}
			ev.Boundaries++
			if !rg.Foreground {
				ev.Successors++
				if rg.ReadyAtBoundary {
					ev.SuccessorsReady++
				}
			}
		}
		for _, b := range s.Boundaries {
			if !b.Verified {
				continue
			}
			ev.Verified++
			if b.Top1OK {
				ev.Top1Matches++
			}
			minCos = min(minCos, b.Cosine)
		}
	}
	if ev.Verified > 0 && !math.IsInf(minCos, 0) && !math.IsNaN(minCos) {
		ev.MinCosine = &minCos
	}
	return ev
}

// comparison finds the comparison of treatment on endpoint.
func (r *Report) comparison(treatment, endpoint string) *Comparison {
	i := slices.IndexFunc(r.Comparisons, func(c Comparison) bool {
		return c.Treatment == treatment && c.Endpoint == endpoint
	})
	if i < 0 {
		return nil
	}
	return &r.Comparisons[i]
}

// pairRuns returns the summaries of pair p by arm (successful runs only).
func (r *Report) pairRuns(p int) map[string]*runtime.Summary {
	return measured(r.Runs)[p]
}

// showcasePair is the first pair in which every arm succeeded, or 0.
func (r *Report) showcasePair() int {
	m := measured(r.Runs)
	for p := 1; p <= len(r.Order); p++ {
		if len(m[p]) == len(r.Arms) {
			return p
		}
	}
	return 0
}
