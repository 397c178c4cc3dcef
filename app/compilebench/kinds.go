package compilebench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/model"
)

// KindCompileFunc measures one compile of kind k at a capacity, in a fresh
// process that first compiles the graphs in after (untimed, kept alive: a
// successor compiles while its predecessors hold their memory).
type KindCompileFunc func(ctx context.Context, capacity int, k compilecost.Kind, after []model.GraphSpec) (*Measurement, error)

// Predecessors are the graphs the runtime has compiled, and holds, when it
// compiles kind k at ladder[i] as a successor: for a decode graph the rung
// below it (also for an under-decode compile, which it decodes beside), or
// for the first rung the prefill graph of chunk prefillChunk
// (--prefill graph compiles it first; none when prefillChunk <= 1 or above
// the capacity); for a
// prefill graph the decode graph of its capacity (--prefill auto compiles
// that first). A first-compile kind has none.
func Predecessors(ladder []int, i int, k compilecost.Kind, prefillChunk int) []model.GraphSpec {
	switch {
	case !k.Successor:
		return nil
	case k.UnderDecode && i > 0:
		return []model.GraphSpec{{Capacity: ladder[i-1], Chunk: 1}}
	case k.UnderDecode: // the first rung compiles before anything decodes
		return nil
	case k.Graph == compilecost.GraphPrefill:
		return []model.GraphSpec{{Capacity: ladder[i], Chunk: 1}}
	case i > 0:
		return []model.GraphSpec{{Capacity: ladder[i-1], Chunk: 1}}
	case prefillChunk > 1 && prefillChunk <= ladder[i]:
		return []model.GraphSpec{{Capacity: ladder[i], Chunk: prefillChunk}}
	}
	return nil
}

// FormatSpecs writes graphs as compile-once's --after takes them:
// CAPACITY:CHUNK, comma-separated.
func FormatSpecs(specs []model.GraphSpec) string {
	parts := make([]string, len(specs))
	for i, s := range specs {
		parts[i] = fmt.Sprintf("%d:%d", s.Capacity, s.Chunk)
	}
	return strings.Join(parts, ",")
}

// ParseSpecs reads FormatSpecs' form; capacities and chunks must be
// positive, a chunk at most its capacity and at most maxCapacity.
func ParseSpecs(s string, maxCapacity int) ([]model.GraphSpec, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []model.GraphSpec
	for _, part := range strings.Split(s, ",") {
		cs, ks, ok := strings.Cut(strings.TrimSpace(part), ":")
		c, err1 := strconv.Atoi(cs)
		k, err2 := strconv.Atoi(ks)
		if !ok || err1 != nil || err2 != nil || c < 1 || k < 1 || k > c || c > maxCapacity {
			return nil, fmt.Errorf("graph %q: want CAPACITY:CHUNK with 1 <= CHUNK <= CAPACITY <= %d", part, maxCapacity)
		}
		out = append(out, model.GraphSpec{Capacity: c, Chunk: k})
	}
	return out, nil
}

// KindsSweepProgress reports one finished compile of a kinds sweep.
type KindsSweepProgress struct {
	Done, Total int
	Capacity    int
	Kind        compilecost.Kind
	Last        *Measurement
	Elapsed     time.Duration
}

// SweepKinds measures the other kinds of compile (successor decode
// graphs, prefill graphs of chunk prefillChunk first and as successors:
// each of kinds) at every capacity of cfg's ladder, cfg.Reps times in
// SweepOrder, each in a fresh process after its Predecessors, and adds
// them to p (which Sweep made) with a fit per kind. On a failure or
// cancellation p keeps what was measured and the error is returned.
func SweepKinds(ctx context.Context, cfg SweepConfig, p *compilecost.Profile, kinds []compilecost.Kind, prefillChunk int,
	compile KindCompileFunc, progress func(KindsSweepProgress)) error {
	index := map[int]int{}
	for i, c := range cfg.Ladder {
		index[c] = i
	}
	type job struct {
		capacity int
		kind     compilecost.Kind
	}
	var jobs []job
	for _, rc := range SweepOrder(cfg.Ladder, cfg.Reps) {
		for _, k := range kinds {
			if k.Successor && k.Graph == compilecost.GraphDecode && Predecessors(cfg.Ladder, index[rc[1]], k, prefillChunk) == nil {
				continue // the first rung with no prefill graph before it is never a successor
			}
			if k.Graph == compilecost.GraphPrefill && k.Chunk > rc[1] {
				continue // no prefill graph larger than its capacity
			}
			jobs = append(jobs, job{rc[1], k})
		}
	}
	start := time.Now()
	var runErr error
	for n, jb := range jobs {
		if err := ctx.Err(); err != nil {
			runErr = err
			break
		}
		m, err := compile(ctx, jb.capacity, jb.kind, Predecessors(cfg.Ladder, index[jb.capacity], jb.kind, prefillChunk))
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			runErr = fmt.Errorf("capacity %d, %s: %w", jb.capacity, jb.kind, err)
			break
		}
		addKind(p, jb.capacity, jb.kind, m)
		if progress != nil {
			progress(KindsSweepProgress{Done: n + 1, Total: len(jobs), Capacity: jb.capacity, Kind: jb.kind, Last: m, Elapsed: time.Since(start)})
		}
	}
	p.Fits = nil
	if err := p.Validate(); err == nil {
		p.FillDerived()
	}
	return runErr
}

// addKind records one measurement of kind k at a capacity in p.
func addKind(p *compilecost.Profile, capacity int, k compilecost.Kind, m *Measurement) {
	i := 0
	for i < len(p.Rungs) && p.Rungs[i].Capacity < capacity {
		i++
	}
	if i == len(p.Rungs) || p.Rungs[i].Capacity != capacity {
		p.Rungs = append(p.Rungs[:i], append([]compilecost.Rung{{Capacity: capacity}}, p.Rungs[i:]...)...)
	}
	r := &p.Rungs[i]
	if k.UnderDecode {
		r.UnderDecodeS = append(r.UnderDecodeS, m.CompileS)
		r.UnderDecodeMedianS = compilecost.Median(r.UnderDecodeS)
		r.UnderDecodeTokensPerS = append(r.UnderDecodeTokensPerS, m.UnderDecodeTokensPerS)
		return
	}
	if k.Graph == compilecost.GraphDecode {
		r.SuccessorS = append(r.SuccessorS, m.CompileS)
		r.SuccessorMedianS = compilecost.Median(r.SuccessorS)
		return
	}
	j := 0
	for j < len(r.Prefill) && r.Prefill[j].Chunk != k.Chunk {
		j++
	}
	if j == len(r.Prefill) {
		r.Prefill = append(r.Prefill, compilecost.PrefillCost{Chunk: k.Chunk})
	}
	pc := &r.Prefill[j]
	if k.Successor {
		pc.SuccessorS = append(pc.SuccessorS, m.CompileS)
		pc.SuccessorMedianS = compilecost.Median(pc.SuccessorS)
	} else {
		pc.FirstS = append(pc.FirstS, m.CompileS)
		pc.FirstMedianS = compilecost.Median(pc.FirstS)
	}
	pc.PeakRSSBytes = max(pc.PeakRSSBytes, m.PeakRSSBytes)
}
