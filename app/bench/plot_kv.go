package bench

import (
	"fmt"
	"slices"

	"github.com/ovtoolkit/ovrun/internal/svg"
	"github.com/ovtoolkit/ovrun/runtime"
)

// KVSVG draws, for pair p, each arm's reserved KV over time (a filled step
// line) against its live KV (dashed), one panel per arm on shared axes.
// It returns nil when pair p has no run.
func KVSVG(r *Report, p int) []byte {
	runs := r.pairRuns(p)
	arms := armsInRunOrder(r, p)
	if len(arms) == 0 {
		return nil
	}
	const (
		width, left, right, top = 960.0, 90.0, 24.0, 54.0
		plotH, gap              = 110.0, 34.0
	)
	tmax, ymax := 0.0, 0.0
	for _, s := range runs {
		tmax = max(tmax, s.EndS)
		for _, k := range s.KVTimeline {
			tmax = max(tmax, k.TS)
			ymax = max(ymax, float64(k.ReservedBytes), float64(k.LiveBytes))
		}
	}
	xt, _, thi := svg.NiceTicks(0, tmax, 10)
	unit := newFormatter(Endpoint{Bytes: true}, ymax)
	yt, _, yhi := svg.NiceTicks(0, ymax/unit.scale, 4)
	x := svg.Linear(0, thi, left, width-right)
	height := top + (plotH+gap)*float64(len(arms)) + 40
	g := newSVG(width, height)
	g.Title(fmt.Sprintf("ovrun bench: reserved and live KV of pair %d", p))
	g.Text(left, 20, "start", 13, fmt.Sprintf("Pair %d: reserved KV (solid) against live KV (dashed)", p), `font-weight="bold"`)
	for i, arm := range arms {
		s := runs[arm]
		y0 := top + (plotH+gap)*float64(i)
		y := svg.Linear(0, yhi, y0+plotH, y0)
		c := colour(slices.Index(r.Arms, arm))
		for _, t := range xt {
			g.Line(x.At(t), y0, x.At(t), y0+plotH, colGrid, 1, "")
		}
		for _, v := range yt {
			g.Line(left, y.At(v), width-right, y.At(v), colGrid, 1, "")
			g.Text(left-6, y.At(v)+4, "end", 10, svg.TickLabel(v, svg.TickStep(yt))+" "+unit.unit, "")
		}
		g.Text(left, y0-6, "start", 12, arm, `font-weight="bold"`)
		res, live := kvSteps(s, x, y, unit.scale)
		if len(res) > 0 {
			area := append([][2]float64{{res[0][0], y.At(0)}}, res...)
			area = append(area, [2]float64{res[len(res)-1][0], y.At(0)})
			g.Polygon(area, c, `fill-opacity="0.25"`)
			g.Polyline(res, c, 2, "")
			g.Polyline(live, "#333333", 1.5, `stroke-dasharray="5,3"`)
		}
		g.Line(left, y0+plotH, width-right, y0+plotH, colAxis, 1, "")
		g.Line(left, y0, left, y0+plotH, colAxis, 1, "")
		g.Text(width-right, y0-6, "end", 10, fmt.Sprintf("reserved avg %s, peak %s; live avg %s",
			fmtBytes(s.KVReservedAvgBytes), fmtBytes(float64(s.KVReservedPeakBytes)), fmtBytes(s.KVLiveAvgBytes)), `fill="#444444"`)
	}
	axisY := top + (plotH+gap)*float64(len(arms)) - gap + 2
	for _, t := range xt {
		g.Text(x.At(t), axisY+14, "middle", 10, svg.TickLabel(t, svg.TickStep(xt)), "")
	}
	g.Text((left+width-right)/2, axisY+30, "middle", 11, "seconds from process start", "")
	return g.Bytes()
}

// kvSteps turns a run's KV samples into step lines (the level holds until
// the next sample) for the reserved and live bytes, extended to the run's end.
func kvSteps(s *runtime.Summary, x, y svg.Scale, unit float64) (res, live [][2]float64) {
	ks := slices.Clone(s.KVTimeline)
	slices.SortStableFunc(ks, func(a, b runtime.KVSample) int {
		switch {
		case a.TS < b.TS:
			return -1
		case a.TS > b.TS:
			return 1
		}
		return 0
	})
	for i, k := range ks {
		if i > 0 {
			res = append(res, [2]float64{x.At(k.TS), y.At(float64(ks[i-1].ReservedBytes) / unit)})
			live = append(live, [2]float64{x.At(k.TS), y.At(float64(ks[i-1].LiveBytes) / unit)})
		}
		res = append(res, [2]float64{x.At(k.TS), y.At(float64(k.ReservedBytes) / unit)})
		live = append(live, [2]float64{x.At(k.TS), y.At(float64(k.LiveBytes) / unit)})
	}
	if n := len(ks); n > 0 && s.EndS > ks[n-1].TS {
		res = append(res, [2]float64{x.At(s.EndS), y.At(float64(ks[n-1].ReservedBytes) / unit)})
		live = append(live, [2]float64{x.At(s.EndS), y.At(float64(ks[n-1].LiveBytes) / unit)})
	}
	return res, live
}
