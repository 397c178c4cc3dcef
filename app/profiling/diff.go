package profiling

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/google/pprof/profile"
)

// DiffOptions selects what Diff reports.
type DiffOptions struct {
	// SampleType names the value to compare ("" = A's default).
	SampleType string
	// By is ByFunction (default) or ByObject.
	By string
	// N is the number of rows (default 20; negative = all).
	N int
	// SortBy is "flat" (default) or "cum": rows are ordered by the absolute
	// change of that value.
	SortBy string
}

// DiffRow is the change of one function (or object) from A to B.
type DiffRow struct {
	Name      string `json:"name"`
	Object    string `json:"object"`
	FlatA     int64  `json:"flat_a"`
	FlatB     int64  `json:"flat_b"`
	FlatDelta int64  `json:"flat_delta"`
	CumA      int64  `json:"cum_a"`
	CumB      int64  `json:"cum_b"`
	CumDelta  int64  `json:"cum_delta"`
	// FlatDeltaPctOfA is FlatDelta as a percentage of A's total.
	FlatDeltaPctOfA float64 `json:"flat_delta_pct_of_a"`
}

// DiffReport is the result of Diff.
type DiffReport struct {
	SampleType string    `json:"sample_type"`
	Unit       string    `json:"unit"`
	By         string    `json:"by"`
	TotalA     int64     `json:"total_a"`
	TotalB     int64     `json:"total_b"`
	Rows       []DiffRow `json:"rows"`
	// Saturated reports that a sum or a delta passed the int64 limit and
	// was held there (SaturatedNote).
	Saturated bool `json:"saturated,omitempty"`
}

// TotalDelta is TotalB - TotalA, held at the int64 limits.
func (r *DiffReport) TotalDelta() int64 {
	d, _ := subInt64(r.TotalB, r.TotalA)
	return d
}

// Diff compares two profiles of the same sample type per function (or
// object), largest absolute change first. Values are absolute (seconds of
// samples or instruction counts), not shares, so a profile that got faster
// overall shows negative deltas.
func Diff(a, b *profile.Profile, opt DiffOptions) (*DiffReport, error) {
	ia, err := sampleIndex(a, opt.SampleType)
	if err != nil {
		return nil, fmt.Errorf("profile A: %w", err)
	}
	st := a.SampleType[ia]
	ib, err := sampleIndex(b, st.Type)
	if err != nil {
		return nil, fmt.Errorf("profile B: %w", err)
	}
	if u := b.SampleType[ib].Unit; u != st.Unit {
		return nil, fmt.Errorf("sample type %s is in %s in A but %s in B", st.Type, st.Unit, u)
	}
	by, err := checkBy(opt.By)
	if err != nil {
		return nil, err
	}
	sortCum := false
	switch opt.SortBy {
	case "", "flat":
	case "cum":
		sortCum = true
	default:
		return nil, fmt.Errorf("sort by %q: want flat or cum", opt.SortBy)
	}
	var sat sum
	aggA, totA := aggregate(a, ia, -1, by, &sat)
	aggB, totB := aggregate(b, ib, -1, by, &sat)
	rep := &DiffReport{SampleType: st.Type, Unit: st.Unit, By: by, TotalA: totA, TotalB: totB}
	if _, ok := subInt64(totB, totA); !ok {
		sat.saturated = true
	}
	rows := map[string]*DiffRow{}
	for key, x := range aggA {
		rows[key] = &DiffRow{Name: x.name, Object: x.object, FlatA: x.flat, CumA: x.cum}
	}
	for key, x := range aggB {
		r, ok := rows[key]
		if !ok {
			r = &DiffRow{Name: x.name, Object: x.object}
			rows[key] = r
		}
		r.FlatB, r.CumB = x.flat, x.cum
	}
	all := make([]DiffRow, 0, len(rows))
	for _, r := range rows {
		var ok1, ok2 bool
		r.FlatDelta, ok1 = subInt64(r.FlatB, r.FlatA)
		r.CumDelta, ok2 = subInt64(r.CumB, r.CumA)
		if !ok1 || !ok2 {
			sat.saturated = true
		}
		if totA != 0 {
			r.FlatDeltaPctOfA = 100 * float64(r.FlatDelta) / float64(totA)
		}
		if r.FlatDelta != 0 || r.CumDelta != 0 {
			all = append(all, *r)
		}
	}
	slices.SortFunc(all, func(x, y DiffRow) int {
		kx, ky := abs(x.FlatDelta), abs(y.FlatDelta)
		sx, sy := abs(x.CumDelta), abs(y.CumDelta)
		if sortCum {
			kx, ky, sx, sy = sx, sy, kx, ky
		}
		return cmp.Or(cmp.Compare(ky, kx), cmp.Compare(sy, sx), cmp.Compare(x.Name, y.Name), cmp.Compare(x.Object, y.Object))
	})
	rep.Rows = all[:rowLimit(opt.N, len(all))]
	rep.Saturated = sat.saturated
	return rep, nil
}

// abs is |v|, held at math.MaxInt64 for math.MinInt64.
func abs(v int64) int64 {
	if v < 0 {
		if v == math.MinInt64 {
			return math.MaxInt64
		}
		return -v
	}
	return v
}
