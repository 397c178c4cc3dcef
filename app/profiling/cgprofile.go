package profiling

import (
	"errors"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"
)

// CallgraphOptions tunes Callgraph.Profile.
type CallgraphOptions struct {
	// MinFraction stops expanding a stack towards its callers once the cost
	// it carries falls below this fraction of the total cost (default 1e-4);
	// that cost stays on the shorter stack, so self costs stay exact.
	MinFraction float64
	// MaxDepth bounds the length of a stack (default 96).
	MaxDepth int
}

// Profile converts the call graph into a pprof profile with the sample
// types [EVENT..., calls]: "instructions" for callgrind's Ir (other events
// keep their names), all in count units.
//
// Callgrind records exact self costs per function and exact call counts and
// inclusive costs per caller -> callee edge, but no full stacks. The stacks
// are reconstructed under the gprof assumption: a function's self cost is
// split among its callers in proportion to the inclusive cost each caller's
// calls incurred (the part of its inclusive cost no caller explains stays
// on a stack that ends at the function: an entry point), recursively up to
// the roots. A caller already on the stack is skipped and the split is
// renormalised over the others (recursion). Hence, in the profile:
//   - flat (self) instruction counts per function are exact;
//   - cumulative counts are estimates, exact where every function's cost
//     per call does not depend on who calls it;
//   - the "calls" value sits on two-frame stacks [callee, caller] whose
//     flat value is the exact number of calls made to the function.
//
// Functions callgrind could not name (no symbol) are named
// "object@0xADDRESS" with the run-time address callgrind printed.
func (g *Callgraph) Profile(opt CallgraphOptions) (*profile.Profile, error) {
	if len(g.Events) == 0 {
		return nil, errors.New("call graph has no events")
	}
	if opt.MinFraction <= 0 {
		opt.MinFraction = 1e-4
	}
	if opt.MaxDepth <= 0 {
		opt.MaxDepth = 96
	}
	ne := len(g.Events)
	types := make([]*profile.ValueType, 0, ne+1)
	for _, e := range g.Events {
		name := strings.ToLower(e)
		if e == "Ir" {
			name = "instructions"
		}
		types = append(types, &profile.ValueType{Type: name, Unit: "count"})
	}
	types = append(types, &profile.ValueType{Type: "calls", Unit: "count"})
	b := newBuilder(types, false)
	b.p.DefaultSampleType = types[0].Type
	b.p.PeriodType = &profile.ValueType{Type: types[0].Type, Unit: "count"}
	b.p.Period = 1

	var total int64
	for _, f := range g.Funcs {
		total += f.Self[0]
	}
	x := expander{minAbs: opt.MinFraction * float64(total), maxDepth: opt.MaxDepth}
	for _, f := range g.Funcs {
		if allZero(f.Self) {
			continue
		}
		x.paths = x.paths[:0]
		x.self = float64(f.Self[0])
		x.budget = maxExpandSteps
		x.expand([]*CGFunc{f}, 1)
		for _, pv := range splitExact(f.Self, x.paths) {
			b.add(frames(pv.stack), append(pv.values, 0), nil)
		}
	}
	for _, f := range g.Funcs {
		for _, c := range f.Calls {
			vals := make([]int64, ne+1)
			vals[ne] = c.Count
			b.add(frames([]*CGFunc{c.Callee, c.Caller}), vals, nil)
		}
	}
	b.p.Comments = append(b.p.Comments, "source: callgrind")
	if g.Cmd != "" {
		b.p.Comments = append(b.p.Comments, "command: "+g.Cmd)
	}
	return b.p, b.p.CheckValid()
}

// maxExpandSteps bounds the work of expanding one leaf: the paths through a
// call graph grow exponentially with its size when costs do not prune them
// (zero or negative counts in a damaged file).
const maxExpandSteps = 1 << 16

// expander walks from a leaf towards the roots, splitting its cost.
type expander struct {
	minAbs   float64
	maxDepth int
	self     float64 // the leaf's self cost (event 0)
	paths    []weighted
	budget   int // expand steps left for this leaf
}

type weighted struct {
	stack []*CGFunc
	frac  float64
}

func (x *expander) expand(path []*CGFunc, frac float64) {
	f := path[len(path)-1]
	x.budget--
	if len(path) >= x.maxDepth || x.budget <= 0 {
		x.emit(path, frac)
		return
	}
	weight := func(c *CGCall) float64 {
		if w := float64(c.Inclusive[0]); w > 0 {
			return w
		}
		return float64(c.Count)
	}
	var explained float64
	for _, c := range f.CalledBy {
		if c.Caller != f {
			explained += weight(c)
		}
	}
	root := math.Max(0, float64(f.Inclusive(0))-explained)
	denom := root
	var callers []*CGCall
	for _, c := range f.CalledBy {
		if c.Caller != f && !onPath(path, c.Caller) {
			callers = append(callers, c)
			denom += weight(c)
		}
	}
	if len(callers) == 0 || denom == 0 {
		x.emit(path, frac)
		return
	}
	stay := frac * root / denom
	for _, c := range callers {
		share := frac * weight(c) / denom
		if share*x.self < x.minAbs || share*x.self <= 0 {
			stay += share
			continue
		}
		next := make([]*CGFunc, len(path)+1)
		copy(next, path)
		next[len(path)] = c.Caller
		x.expand(next, share)
	}
	if stay > 0 {
		x.emit(path, stay)
	}
}

func (x *expander) emit(path []*CGFunc, frac float64) {
	x.paths = append(x.paths, weighted{stack: path, frac: frac})
}

func onPath(path []*CGFunc, f *CGFunc) bool {
	for _, p := range path {
		if p == f {
			return true
		}
	}
	return false
}

type stackValues struct {
	stack  []*CGFunc
	values []int64
}

// splitExact turns fractional shares of self into integer values that add
// up to self exactly (largest remainders go to the largest shares).
func splitExact(self []int64, paths []weighted) []stackValues {
	if len(paths) == 0 {
		return nil
	}
	out := make([]stackValues, len(paths))
	order := make([]int, len(paths))
	for i := range paths {
		out[i] = stackValues{stack: paths[i].stack, values: make([]int64, len(self))}
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return paths[order[a]].frac > paths[order[b]].frac })
	for e, s := range self {
		var given int64
		for i, p := range paths {
			v := int64(math.Floor(float64(s) * p.frac))
			out[i].values[e] = v
			given += v
		}
		// Floating-point shares leave a few units over (or, rarely, under).
		for k := 0; given != s; k = (k + 1) % len(order) {
			v := &out[order[k]].values[e]
			switch {
			case given < s:
				*v++
				given++
			case *v > 0:
				*v--
				given--
			}
		}
	}
	return out
}

func frames(stack []*CGFunc) []Frame {
	out := make([]Frame, len(stack))
	for i, f := range stack {
		out[i] = Frame{Function: cgName(f), File: f.File, Object: f.Object}
	}
	return out
}

// cgName names a function; callgrind names functions without a symbol by
// their address ("0x0000000054a5d000").
func cgName(f *CGFunc) string {
	if hex, ok := strings.CutPrefix(f.Name, "0x"); ok {
		if v, err := strconv.ParseUint(hex, 16, 64); err == nil {
			obj := filepath.Base(f.Object)
			if f.Object == "" || f.Object == "???" {
				obj = "[unknown]"
			}
			return obj + "@0x" + strconv.FormatUint(v, 16)
		}
	}
	return f.Name
}

func allZero(v []int64) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}
