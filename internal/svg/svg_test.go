package svg

import (
	"math"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestNiceTicks(t *testing.T) {
	tests := []struct {
		name     string
		lo, hi   float64
		wantLo   float64
		wantHi   float64
		wantStep float64
	}{
		{"seconds", 0, 1.69, 0, 1.8, 0.2},
		{"round range", 0, 100, 0, 100, 10},
		{"constant", 5, 5, 4.5, 5.5, 0.1},
		{"zero", 0, 0, 0, 1, 0.1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ticks, lo, hi := NiceTicks(tc.lo, tc.hi, 10)
			if !near(lo, tc.wantLo) || !near(hi, tc.wantHi) || !near(TickStep(ticks), tc.wantStep) {
				t.Errorf("NiceTicks(%g, %g) = %v (%g..%g)", tc.lo, tc.hi, ticks, lo, hi)
			}
		})
	}
}

func TestDoc(t *testing.T) {
	d := New(100, 50.25, `font-size="11"`)
	d.Rect(0, 0, 0, 10, "red", "") // no area: left out
	d.RectTitled(1, 2, 3.04, 4, "#fff", `stroke="#000"`, "a < b & \"c\"")
	d.Line(0, 0, 10, 10, "#333", 0, `stroke-dasharray="3 3"`)
	d.Text(5, 6, "", 0, "x", "")
	d.Text(5, 6, "end", 10, "y", `fill="#666"`)
	d.Path(StepPath([]float64{1, 2, 3}, []float64{9, 8, 7}, true, 10), "blue", "", "kv")
	got := string(d.Bytes())
	for _, want := range []string{
		`<svg xmlns="http://www.w3.org/2000/svg" width="100" height="50.2" viewBox="0 0 100 50.2" font-size="11">`,
		`<rect x="1" y="2" width="3" height="4" fill="#fff" stroke="#000"><title>a &lt; b &amp; &quot;c&quot;</title></rect>`,
		`<line x1="0" y1="0" x2="10" y2="10" stroke="#333" stroke-dasharray="3 3"/>`,
		`<text x="5" y="6">x</text>`,
		`<text x="5" y="6" text-anchor="end" font-size="10" fill="#666">y</text>`,
		`<path d="M1 9 H2 V8 H3 V7 V10 H1 Z" fill="blue"><title>kv</title></path>`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %s in\n%s", want, got)
		}
	}
	if strings.Contains(got, `fill="red"`) || !strings.HasSuffix(got, "</svg>\n") {
		t.Errorf("document:\n%s", got)
	}
	if Num(-0.04) != "0" || Num(2.25) != "2.2" || Linear(0, 10, 100, 200).At(5) != 150 {
		t.Errorf("Num(-0.04) = %s, Num(2.25) = %s", Num(-0.04), Num(2.25))
	}
}
