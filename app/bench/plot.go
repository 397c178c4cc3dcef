package bench

import "github.com/ovtoolkit/ovrun/internal/svg"

// newSVG starts a plot on a white background (internal/svg writes it).
func newSVG(w, h float64) *svg.Doc {
	g := svg.New(w, h, `font-family="sans-serif" font-size="11"`)
	g.Rect(0, 0, w, h, "#ffffff", "")
	return g
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
