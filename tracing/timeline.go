package tracing

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/internal/svg"
)

// TimelineOptions shape the timeline picture.
type TimelineOptions struct {
	Width   int    // pixels; 0 means 1200
	TraceID string // which run of a file with several; empty: the last
}

// ErrNoRun says a trace holds no ovrun.run span (or not the one asked for).
var ErrNoRun = errors.New("no ovrun.run span in the trace")

// ErrTraceTooLarge says a trace holds more than a timeline reads: a line
// over MaxTimelineLineBytes or more than MaxTimelineItems to draw.
var ErrTraceTooLarge = errors.New("trace too large to plot")

// Limits of ReadTimeline. ovrun writes one line per export of at most 512
// spans and a run's trace holds a few spans per rung and at most
// MaxKVEvents+16 events: both limits are far above any run's, and keep
// what a hostile or foreign file makes the reader hold to a few hundred
// MiB.
const (
	// MaxTimelineLineBytes is the longest line (one OTLP/JSON request) read.
	MaxTimelineLineBytes = 16 << 20
	// MaxTimelineItems is the most spans and events to draw held at once.
	MaxTimelineItems = 100_000
)

// drawn are the spans a timeline draws; every other span is skipped as
// it is read.
var drawn = map[string]bool{SpanRun: true, SpanCompile: true, SpanPrefill: true, SpanDecode: true, SpanMigrate: true, SpanBoundaryWait: true}

// ReadTimeline reads from a trace file (as ReadTraceFile does) the spans
// WriteTimeline draws, of trace traceID when it is not empty: the run
// spans with their kv events and the children the lanes show, without
// their events. It reads a line at a time, checks ctx between spans, and
// fails with ErrTraceTooLarge, naming the limit, rather than hold more
// than MaxTimelineLineBytes of a line or MaxTimelineItems spans and events.
func ReadTimeline(ctx context.Context, path, traceID string) ([]Span, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	spans, err := readTimeline(ctx, safefile.LimitReader(f, MaxTraceBytes, "trace"), traceID, MaxTimelineLineBytes, MaxTimelineItems)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return spans, nil
}

// readTimeline is ReadTimeline on r with the limits given.
func readTimeline(ctx context.Context, r io.Reader, traceID string, maxLine, maxItems int) ([]Span, error) {
	var out []Span
	items := 0
	err := eachSpan(ctx, r, maxLine, func(n int, ps *tracepb.Span, service string) error {
		if !drawn[ps.Name] || traceID != "" && hex.EncodeToString(ps.TraceId) != traceID {
			return nil
		}
		if ps.Name != SpanRun || len(ps.ParentSpanId) > 0 {
			ps.Events = nil // only the root's kv events are drawn
		}
		sp := spanOf(ps, service)
		sp.Events = slices.DeleteFunc(sp.Events, func(e Event) bool { return e.Name != EventKV })
		if items += 1 + len(sp.Events); items > maxItems {
			return fmt.Errorf("line %d: %w: more than %d spans and events to draw (the limit; --trace-id picks one run of a file with several)", n, ErrTraceTooLarge, maxItems)
		}
		out = append(out, sp)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// run is one trace: its root and the children, sorted by start.
type run struct {
	root  Span
	spans []Span
	t0    time.Time
	t1    time.Time
}

// pickRun finds the run span with id (or the last one) and its trace.
func pickRun(spans []Span, id string) (*run, error) {
	var root *Span
	for i := range spans {
		s := &spans[i]
		if s.Name == SpanRun && s.ParentID == "" && (id == "" || s.TraceID == id) {
			root = s
		}
	}
	if root == nil {
		if id != "" {
			return nil, fmt.Errorf("%w: trace %s", ErrNoRun, id)
		}
		return nil, ErrNoRun
	}
	r := &run{root: *root, t0: root.Start, t1: root.End}
	for _, s := range spans {
		if s.TraceID != root.TraceID || s.SpanID == root.SpanID {
			continue
		}
		r.spans = append(r.spans, s)
		if s.End.After(r.t1) {
			r.t1 = s.End
		}
		if s.Start.Before(r.t0) {
			r.t0 = s.Start
		}
	}
	sort.SliceStable(r.spans, func(i, j int) bool { return r.spans[i].Start.Before(r.spans[j].Start) })
	if !r.t1.After(r.t0) {
		r.t1 = r.t0.Add(time.Second)
	}
	return r, nil
}

// Layout, in pixels.
const (
	tlLeft      = 128 // lane labels live left of this
	tlRight     = 24
	tlTitleH    = 64
	tlMarkH     = 34 // boundary labels above the decode lane
	tlDecodeH   = 36
	tlGap       = 16
	tlCompileH  = 24 // one row each: foreground, background
	tlKVH       = 120
	tlAxisH     = 48
	tlLegendH   = 50
	tlFont      = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""
	colPrefill  = "#8c8c8c"
	colMigrate  = "#3b3b3b"
	colWait     = "#e6550d"
	colFgFill   = "#1f5fbf"
	colBgFill   = "#b9d3f2"
	colReserved = "#c0392b"
	colLive     = "#2e8b57"
	colFail     = "#d00000"
)

// rungColours are reds from light to dark, one per rung (Sketch 2: red is
// useful inference, blue is compile).
var rungColours = []string{"#fcae91", "#fb6a4a", "#de2d26", "#a50f15", "#67000d", "#fcbba1", "#ef3b2c", "#cb181d"}

// WriteTimeline renders a run's trace as an SVG: decode by rung with the
// prefill, migrations and boundary waits in one lane; foreground and
// background compiles in another; boundary markers with their waits; and
// reserved against live KV over time, all on one axis of seconds since the
// run started. It checks ctx between spans and writes nothing once ctx is
// done.
func WriteTimeline(ctx context.Context, w io.Writer, spans []Span, opt TimelineOptions) error {
	r, err := pickRun(spans, opt.TraceID)
	if err != nil {
		return err
	}
	width := opt.Width
	if width <= 0 {
		width = 1200
	}
	d := &drawing{ctx: ctx, run: r, width: width, plotW: float64(width - tlLeft - tlRight)}
	d.rungs = rungIndex(r)
	b := d.draw()
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

type drawing struct {
	ctx context.Context
	*run
	g     *svg.Doc
	width int
	plotW float64
	rungs map[int64]int // capacity -> colour index
}

// done reports whether the drawing should stop (ctx is done).
func (d *drawing) done() bool { return d.ctx.Err() != nil }

func (d *drawing) x(t time.Time) float64 {
	return tlLeft + t.Sub(d.t0).Seconds()/d.t1.Sub(d.t0).Seconds()*d.plotW
}

func (d *drawing) draw() []byte {
	yMarks := float64(tlTitleH)
	yDecode := yMarks + tlMarkH
	yCompile := yDecode + tlDecodeH + tlGap
	yKV := yCompile + 2*tlCompileH + tlGap + 8
	yAxis := yKV + tlKVH
	height := int(yAxis) + tlAxisH + tlLegendH
	d.g = svg.New(float64(d.width), float64(height), tlFont+` font-size="12"`)
	d.g.Raw(`<defs><pattern id="wait" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">` +
		`<rect width="6" height="6" fill="#fdd0a2"/><line x1="0" y1="0" x2="0" y2="6" stroke="` + colWait + `" stroke-width="3"/></pattern></defs>` + "\n")
	d.g.Raw(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	d.title()
	d.grid(yDecode, yAxis)
	d.laneLabel(yDecode+tlDecodeH/2, "decode", "by rung")
	d.laneLabel(yCompile+tlCompileH/2, "compile", "foreground")
	d.laneLabel(yCompile+tlCompileH*1.5, "", "background")
	d.laneLabel(yKV+tlKVH/2, "KV", "reserved / live")
	d.decodeLane(yDecode)
	d.compileLane(yCompile)
	d.kvLane(yKV)
	d.boundaries(yMarks, yDecode, yAxis)
	d.axis(yAxis)
	d.legend(yAxis + tlAxisH)
	return d.g.Bytes()
}

func (d *drawing) title() {
	a := d.root.Attrs
	t := "ovrun run"
	for _, s := range []string{a.Str(AttrPolicy), a.Str(AttrModel), a.Str(AttrDevice)} {
		if s != "" {
			t += " · " + s
		}
	}
	d.g.Text(16, 26, "", 17, t, `font-weight="bold"`)
	var parts []string
	if v, ok := a.Float(AttrCriticalPathS); ok {
		parts = append(parts, "critical path "+secs(v))
	}
	if v, ok := a.Float(AttrForegroundS); ok {
		parts = append(parts, "foreground compile "+secs(v))
	}
	if v, ok := a.Float(AttrBoundaryWaitS); ok {
		parts = append(parts, "boundary wait "+secs(v))
	}
	if v, ok := a.Float(AttrOverlappedS); ok {
		parts = append(parts, "compile behind decode "+secs(v))
	}
	if v, ok := a.Int(AttrDecodedTokens); ok {
		parts = append(parts, fmt.Sprintf("%d tokens", v))
	}
	if s := a.Str(AttrFinishReason); s != "" {
		parts = append(parts, "finish "+s)
	}
	if d.root.Status == "error" {
		parts = append(parts, "error: "+clip(d.root.Message, 80))
	}
	d.g.Text(16, 48, "", 0, strings.Join(parts, "  ·  "), `fill="#444"`)
}

func (d *drawing) laneLabel(y float64, name, sub string) {
	if name != "" {
		d.g.Text(tlLeft-10, y-2, "end", 0, name, `font-weight="bold"`)
		d.g.Text(tlLeft-10, y+10, "end", 10, sub, `fill="#666"`)
		return
	}
	d.g.Text(tlLeft-10, y+4, "end", 10, sub, `fill="#666"`)
}

// bar is a rectangle with a hover title and, when it fits, a label.
func (d *drawing) bar(s Span, y, h float64, fill, style, label, textFill string) {
	x0, x1 := d.x(s.Start), d.x(s.End)
	w := math.Max(x1-x0, 1)
	d.g.RectTitled(x0, y, w, h, fill, strings.TrimSpace(style), hover(s))
	if label != "" && textWidth(label) < w-4 {
		d.g.Text(x0+w/2, y+h/2+4, "middle", 11, label, `fill="`+textFill+`"`)
	}
}

func (d *drawing) decodeLane(y float64) {
	for _, s := range d.spans {
		if d.done() {
			return
		}
		switch s.Name {
		case SpanPrefill:
			d.bar(s, y, tlDecodeH, colPrefill, "", "prefill", "white")
		case SpanDecode:
			c, _ := s.Attrs.Int(AttrCapacity)
			i := d.rungs[c]
			label := fmt.Sprint(c)
			if tps, ok := s.Attrs.Float(AttrTokensPerS); ok && tps > 0 && textWidth(label+" · 0000 tok/s") < d.x(s.End)-d.x(s.Start)-4 {
				label = fmt.Sprintf("%d · %.0f tok/s", c, tps)
			}
			d.bar(s, y, tlDecodeH, rungColours[i%len(rungColours)], "", label, textOn(i))
		case SpanMigrate:
			d.bar(s, y, tlDecodeH, colMigrate, "", "", "white")
		case SpanBoundaryWait:
			d.bar(s, y, tlDecodeH, "url(#wait)", ` stroke="`+colWait+`"`, "wait", "black")
		}
	}
}

func (d *drawing) compileLane(y float64) {
	for _, s := range d.spans {
		if d.done() {
			return
		}
		if s.Name != SpanCompile {
			continue
		}
		fg, _ := s.Attrs.Bool(AttrCompileForeground)
		row, fill, style, text := y+tlCompileH, colBgFill, ` stroke="`+colFgFill+`" stroke-dasharray="4 2"`, "#0b2e63"
		if fg {
			row, fill, style, text = y, colFgFill, "", "white"
		}
		if s.Status == "error" {
			style = ` stroke="` + colFail + `" stroke-width="2"`
		}
		c, _ := s.Attrs.Int(AttrCapacity)
		label := fmt.Sprint(c)
		if k := s.Attrs.Str(AttrCompileKind); k != "" && k != "decode" {
			label = k + " " + label
		}
		label += " · " + secs(s.Duration().Seconds())
		if s.Status == "error" {
			label = "✗ " + label
		}
		d.bar(s, row+2, tlCompileH-4, fill, style, label, text)
	}
}

// kvLane draws reserved and live KV bytes as step lines from the kv events.
func (d *drawing) kvLane(y float64) {
	var ts []time.Time
	var res, live []float64
	peak := 0.0
	for _, e := range d.root.Events {
		if e.Name != EventKV {
			continue
		}
		r, _ := e.Attrs.Float(AttrKVReservedBytes)
		l, _ := e.Attrs.Float(AttrKVLiveBytes)
		ts, res, live = append(ts, e.Time), append(res, r), append(live, l)
		peak = math.Max(peak, math.Max(r, l))
	}
	d.g.Line(tlLeft, y+tlKVH, tlLeft+d.plotW, y+tlKVH, "#999", 0, "")
	if len(ts) == 0 || peak == 0 {
		d.g.Text(tlLeft+8, y+tlKVH/2, "", 0, "no KV samples in this trace", `fill="#666"`)
		return
	}
	yOf := func(v float64) float64 { return y + tlKVH - v/peak*(tlKVH-8) }
	d.g.Text(tlLeft-4, yOf(peak)+4, "end", 10, bytesText(peak), `fill="#666"`)
	d.g.Line(tlLeft, yOf(peak), tlLeft+d.plotW, yOf(peak), "#ddd", 0, `stroke-dasharray="2 3"`)
	xs := make([]float64, len(ts))
	for i, t := range ts {
		xs[i] = d.x(t)
	}
	ys := func(vs []float64) []float64 {
		out := make([]float64, len(vs))
		for i, v := range vs {
			out[i] = yOf(v)
		}
		return out
	}
	d.g.Path(svg.StepPath(xs, ys(res), true, y+tlKVH), colReserved, `fill-opacity="0.12" stroke="none"`, "")
	d.g.Path(svg.StepPath(xs, ys(res), false, 0), "none", `stroke="`+colReserved+`" stroke-width="2"`, "reserved KV")
	d.g.Path(svg.StepPath(xs, ys(live), false, 0), "none", `stroke="`+colLive+`" stroke-width="1.5" stroke-dasharray="5 3"`, "live KV")
}

// boundaries marks each switch to a larger rung: a dashed line at the
// moment decode reached it, labelled with the rung and the wait.
func (d *drawing) boundaries(yLabel, yTop, yBottom float64) {
	waits := map[int64]Span{} // the last wait at each capacity
	for _, w := range d.spans {
		if c, _ := w.Attrs.Int(AttrCapacity); w.Name == SpanBoundaryWait {
			waits[c] = w
		}
	}
	n := 0
	for _, s := range d.spans {
		if d.done() {
			return
		}
		if s.Name != SpanMigrate {
			continue
		}
		from, _ := s.Attrs.Int(AttrFromCapacity)
		to, _ := s.Attrs.Int(AttrToCapacity)
		at, wait := s.Start, 0.0
		if w, ok := waits[to]; ok {
			at, wait = w.Start, w.Duration().Seconds()
		}
		x := d.x(at)
		d.g.Line(x, yTop-4, x, yBottom, "#333", 0, `stroke-dasharray="3 3"`)
		ly := yLabel + 12 + float64(n%2)*14 // alternate rows so neighbours don't collide
		fill := "#333"
		if wait > 0 {
			fill = colWait
		}
		d.g.Text(x, ly, "middle", 11, fmt.Sprintf("%d→%d · wait %s", from, to, secs(wait)), `fill="`+fill+`"`)
		n++
	}
}

func (d *drawing) grid(yTop, yBottom float64) {
	for _, t := range ticks(d.t1.Sub(d.t0).Seconds()) {
		x := tlLeft + t/d.t1.Sub(d.t0).Seconds()*d.plotW
		d.g.Line(x, yTop, x, yBottom, "#eee", 0, "")
	}
}

func (d *drawing) axis(y float64) {
	span := d.t1.Sub(d.t0).Seconds()
	d.g.Line(tlLeft, y, tlLeft+d.plotW, y, "#333", 0, "")
	for _, t := range ticks(span) {
		x := tlLeft + t/span*d.plotW
		d.g.Line(x, y, x, y+5, "#333", 0, "")
		d.g.Text(x, y+18, "middle", 11, trimFloat(t), "")
	}
	d.g.Text(tlLeft+d.plotW/2, y+34, "middle", 11, "seconds since the run started", `fill="#666"`)
}

func (d *drawing) legend(y float64) {
	x := float64(tlLeft)
	item := func(swatch, label string) {
		d.g.Raw(fmt.Sprintf(`<g transform="translate(%s %s)">%s<text x="20" y="11">%s</text></g>`+"\n", svg.Num(x), svg.Num(y), swatch, svg.Escape(label)))
		x += 36 + 1.1*textWidth(label) // legend text is 12 px
	}
	box := func(fill, style string) string {
		return fmt.Sprintf(`<rect width="14" height="14" fill="%s"%s/>`, fill, style)
	}
	caps := make([]int64, 0, len(d.rungs))
	for c := range d.rungs {
		caps = append(caps, c)
	}
	sort.Slice(caps, func(i, j int) bool { return caps[i] < caps[j] })
	for _, c := range caps {
		item(box(rungColours[d.rungs[c]%len(rungColours)], ""), fmt.Sprintf("decode @%d", c))
	}
	item(box(colPrefill, ""), "prefill")
	item(box(colMigrate, ""), "migrate KV")
	item(box("url(#wait)", ` stroke="`+colWait+`"`), "boundary wait")
	x = tlLeft
	y += 22
	item(box(colFgFill, ""), "foreground compile")
	item(box(colBgFill, ` stroke="`+colFgFill+`" stroke-dasharray="4 2"`), "background compile")
	item(box("white", ` stroke="`+colFail+`" stroke-width="2"`), "failed compile")
	item(`<line x1="0" y1="7" x2="14" y2="7" stroke="`+colReserved+`" stroke-width="2"/>`, "reserved KV")
	item(`<line x1="0" y1="7" x2="14" y2="7" stroke="`+colLive+`" stroke-width="1.5" stroke-dasharray="5 3"/>`, "live KV")
}

// rungIndex gives each capacity its colour: its place on the run's ladder,
// or among the capacities the trace decoded at.
func rungIndex(r *run) map[int64]int {
	var caps []int64
	if l, ok := r.root.Attrs[string(AttrLadder)].([]any); ok {
		for _, v := range l {
			if c, ok := v.(int64); ok {
				caps = append(caps, c)
			}
		}
	}
	for _, s := range r.spans {
		if c, ok := s.Attrs.Int(AttrCapacity); ok && s.Name == SpanDecode {
			caps = append(caps, c)
		}
	}
	sort.Slice(caps, func(i, j int) bool { return caps[i] < caps[j] })
	idx := map[int64]int{}
	for _, c := range caps {
		if _, ok := idx[c]; !ok {
			idx[c] = len(idx)
		}
	}
	// Keep only the capacities decoded at, so the legend matches the picture.
	used := map[int64]bool{}
	for _, s := range r.spans {
		if v, ok := s.Attrs.Int(AttrCapacity); ok && s.Name == SpanDecode {
			used[v] = true
		}
	}
	for c := range idx {
		if !used[c] {
			delete(idx, c)
		}
	}
	return idx
}

func textOn(i int) string {
	if i%len(rungColours) == 0 || i%len(rungColours) == 5 {
		return "black"
	}
	return "white"
}

// hover is a span's tooltip: name, times and attributes, sorted.
func hover(s Span) string {
	keys := make([]string, 0, len(s.Attrs))
	for k := range s.Attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	lines := []string{fmt.Sprintf("%s  %s", s.Name, secs(s.Duration().Seconds()))}
	for _, k := range keys {
		lines = append(lines, fmt.Sprintf("%s = %v", strings.TrimPrefix(k, "ovrun."), s.Attrs[k]))
	}
	if s.Status == "error" {
		lines = append(lines, "error: "+s.Message)
	}
	return strings.Join(lines, "\n")
}

// ticks are round values (1, 2 or 5 times a power of ten apart), about
// eight of them, from 0 to span.
func ticks(span float64) []float64 {
	raw := span / 8
	base := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * base
	for _, m := range []float64{1, 2, 5} {
		if base*m >= raw*(1-1e-9) {
			step = base * m
			break
		}
	}
	var out []float64
	for i := 0; float64(i)*step <= span*(1+1e-9); i++ {
		out = append(out, float64(i)*step)
	}
	return out
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// secs formats a duration in seconds for a label.
func secs(v float64) string {
	switch {
	case v == 0:
		return "0 s"
	case v < 0.1:
		return fmt.Sprintf("%.0f ms", v*1000)
	case v < 10:
		return fmt.Sprintf("%.2f s", v)
	}
	return fmt.Sprintf("%.1f s", v)
}

func bytesText(v float64) string {
	for _, u := range []string{"B", "KiB", "MiB", "GiB"} {
		if v < 1024 || u == "GiB" {
			return trimFloat(math.Round(v*10)/10) + " " + u
		}
		v /= 1024
	}
	return ""
}

// textWidth estimates a label's width at 11 px.
func textWidth(s string) float64 { return 6.4 * float64(len([]rune(s))) }

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
