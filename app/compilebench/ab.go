package compilebench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ovtoolkit/ovrun/internal/stats"
)

// MinPairs is the default number of pairs, the floor of stats.CheckPairs.
const MinPairs = stats.MinPairs

// Config is a paired experiment between variants.
type Config struct {
	// Variants are the arms; the first is the control.
	Variants []Variant
	// Pairs is the number of blocks (pairs for two arms); each block runs
	// every arm once, in the order stats.Orders gives (AB/BA alternation
	// for two arms, Williams rows for more).
	Pairs int
	// Endpoints are the Measurement values compared (default
	// compile_s, compile_cpu_s, peak_rss_bytes).
	Endpoints []string
	// AllowSmall permits a design stats.CheckPairs refuses (too few
	// pairs, or not whole counterbalancing cycles).
	AllowSmall bool
	// LogitsDir, when set, makes every variant's warm-up run dump logits
	// there, and the report compares them with the control's.
	LogitsDir string
	// Tolerance is the largest logit difference still counted as equal.
	Tolerance float64
}

// TrialFunc runs one compile of a variant in a fresh process; dumpLogits,
// when not empty, is where that process writes its logits.
type TrialFunc func(ctx context.Context, v Variant, dumpLogits string) (*Measurement, error)

// Trial is one measured run.
type Trial struct {
	// Pair is the block number, from 1 (0 for warm-up runs).
	Pair int `json:"pair"`
	// Position is the run's place within its block, from 1.
	Position int                `json:"position"`
	Variant  string             `json:"variant"`
	Values   map[string]float64 `json:"values"`
	// ExportSHA256 is the SHA-256 of the compiled model the run exported
	// (when the equivalence check is on).
	ExportSHA256 string `json:"export_sha256,omitempty"`
	// Memo are the counters a preloaded memoization patch kept during
	// the compile, when the variant preloads one.
	Memo *MemoStats `json:"memo,omitempty"`
}

// VariantComparison is one endpoint of one treatment against the control.
type VariantComparison struct {
	Control   string `json:"control"`
	Treatment string `json:"treatment"`
	stats.Comparison
}

// Report is the result of Run (the ab.json contract).
type Report struct {
	Model     string `json:"model,omitempty"`
	Capacity  int    `json:"capacity,omitempty"`
	Device    string `json:"device,omitempty"`
	Precision string `json:"precision,omitempty"`
	// Variants are the arms, the control first.
	Variants  []Variant `json:"variants"`
	Pairs     int       `json:"pairs"`
	Endpoints []string  `json:"endpoints"`
	// Order is each block's run order, by variant name.
	Order [][]string `json:"order"`
	// Warmup are the excluded first runs, one per variant (they also dump
	// the logits of the equivalence check).
	Warmup      []Trial             `json:"warmup"`
	Trials      []Trial             `json:"trials"`
	Comparisons []VariantComparison `json:"comparisons"`
	Equivalent  *Equivalence        `json:"equivalent,omitempty"`
	// Memo summarises, per variant whose compiles counted, a memoization
	// patch's counters over the measured trials.
	Memo []MemoSummary `json:"memo,omitempty"`
	// FinishReason is "complete", "interrupted" or "error"; a queued
	// experiment's class report (ovtrace ab --queue) is "partial" while
	// blocks are missing or failed.
	FinishReason string   `json:"finish_reason"`
	Error        string   `json:"error,omitempty"`
	Notes        []string `json:"notes,omitempty"`
	StartedAt    string   `json:"started_at"`
	WallS        float64  `json:"wall_s"`
	// Class is the requirement class of a queued experiment's class
	// report; Blocks say where each of its blocks ran.
	Class  string     `json:"class,omitempty"`
	Blocks []BlockRun `json:"blocks,omitempty"`
	// PooledClasses are the classes a pooled report (--merge --pool)
	// joins; its pairs are numbered class after class.
	PooledClasses []string `json:"pooled_classes,omitempty"`
}

// Progress reports a trial about to start.
type Progress struct {
	// Trial counts from 1 to Total; warm-up runs have Warmup set and are
	// not counted.
	Trial, Total int
	Warmup       bool
	Pair         int
	Variant      string
	// ETA is the predicted time left, from the mean duration so far.
	ETA time.Duration
}

// DefaultEndpoints are compared when Config.Endpoints is empty.
var DefaultEndpoints = []string{"compile_s", "compile_cpu_s", "peak_rss_bytes"}

// Validate checks the design.
func (c *Config) Validate() error {
	if len(c.Variants) < 2 {
		return fmt.Errorf("an experiment needs at least two variants, got %d", len(c.Variants))
	}
	if c.Pairs < 1 {
		return fmt.Errorf("pairs %d < 1", c.Pairs)
	}
	if !c.AllowSmall {
		if err := stats.CheckPairs(len(c.Variants), c.Pairs); err != nil {
			return fmt.Errorf("%w, or --allow-small", err)
		}
	}
	if len(c.Endpoints) == 0 {
		c.Endpoints = slices.Clone(DefaultEndpoints)
	}
	var m Measurement
	for _, e := range c.Endpoints {
		if _, err := m.Value(e); err != nil {
			return err
		}
	}
	return nil
}

// Run runs the experiment: a warm-up run per variant (excluded; with
// LogitsDir it also yields the equivalence evidence), then Pairs blocks.
// On a failed trial or a cancelled ctx it returns the report of what was
// done (comparisons over the complete blocks) with the error.
func Run(ctx context.Context, cfg Config, run TrialFunc, progress func(Progress)) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	rep := &Report{
		Variants: slices.Clone(cfg.Variants), Pairs: cfg.Pairs, Endpoints: cfg.Endpoints,
		Warmup: []Trial{}, Trials: []Trial{}, Comparisons: []VariantComparison{},
		StartedAt: start.UTC().Format(time.RFC3339),
	}
	orders := stats.Orders(len(cfg.Variants), cfg.Pairs)
	for _, o := range orders {
		names := make([]string, len(o))
		for i, arm := range o {
			names[i] = cfg.Variants[arm].Name
		}
		rep.Order = append(rep.Order, names)
	}
	if k := len(cfg.Variants); k > 2 {
		rows := stats.CycleLen(k)
		if cfg.Pairs%rows != 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%d blocks is not a multiple of the %d rows of the Williams design for %d arms: positions are not fully balanced", cfg.Pairs, rows, k))
		}
	}
	err := runAll(ctx, cfg, rep, orders, run, progress)
	rep.Comparisons = compare(cfg, rep.Trials, orders)
	if rep.Equivalent != nil {
		rep.Equivalent.Compiled = compareCompiled(rep.Variants, append(slices.Clone(rep.Warmup), rep.Trials...))
	}
	rep.Memo = summariseMemo(rep.Variants, rep.Trials)
	rep.WallS = time.Since(start).Seconds()
	switch {
	case err == nil:
		rep.FinishReason = "complete"
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		rep.FinishReason, rep.Error = "interrupted", err.Error()
	default:
		rep.FinishReason, rep.Error = "error", err.Error()
	}
	return rep, err
}

func runAll(ctx context.Context, cfg Config, rep *Report, orders [][]int, run TrialFunc, progress func(Progress)) error {
	k := len(cfg.Variants)
	files := make([]string, k)
	for i := range cfg.Variants {
		v := &rep.Variants[i]
		if progress != nil {
			progress(Progress{Warmup: true, Variant: v.Name, Total: k * len(orders)})
		}
		if cfg.LogitsDir != "" {
			files[i] = filepath.Join(cfg.LogitsDir, fmt.Sprintf("logits-%d-%s.npy", i, v.Name))
		}
		m, err := run(ctx, *v, files[i])
		if err != nil {
			return fmt.Errorf("warm-up of %s: %w", v.Name, err)
		}
		v.OpenVINOVersion, v.Library, v.PrecisionEffective = m.OpenVINOVersion, m.Library, m.PrecisionEffective
		rep.Warmup = append(rep.Warmup, trial(0, 1, v.Name, m, cfg.Endpoints))
	}
	if cfg.LogitsDir != "" {
		names := make([]string, k)
		for i, v := range cfg.Variants {
			names[i] = v.Name
		}
		eq, err := compareFiles(names, files, cfg.Tolerance)
		if err != nil {
			return fmt.Errorf("equivalence check: %w", err)
		}
		rep.Equivalent = eq
		for _, f := range files {
			os.Remove(f)
		}
	}
	total := k * len(orders)
	trialsStart := time.Now()
	n := 0
	for b, order := range orders {
		for pos, arm := range order {
			if err := ctx.Err(); err != nil {
				return err
			}
			v := cfg.Variants[arm]
			if progress != nil {
				var eta time.Duration
				if n > 0 {
					eta = time.Since(trialsStart) / time.Duration(n) * time.Duration(total-n)
				}
				progress(Progress{Trial: n + 1, Total: total, Pair: b + 1, Variant: v.Name, ETA: eta})
			}
			m, err := run(ctx, v, "")
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("pair %d, %s: %w", b+1, v.Name, err)
			}
			rep.Trials = append(rep.Trials, trial(b+1, pos+1, v.Name, m, cfg.Endpoints))
			n++
		}
	}
	return nil
}

func trial(pair, pos int, name string, m *Measurement, endpoints []string) Trial {
	t := Trial{Pair: pair, Position: pos, Variant: name, Values: map[string]float64{}, ExportSHA256: m.ExportSHA256, Memo: m.Memo}
	for _, e := range endpoints {
		t.Values[e], _ = m.Value(e)
	}
	return t
}

// compare builds, per treatment and endpoint, the paired comparison over
// the blocks in which every arm ran.
func compare(cfg Config, trials []Trial, orders [][]int) []VariantComparison {
	k := len(cfg.Variants)
	byBlock := map[int]map[string]Trial{}
	for _, t := range trials {
		if byBlock[t.Pair] == nil {
			byBlock[t.Pair] = map[string]Trial{}
		}
		byBlock[t.Pair][t.Variant] = t
	}
	var complete []int
	for b := 1; b <= len(orders); b++ {
		if len(byBlock[b]) == k {
			complete = append(complete, b)
		}
	}
	out := []VariantComparison{}
	if len(complete) == 0 {
		return out
	}
	ctrl := cfg.Variants[0].Name
	for _, v := range cfg.Variants[1:] {
		for _, e := range cfg.Endpoints {
			var cv, tv []float64
			for _, b := range complete {
				cv = append(cv, byBlock[b][ctrl].Values[e])
				tv = append(tv, byBlock[b][v.Name].Values[e])
			}
			c, err := stats.Compare(e, cv, tv, true)
			if err != nil {
				continue
			}
			out = append(out, VariantComparison{Control: ctrl, Treatment: v.Name, Comparison: c})
		}
	}
	return out
}

// endpointUnit returns how an endpoint's values read: "s" or "bytes".
func endpointUnit(endpoint string) string {
	if strings.HasSuffix(endpoint, "_bytes") {
		return "bytes"
	}
	return "s"
}
