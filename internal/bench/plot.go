package bench

import (
	"fmt"
	"math"
	"strings"
)

// A tiny SVG writer: enough for lanes, step lines, dots and axes, with
// coordinates rounded to 0.1 px so the output is stable for golden tests.

type svg struct {
	b    strings.Builder
	w, h float64
}

func newSVG(w, h float64) *svg {
	s := &svg{w: w, h: h}
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="sans-serif" font-size="11">`+"\n",
		f1(w), f1(h), f1(w), f1(h))
	s.rect(0, 0, w, h, "#ffffff", "")
	return s
}

func (s *svg) rect(x, y, w, h float64, fill, extra string) {
	if w <= 0 || h <= 0 {
		return
	}
	fmt.Fprintf(&s.b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"%s/>`+"\n", f1(x), f1(y), f1(w), f1(h), fill, attr(extra))
}

func (s *svg) line(x1, y1, x2, y2 float64, stroke string, width float64, extra string) {
	fmt.Fprintf(&s.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="%s"%s/>`+"\n",
		f1(x1), f1(y1), f1(x2), f1(y2), stroke, f1(width), attr(extra))
}

func (s *svg) circle(x, y, r float64, fill, extra string) {
	fmt.Fprintf(&s.b, `<circle cx="%s" cy="%s" r="%s" fill="%s"%s/>`+"\n", f1(x), f1(y), f1(r), fill, attr(extra))
}

// points formats vertices as an SVG points attribute ("x,y x,y ...").
func points(pts [][2]float64) string {
	var p strings.Builder
	for i, pt := range pts {
		if i > 0 {
			p.WriteByte(' ')
		}
		p.WriteString(f1(pt[0]) + "," + f1(pt[1]))
	}
	return p.String()
}

func (s *svg) polyline(pts [][2]float64, stroke string, width float64, extra string) {
	if len(pts) == 0 {
		return
	}
	fmt.Fprintf(&s.b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="%s"%s/>`+"\n", points(pts), stroke, f1(width), attr(extra))
}

func (s *svg) polygon(pts [][2]float64, fill, extra string) {
	if len(pts) == 0 {
		return
	}
	fmt.Fprintf(&s.b, `<polygon points="%s" fill="%s"%s/>`+"\n", points(pts), fill, attr(extra))
}

// text writes str at (x, y); anchor is start, middle or end.
func (s *svg) text(x, y float64, anchor string, size float64, str, extra string) {
	fmt.Fprintf(&s.b, `<text x="%s" y="%s" text-anchor="%s" font-size="%s"%s>%s</text>`+"\n",
		f1(x), f1(y), anchor, f1(size), attr(extra), xmlEscape(str))
}

func (s *svg) title(str string) { fmt.Fprintf(&s.b, "<title>%s</title>\n", xmlEscape(str)) }

func (s *svg) bytes() []byte {
	s.b.WriteString("</svg>\n")
	return []byte(s.b.String())
}

func attr(extra string) string {
	if extra == "" {
		return ""
	}
	return " " + extra
}

func f1(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	s = strings.TrimSuffix(s, ".0")
	if s == "-0" {
		s = "0"
	}
	return s
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// scale maps a data interval onto a pixel interval.
type scale struct{ d0, d1, r0, r1 float64 }

func (s scale) at(v float64) float64 {
	if s.d1 == s.d0 {
		return s.r0
	}
	return s.r0 + (v-s.d0)/(s.d1-s.d0)*(s.r1-s.r0)
}

// niceTicks returns about n round tick values (1, 2 or 5 times a power of
// ten) covering [lo, hi], and the range they span.
func niceTicks(lo, hi float64, n int) (ticks []float64, tlo, thi float64) {
	if hi < lo {
		lo, hi = hi, lo
	}
	if hi == lo {
		if hi == 0 {
			hi = 1
		} else {
			lo, hi = lo-math.Abs(lo)*0.1, hi+math.Abs(hi)*0.1
		}
	}
	raw := (hi - lo) / float64(max(n, 1))
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	tlo = math.Floor(lo/step+1e-9) * step
	thi = math.Ceil(hi/step-1e-9) * step
	for v := tlo; v <= thi+step*1e-6; v += step {
		ticks = append(ticks, math.Round(v/step)*step)
	}
	return ticks, tlo, thi
}

// tickLabel prints a tick value with as few decimals as its step needs.
func tickLabel(v, step float64) string {
	d := 0
	if step > 0 && step < 1 {
		d = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	s := fmt.Sprintf("%.*f", d, v)
	if strings.Trim(s, "-0.") == "" {
		s = "0"
	}
	return s
}

func tickStep(ticks []float64) float64 {
	if len(ticks) < 2 {
		return 0
	}
	return ticks[1] - ticks[0]
}

// palette is Tableau 10: rungs and arms take colours in turn.
var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#e15759", "#9c755f", "#ff9da7", "#bab0ac"}

func colour(i int) string { return palette[i%len(palette)] }

// Colours of the timeline's non-rung segments.
const (
	colPrefill    = "#9e9e9e"
	colWait       = "#d62728"
	colMigrate    = "#222222"
	colCompileFG  = "#3f3f8f"
	colCompileBG  = "#a9b4f0"
	colCompileVer = "#cccccc"
	colAxis       = "#444444"
	colGrid       = "#e6e6e6"
)

// Plot file names and what report.md says under each.
const (
	PlotTimeline  = "timeline.svg"
	PlotKV        = "kv.svg"
	PlotEndpoints = "endpoints.svg"
)

var plotCaptions = map[string]string{
	PlotTimeline:  "One pair's runs on one time axis (seconds from process start). Compile lane: foreground compiles (dark) lie on the path to the first token; background compiles (light) overlap decode. Decode lane: prefill (grey), then each rung in its colour; red = waiting for the next graph at a boundary, black = KV migration.",
	PlotKV:        "Reserved KV bytes over time per arm (solid, filled) against live KV, the bytes the tokens so far need (dashed), for the same pair.",
	PlotEndpoints: "Every measured run per arm and endpoint (dots, ordered left to right by pair; grey lines join a pair's runs when there are two arms); the bar is the arm mean. Warm-ups are excluded.",
}
