package compilebench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ovtoolkit/ovrun/compilecost"
)

// SweepConfig is a compile-cost measurement over a ladder.
type SweepConfig struct {
	// Ladder holds the capacities, strictly ascending.
	Ladder []int
	// Reps is the number of compiles per capacity.
	Reps int
	// Model, Device and Precision label the profile.
	Model, Device, Precision string
}

// SweepProgress reports one finished compile.
type SweepProgress struct {
	Done, Total int
	Rep         int
	Capacity    int
	Last        *Measurement
	Elapsed     time.Duration
}

// CompileFunc measures one compile of a capacity (in a fresh process).
type CompileFunc func(ctx context.Context, capacity int) (*Measurement, error)

// SweepOrder is the order of the compiles: every repetition compiles each
// capacity once, ascending in even repetitions and descending in odd ones,
// so that no capacity always runs first (on a cold disk cache, say) or
// last (on a warm machine).
func SweepOrder(ladder []int, reps int) [][2]int {
	var out [][2]int // rep, capacity
	for r := range reps {
		for i := range ladder {
			c := ladder[i]
			if r%2 == 1 {
				c = ladder[len(ladder)-1-i]
			}
			out = append(out, [2]int{r, c})
		}
	}
	return out
}

// Sweep measures every capacity Reps times in SweepOrder and returns the
// compile-cost profile with its fit. When a compile fails or ctx is
// cancelled it returns the profile of the compiles done so far (nil if
// none) together with the error, so that a partial cost.json can be saved.
func Sweep(ctx context.Context, cfg SweepConfig, compile CompileFunc, progress func(SweepProgress)) (*compilecost.Profile, error) {
	if err := compilecost.ValidateLadder(cfg.Ladder); err != nil {
		return nil, err
	}
	if cfg.Reps < 1 {
		return nil, fmt.Errorf("reps %d < 1", cfg.Reps)
	}
	got := map[int][]*Measurement{}
	order := SweepOrder(cfg.Ladder, cfg.Reps)
	start := time.Now()
	var runErr error
	for i, rc := range order {
		if err := ctx.Err(); err != nil {
			runErr = err
			break
		}
		m, err := compile(ctx, rc[1])
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			runErr = fmt.Errorf("capacity %d, repetition %d: %w", rc[1], rc[0]+1, err)
			break
		}
		got[rc[1]] = append(got[rc[1]], m)
		if progress != nil {
			progress(SweepProgress{Done: i + 1, Total: len(order), Rep: rc[0], Capacity: rc[1], Last: m, Elapsed: time.Since(start)})
		}
	}
	p := buildProfile(cfg, got)
	if p == nil && runErr == nil {
		runErr = errors.New("no compile measured")
	}
	return p, runErr
}

// joinForm adds form to the attention forms seen so far ("static",
// "static, bounded" where auto splits the ladder).
func joinForm(seen, form string) string {
	switch {
	case form == "" || slices.Contains(strings.Split(seen, ", "), form):
		return seen
	case seen == "":
		return form
	}
	return seen + ", " + form
}

func buildProfile(cfg SweepConfig, got map[int][]*Measurement) *compilecost.Profile {
	p := &compilecost.Profile{Model: filepath.Base(filepath.Clean(cfg.Model)), Device: cfg.Device, Precision: cfg.Precision}
	for _, c := range cfg.Ladder {
		ms := got[c]
		if len(ms) == 0 {
			continue
		}
		r := compilecost.Rung{Capacity: c}
		for _, m := range ms {
			r.CompileS = append(r.CompileS, m.CompileS)
			r.CompileCPUS = append(r.CompileCPUS, m.CompileCPUS)
			r.IRBuildS = append(r.IRBuildS, m.IRBuildS)
			r.PeakRSSBytes = max(r.PeakRSSBytes, m.PeakRSSBytes)
			if m.ImportS > 0 {
				r.ImportS = append(r.ImportS, m.ImportS)
				r.ExportS = append(r.ExportS, m.ExportS)
			}
			if p.OpenVINOVersion == "" {
				p.OpenVINOVersion, p.KVPrecision, p.HugePages = m.OpenVINOVersion, m.KVPrecision, &m.HugePages
			}
			p.Attention = joinForm(p.Attention, m.Attention)
			p.Layers, p.WeightBytes = max(p.Layers, m.Layers), max(p.WeightBytes, m.WeightBytes)
		}
		r.MedianS = compilecost.Median(r.CompileS)
		p.Rungs = append(p.Rungs, r)
	}
	if len(p.Rungs) == 0 {
		return nil
	}
	p.Fit = compilecost.FitProfile(p.Rungs)
	return p
}
