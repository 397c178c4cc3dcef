package bench

import (
	"fmt"
	"math"

	"github.com/ovtoolkit/ovrun/internal/svg"
)

// EndpointsSVG is a strip plot: one small panel per endpoint, every
// measured run as a dot per arm (left to right by pair), the arm mean as a
// bar, and for two arms a grey line joining each pair's runs. It returns
// nil when there is no measured run.
func EndpointsSVG(r *Report) []byte {
	byPair := measured(r.Runs)
	if len(byPair) == 0 {
		return nil
	}
	const (
		cols                     = 4
		panelW, panelH           = 240.0, 200.0
		padL, padR, padT, padB   = 62.0, 10.0, 34.0, 30.0
		top                      = 58.0
		dotR, meanW, pairsSpread = 3.5, 0.6, 0.5
	)
	rows := (len(Endpoints) + cols - 1) / cols
	g := newSVG(panelW*cols, top+panelH*float64(rows)+6)
	g.Title("ovrun bench: per-run values of every endpoint")
	g.Text(12, 20, "start", 13, "Every measured run per arm (dots by pair, left to right); bar = arm mean", `font-weight="bold"`)
	items := make([]legendItem, len(r.Arms))
	for i, a := range r.Arms {
		items[i] = legendItem{colour(i), fmt.Sprintf("%d %s", i+1, a)}
		if i == 0 {
			items[i].label += " (control)"
		}
	}
	legend(g, 12, 42, items)
	nPairs := len(r.Order)
	for ei, e := range Endpoints {
		px := panelW * float64(ei%cols)
		py := top + panelH*float64(ei/cols)
		// values[arm][k] for the pairs in order
		type pt struct {
			pair int
			v    float64
		}
		values := make([][]pt, len(r.Arms))
		lo, hi := math.Inf(1), math.Inf(-1)
		for p := 1; p <= nPairs; p++ {
			for ai, a := range r.Arms {
				if s := byPair[p][a]; s != nil {
					v := e.Value(s)
					values[ai] = append(values[ai], pt{p, v})
					lo, hi = min(lo, v), max(hi, v)
				}
			}
		}
		if math.IsInf(lo, 0) {
			continue
		}
		f := newFormatter(e, lo, hi)
		yt, ylo, yhi := svg.NiceTicks(lo/f.scale, hi/f.scale, 4)
		x0, x1 := px+padL, px+panelW-padR
		y := svg.Linear(ylo, yhi, py+panelH-padB, py+padT)
		g.Text(px+padL, py+16, "start", 11, e.Name, `font-weight="bold"`)
		for _, v := range yt {
			g.Line(x0, y.At(v), x1, y.At(v), colGrid, 1, "")
			g.Text(x0-5, y.At(v)+4, "end", 9, svg.TickLabel(v, svg.TickStep(yt))+" "+f.unit, "")
		}
		g.Line(x0, py+panelH-padB, x1, py+panelH-padB, colAxis, 1, "")
		g.Line(x0, py+padT, x0, py+panelH-padB, colAxis, 1, "")
		band := (x1 - x0) / float64(len(r.Arms))
		xOf := func(ai, pair int) float64 {
			off := 0.0
			if nPairs > 1 {
				off = (float64(pair-1)/float64(nPairs-1) - 0.5) * band * pairsSpread
			}
			return x0 + band*(float64(ai)+0.5) + off
		}
		if len(r.Arms) == 2 {
			for _, a := range values[0] {
				for _, b := range values[1] {
					if a.pair == b.pair {
						g.Line(xOf(0, a.pair), y.At(a.v/f.scale), xOf(1, b.pair), y.At(b.v/f.scale), "#bbbbbb", 1, "")
					}
				}
			}
		}
		for ai, vs := range values {
			if len(vs) == 0 {
				continue
			}
			sum := 0.0
			for _, v := range vs {
				sum += v.v
				g.Circle(xOf(ai, v.pair), y.At(v.v/f.scale), dotR, colour(ai), `fill-opacity="0.85"`)
			}
			m := y.At(sum / float64(len(vs)) / f.scale)
			cx := x0 + band*(float64(ai)+0.5)
			g.Line(cx-band*meanW/2, m, cx+band*meanW/2, m, "#111111", 2, "")
			if label := r.Arms[ai]; band >= 6*float64(len(label)) {
				g.Text(cx, py+panelH-padB+14, "middle", 9, label, "")
			} else {
				g.Text(cx, py+panelH-padB+14, "middle", 9, fmt.Sprint(ai+1), "")
			}
		}
	}
	return g.Bytes()
}
