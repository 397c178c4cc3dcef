package profiling

import (
	"cmp"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/pprof/profile"
)

// Grouping of Top and Diff rows.
const (
	ByFunction = "function"
	ByObject   = "object"
)

// DefaultRepeatRatio is the calls-per-graph-node ratio above which Top
// flags a function as repeated work.
const DefaultRepeatRatio = 100

// TopOptions selects what Top reports.
type TopOptions struct {
	// SampleType names the value to rank by ("" = the profile's default).
	SampleType string
	// By is ByFunction (default) or ByObject (shared object).
	By string
	// N is the number of rows (default 20; negative = all).
	N int
	// Nodes is the compiled graph's node count; 0 reads it from the profile.
	Nodes int
	// RepeatRatio flags functions with calls >= RepeatRatio * Nodes
	// (default DefaultRepeatRatio). Functions of system libraries (the C
	// and C++ runtimes, allocators, the loader, the kernel) are never
	// flagged: they are called on behalf of the code that repeats work.
	RepeatRatio float64
}

// TopRow is one hotspot.
type TopRow struct {
	Name    string  `json:"name"`
	Object  string  `json:"object"`
	Flat    int64   `json:"flat"`
	FlatPct float64 `json:"flat_pct"`
	Cum     int64   `json:"cum"`
	CumPct  float64 `json:"cum_pct"`
	// Calls is the number of calls made to the function (callgrind only).
	Calls *int64 `json:"calls,omitempty"`
	// CallsPerNode is Calls divided by the graph's node count.
	CallsPerNode *float64 `json:"calls_per_node,omitempty"`
	// Repeated flags Calls >= RepeatRatio * graph nodes.
	Repeated bool `json:"repeated,omitempty"`
}

// TopReport is the result of Top.
type TopReport struct {
	SampleType string `json:"sample_type"`
	Unit       string `json:"unit"`
	By         string `json:"by"`
	// Total is the sum of the sample type over the profile.
	Total int64 `json:"total"`
	// GraphNodes is the node count the call counts are compared with.
	GraphNodes  int     `json:"graph_nodes,omitempty"`
	RepeatRatio float64 `json:"repeat_ratio,omitempty"`
	// HasCalls reports that the profile carries call counts.
	HasCalls bool `json:"has_calls"`
	// Saturated reports that a sum passed the int64 limit and was held
	// there (SaturatedNote).
	Saturated bool     `json:"saturated,omitempty"`
	Rows      []TopRow `json:"rows"`
	// Repeated lists the flagged functions, most calls first, whether or
	// not they made the top rows.
	Repeated []TopRow `json:"repeated,omitempty"`
	Comments []string `json:"comments,omitempty"`
}

type agg struct {
	name, object    string
	flat, cum       int64
	calls           int64
	hasCalls, inCum bool
}

// sum adds int64 sample values, holding a sum that would overflow at the
// int64 limit and remembering that it did: no real profile comes near
// 9.2e18 (292 years of nanoseconds), so such a sum means absurd values,
// which the reports then say instead of printing a wrapped-around number.
type sum struct{ saturated bool }

func (s *sum) add(x, y int64) int64 {
	r, ok := addInt64(x, y)
	if !ok {
		s.saturated = true
	}
	return r
}

// addInt64 is x+y held at the int64 limits; ok is false when it was.
func addInt64(x, y int64) (r int64, ok bool) {
	r = x + y
	switch {
	case y > 0 && r < x:
		return math.MaxInt64, false
	case y < 0 && r > x:
		return math.MinInt64, false
	}
	return r, true
}

// subInt64 is x-y held at the int64 limits.
func subInt64(x, y int64) (r int64, ok bool) {
	if y == math.MinInt64 {
		if x >= 0 {
			return math.MaxInt64, false
		}
		return x - y, true // x < 0: x - MinInt64 = x + 2^63 fits
	}
	return addInt64(x, -y)
}

// SaturatedNote is what a report with Saturated set says.
const SaturatedNote = "a sum of sample values passed the int64 limit and was held there: the profile's values are absurd (no measurement comes near 9.2e18)"

// aggregate sums the values of sample type idx per function (or object):
// flat at the leaf, cum once per stack; calls from sample type callsIdx.
// A function is its name in its shared object's file name (not path), so
// a function a preloaded library interposes (the same name in another
// object) is a row of its own, while the same library built elsewhere
// (`lib:DIR` variants) still lines up.
func aggregate(p *profile.Profile, idx, callsIdx int, by string, sat *sum) (map[string]*agg, int64) {
	rows := map[string]*agg{}
	get := func(name, object string) *agg {
		key := name
		if by != ByObject {
			key = name + "\x00" + filepath.Base(object)
		}
		a, ok := rows[key]
		if !ok {
			a = &agg{name: name, object: object}
			rows[key] = a
		}
		return a
	}
	var total int64
	var seen []*agg
	for _, s := range p.Sample {
		v := s.Value[idx]
		total = sat.add(total, v)
		seen = seen[:0]
		for i, loc := range s.Location {
			obj := ""
			if loc.Mapping != nil {
				obj = loc.Mapping.File
			}
			for j, ln := range loc.Line {
				name := ln.Function.Name
				if by == ByObject {
					name = filepath.Base(obj)
					if obj == "" {
						name = "[unknown]"
					}
				}
				a := get(name, obj)
				if i == 0 && j == 0 {
					a.flat = sat.add(a.flat, v)
					if callsIdx >= 0 {
						a.calls = sat.add(a.calls, s.Value[callsIdx])
						a.hasCalls = true
					}
				}
				if !a.inCum {
					a.inCum = true
					a.cum = sat.add(a.cum, v)
					seen = append(seen, a)
				}
			}
		}
		for _, a := range seen {
			a.inCum = false
		}
	}
	return rows, total
}

// sampleIndex finds a sample type by name ("" = default, else the last).
func sampleIndex(p *profile.Profile, name string) (int, error) {
	if name == "" {
		name = p.DefaultSampleType
	}
	if name == "" {
		return len(p.SampleType) - 1, nil
	}
	var names []string
	for i, t := range p.SampleType {
		if t.Type == name {
			return i, nil
		}
		names = append(names, t.Type)
	}
	return 0, fmt.Errorf("profile has no sample type %q (it has %v)", name, names)
}

// Top ranks the profile's functions (or objects) by flat value and flags
// functions called far more often than the graph has nodes.
func Top(p *profile.Profile, opt TopOptions) (*TopReport, error) {
	if len(p.SampleType) == 0 {
		return nil, fmt.Errorf("profile has no sample types")
	}
	idx, err := sampleIndex(p, opt.SampleType)
	if err != nil {
		return nil, err
	}
	by, err := checkBy(opt.By)
	if err != nil {
		return nil, err
	}
	callsIdx := -1
	for i, t := range p.SampleType {
		if t.Type == "calls" && i != idx {
			callsIdx = i
		}
	}
	rep := &TopReport{
		SampleType: p.SampleType[idx].Type, Unit: p.SampleType[idx].Unit, By: by,
		HasCalls: callsIdx >= 0, Comments: p.Comments,
	}
	rep.GraphNodes = opt.Nodes
	if rep.GraphNodes <= 0 {
		rep.GraphNodes = GraphNodes(p)
	}
	if rep.HasCalls && rep.GraphNodes > 0 {
		rep.RepeatRatio = cmp.Or(opt.RepeatRatio, DefaultRepeatRatio)
	}
	var sat sum
	aggs, total := aggregate(p, idx, callsIdx, by, &sat)
	rep.Total, rep.Saturated = total, sat.saturated
	all := make([]TopRow, 0, len(aggs))
	for _, a := range aggs {
		r := TopRow{Name: a.name, Object: a.object, Flat: a.flat, Cum: a.cum}
		if total != 0 {
			r.FlatPct = 100 * float64(a.flat) / float64(total)
			r.CumPct = 100 * float64(a.cum) / float64(total)
		}
		if a.hasCalls && by == ByFunction {
			calls := a.calls
			r.Calls = &calls
			if rep.GraphNodes > 0 {
				per := float64(calls) / float64(rep.GraphNodes)
				r.CallsPerNode = &per
				r.Repeated = per >= rep.RepeatRatio && !systemObject(a.object)
			}
		}
		all = append(all, r)
	}
	slices.SortFunc(all, func(a, b TopRow) int {
		return cmp.Or(cmp.Compare(b.Flat, a.Flat), cmp.Compare(b.Cum, a.Cum), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Object, b.Object))
	})
	rep.Rows = all[:rowLimit(opt.N, len(all))]
	for _, r := range all {
		if r.Repeated {
			rep.Repeated = append(rep.Repeated, r)
		}
	}
	slices.SortStableFunc(rep.Repeated, func(a, b TopRow) int { return cmp.Compare(*b.Calls, *a.Calls) })
	if len(rep.Repeated) > 10 {
		rep.Repeated = rep.Repeated[:10]
	}
	return rep, nil
}

func checkBy(by string) (string, error) {
	switch by {
	case "", ByFunction:
		return ByFunction, nil
	case ByObject:
		return ByObject, nil
	}
	return "", fmt.Errorf("group by %q: want %q or %q", by, ByFunction, ByObject)
}

// systemObjects are the shared objects whose functions run on behalf of
// their callers.
var systemObjects = []string{"libc.so", "libc-", "libstdc++.so", "libm.so", "libgcc_s.so", "ld-linux", "libpthread",
	"libtbbmalloc", "vgpreload_", "[kernel", "[vdso]"}

func systemObject(obj string) bool {
	base := filepath.Base(obj)
	for _, s := range systemObjects {
		if strings.HasPrefix(base, s) {
			return true
		}
	}
	return false
}

// rowLimit is how many of total rows a report shows for --n: 0 means 20,
// a negative value or one past the end means all of them.
func rowLimit(n, total int) int {
	if n == 0 {
		n = 20
	}
	if n < 0 || n > total {
		n = total
	}
	return n
}
