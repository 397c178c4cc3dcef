package bench

import (
	"fmt"
	"slices"

	"github.com/ovtoolkit/ovrun/internal/svg"
)

// TimelineSVG draws pair p's runs one above the other on one time axis:
// per arm a compile lane (foreground / background) and a decode lane
// (prefill, each rung in its colour, boundary waits and KV migrations).
// It returns nil when pair p has no run.
func TimelineSVG(r *Report, p int) []byte {
	runs := r.pairRuns(p)
	if len(runs) == 0 {
		return nil
	}
	arms := armsInRunOrder(r, p)
	const (
		width, left, right, top = 960.0, 150.0, 24.0, 34.0
		lane, laneGap, panel    = 18.0, 5.0, 62.0
	)
	tmax := 0.0
	for _, s := range runs {
		tmax = max(tmax, s.EndS)
		for _, c := range s.Compiles {
			tmax = max(tmax, c.EndS)
		}
	}
	ticks, _, thi := svg.NiceTicks(0, tmax, 10)
	x := svg.Linear(0, thi, left, width-right)
	axisY := top + panel*float64(len(arms)) + 4
	height := axisY + 36 + 44
	g := newSVG(width, height)
	g.Title(fmt.Sprintf("ovrun bench: timelines of pair %d", p))
	g.Text(left, 20, "start", 13, fmt.Sprintf("Pair %d: compile and decode timelines (run order top to bottom)", p), `font-weight="bold"`)
	for _, t := range ticks {
		g.Line(x.At(t), top-4, x.At(t), axisY, colGrid, 1, "")
	}
	for i, arm := range arms {
		s := runs[arm]
		y0 := top + panel*float64(i)
		cy, dy := y0+4, y0+4+lane+laneGap
		g.Text(8, cy+lane-4, "start", 12, arm, `font-weight="bold"`)
		g.Text(left-8, cy+lane-5, "end", 10, "compile", `fill="#666666"`)
		g.Text(left-8, dy+lane-5, "end", 10, "decode", `fill="#666666"`)
		for _, c := range s.Compiles {
			fill := colCompileBG
			switch {
			case c.Kind == "verify":
				fill = colCompileVer
			case c.Foreground:
				fill = colCompileFG
			}
			x0, x1 := x.At(c.StartS), x.At(c.EndS)
			g.Rect(x0, cy, max(x1-x0, 1), lane, fill, `stroke="#ffffff" stroke-width="0.5"`)
			label := fmt.Sprint(c.Capacity)
			if c.Kind == "prefill" {
				label = "prefill " + label
			}
			if x1-x0 > 7*float64(len(label))+4 {
				tc := "#ffffff"
				if fill != colCompileFG {
					tc = "#222222"
				}
				g.Text((x0+x1)/2, cy+lane-5, "middle", 10, label, fmt.Sprintf(`fill="%s"`, tc))
			}
		}
		if s.PrefillEndS > s.PrefillStartS {
			g.Rect(x.At(s.PrefillStartS), dy, x.At(s.PrefillEndS)-x.At(s.PrefillStartS), lane, colPrefill, "")
		}
		for _, rg := range s.Rungs {
			if rg.FirstStep <= 0 || rg.DecodeEndS <= rg.DecodeStartS {
				continue
			}
			x0, x1 := x.At(rg.DecodeStartS), x.At(rg.DecodeEndS)
			g.Rect(x0, dy, max(x1-x0, 1), lane, rungColour(r.Campaign.Ladder, rg.Capacity), "")
			if label := fmt.Sprint(rg.Capacity); x1-x0 > 7*float64(len(label))+4 {
				g.Text((x0+x1)/2, dy+lane-5, "middle", 10, label, `fill="#ffffff"`)
			}
		}
		for _, rg := range s.Rungs {
			if rg.WaitS > 0 && rg.WaitStartS > 0 {
				x0 := x.At(rg.WaitStartS)
				g.Rect(x0, dy-2, max(x.At(rg.WaitStartS+rg.WaitS)-x0, 1.5), lane+4, colWait, "")
			}
			if rg.MigrateS > 0 && rg.MigrateStartS > 0 {
				x0 := x.At(rg.MigrateStartS)
				g.Rect(x0, dy, max(x.At(rg.MigrateStartS+rg.MigrateS)-x0, 1), lane, colMigrate, "")
			}
		}
		if s.EndS > 0 {
			xe := x.At(s.EndS)
			g.Line(xe, cy-2, xe, dy+lane+2, colAxis, 1, "")
			label, lx, anchor := fmt.Sprintf("last token %.2f s", s.EndS), xe+3, "start"
			if lx+6*float64(len(label)) > width {
				lx, anchor = xe-3, "end"
			}
			g.Text(lx, dy+lane+12, anchor, 10, label, `fill="#444444"`)
		}
	}
	g.Line(left, axisY, width-right, axisY, colAxis, 1, "")
	for _, t := range ticks {
		g.Line(x.At(t), axisY, x.At(t), axisY+4, colAxis, 1, "")
		g.Text(x.At(t), axisY+16, "middle", 10, svg.TickLabel(t, svg.TickStep(ticks)), "")
	}
	g.Text((left+width-right)/2, axisY+30, "middle", 11, "seconds from process start", "")
	legend(g, left, axisY+48, timelineLegend(r.Campaign.Ladder))
	return g.Bytes()
}

type legendItem struct{ colour, label string }

func timelineLegend(ladder []int) []legendItem {
	items := []legendItem{{colCompileFG, "foreground compile"}, {colCompileBG, "background compile"}, {colPrefill, "prefill"}}
	for _, c := range ladder {
		items = append(items, legendItem{rungColour(ladder, c), fmt.Sprintf("rung %d", c)})
	}
	return append(items, legendItem{colWait, "boundary wait"}, legendItem{colMigrate, "KV migration"})
}

// legend draws swatches in one row starting at (x, y).
func legend(g *svg.Doc, x, y float64, items []legendItem) {
	for _, it := range items {
		g.Rect(x, y-9, 10, 10, it.colour, "")
		g.Text(x+14, y, "start", 10, it.label, "")
		x += 24 + 6*float64(len(it.label))
	}
}

func rungColour(ladder []int, capacity int) string {
	i := slices.Index(ladder, capacity)
	if i < 0 {
		i = len(ladder)
	}
	return colour(i)
}

// armsInRunOrder lists the arms of pair p in the order they ran.
func armsInRunOrder(r *Report, p int) []string {
	if p >= 1 && p <= len(r.Order) {
		var out []string
		runs := r.pairRuns(p)
		for _, a := range r.Order[p-1] {
			if runs[a] != nil {
				out = append(out, a)
			}
		}
		return out
	}
	return nil
}
