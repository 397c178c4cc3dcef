// Package svg is the small SVG writer both timeline drawers use
// (tracing.WriteTimeline and the plots of app/bench): elements with
// coordinates rounded to 0.1 px, so that output is stable for golden files,
// XML escaping, and round tick values for axes.
package svg

import (
	"fmt"
	"math"
	"strings"
)

// Doc is an SVG document being written.
type Doc struct {
	b strings.Builder
}

// New starts a document of w x h pixels; attrs (may be empty) are added to
// the svg element, e.g. its font.
func New(w, h float64, attrs string) *Doc {
	d := &Doc{}
	fmt.Fprintf(&d.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s"%s>`+"\n",
		Num(w), Num(h), Num(w), Num(h), attr(attrs))
	return d
}

// Raw writes s as it is (definitions, groups).
func (d *Doc) Raw(s string) { d.b.WriteString(s) }

// Rect draws a rectangle; one without area is left out.
func (d *Doc) Rect(x, y, w, h float64, fill, extra string) {
	if w <= 0 || h <= 0 {
		return
	}
	fmt.Fprintf(&d.b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"%s/>`+"\n", Num(x), Num(y), Num(w), Num(h), fill, attr(extra))
}

// RectTitled draws a rectangle with a hover title.
func (d *Doc) RectTitled(x, y, w, h float64, fill, extra, title string) {
	if w <= 0 || h <= 0 {
		return
	}
	fmt.Fprintf(&d.b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"%s><title>%s</title></rect>`+"\n",
		Num(x), Num(y), Num(w), Num(h), fill, attr(extra), Escape(title))
}

// Line draws a line; width 0 leaves the stroke width at its default.
func (d *Doc) Line(x1, y1, x2, y2 float64, stroke string, width float64, extra string) {
	sw := ""
	if width > 0 {
		sw = fmt.Sprintf(` stroke-width="%s"`, Num(width))
	}
	fmt.Fprintf(&d.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"%s%s/>`+"\n",
		Num(x1), Num(y1), Num(x2), Num(y2), stroke, sw, attr(extra))
}

// Circle draws a dot.
func (d *Doc) Circle(x, y, r float64, fill, extra string) {
	fmt.Fprintf(&d.b, `<circle cx="%s" cy="%s" r="%s" fill="%s"%s/>`+"\n", Num(x), Num(y), Num(r), fill, attr(extra))
}

// Polyline draws an open line through pts.
func (d *Doc) Polyline(pts [][2]float64, stroke string, width float64, extra string) {
	if len(pts) == 0 {
		return
	}
	fmt.Fprintf(&d.b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="%s"%s/>`+"\n", Points(pts), stroke, Num(width), attr(extra))
}

// Polygon fills the shape through pts.
func (d *Doc) Polygon(pts [][2]float64, fill, extra string) {
	if len(pts) == 0 {
		return
	}
	fmt.Fprintf(&d.b, `<polygon points="%s" fill="%s"%s/>`+"\n", Points(pts), fill, attr(extra))
}

// Path draws path data (see StepPath); title, when set, is its hover text.
func (d *Doc) Path(data, fill, extra, title string) {
	if title == "" {
		fmt.Fprintf(&d.b, `<path d="%s" fill="%s"%s/>`+"\n", data, fill, attr(extra))
		return
	}
	fmt.Fprintf(&d.b, `<path d="%s" fill="%s"%s><title>%s</title></path>`+"\n", data, fill, attr(extra), Escape(title))
}

// Text writes str at (x, y). anchor (start, middle, end) and size (px) are
// left out when empty or 0, inheriting the document's.
func (d *Doc) Text(x, y float64, anchor string, size float64, str, extra string) {
	a := ""
	if anchor != "" {
		a += ` text-anchor="` + anchor + `"`
	}
	if size > 0 {
		a += ` font-size="` + Num(size) + `"`
	}
	fmt.Fprintf(&d.b, `<text x="%s" y="%s"%s%s>%s</text>`+"\n", Num(x), Num(y), a, attr(extra), Escape(str))
}

// Title is the document's title.
func (d *Doc) Title(str string) { fmt.Fprintf(&d.b, "<title>%s</title>\n", Escape(str)) }

// Bytes ends the document and returns it.
func (d *Doc) Bytes() []byte {
	d.b.WriteString("</svg>\n")
	return []byte(d.b.String())
}

func attr(extra string) string {
	if extra == "" {
		return ""
	}
	return " " + extra
}

// Num formats a coordinate to 0.1 px, without a trailing ".0".
func Num(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	s = strings.TrimSuffix(s, ".0")
	if s == "-0" {
		s = "0"
	}
	return s
}

// Points formats vertices as an SVG points attribute ("x,y x,y ...").
func Points(pts [][2]float64) string {
	var p strings.Builder
	for i, pt := range pts {
		if i > 0 {
			p.WriteByte(' ')
		}
		p.WriteString(Num(pt[0]) + "," + Num(pt[1]))
	}
	return p.String()
}

// StepPath is the path data of a step line through xs[i], ys[i] (a
// horizontal then a vertical move to each point); closed, it returns along
// the baseline to the start, for a filled area.
func StepPath(xs, ys []float64, closed bool, baseline float64) string {
	if len(xs) == 0 {
		return ""
	}
	var p strings.Builder
	p.WriteString("M" + Num(xs[0]) + " " + Num(ys[0]))
	for i := 1; i < len(xs); i++ {
		p.WriteString(" H" + Num(xs[i]) + " V" + Num(ys[i]))
	}
	if closed {
		p.WriteString(" V" + Num(baseline) + " H" + Num(xs[0]) + " Z")
	}
	return p.String()
}

// Escape escapes text and attribute values.
func Escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// NiceTicks returns about n round tick values (1, 2 or 5 times a power of
// ten) covering [lo, hi], and the range they span.
func NiceTicks(lo, hi float64, n int) (ticks []float64, tlo, thi float64) {
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

// TickLabel prints a tick value with as few decimals as its step needs.
func TickLabel(v, step float64) string {
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

// TickStep is the distance between consecutive ticks, 0 for fewer than two.
func TickStep(ticks []float64) float64 {
	if len(ticks) < 2 {
		return 0
	}
	return ticks[1] - ticks[0]
}

// Scale maps a data interval [D0, D1] onto a pixel interval [R0, R1].
type Scale struct{ D0, D1, R0, R1 float64 }

// Linear is the Scale from [d0, d1] onto [r0, r1].
func Linear(d0, d1, r0, r1 float64) Scale { return Scale{D0: d0, D1: d1, R0: r0, R1: r1} }

// At is v's pixel position.
func (s Scale) At(v float64) float64 {
	if s.D1 == s.D0 {
		return s.R0
	}
	return s.R0 + (v-s.D0)/(s.D1-s.D0)*(s.R1-s.R0)
}
