package bench

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

const fixtureDir = "testdata/fixture"

// fixtureReport builds the report of the hand-made campaign in
// testdata/fixture: grow-eager (control) vs grow-one-ahead, 4 pairs.
func fixtureReport(t *testing.T) *Report {
	t.Helper()
	cfg, err := loadConfig(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	var recs []RunRecord
	for _, sl := range Plan(cfg) {
		rec := RunRecord{Pair: sl.Pair, Position: sl.Position, Arm: sl.Arm, Warmup: sl.Warmup,
			SummaryFile: filepath.Join("runs", sl.ID()+".json")}
		s, why, _ := loadRun(filepath.Join(fixtureDir, rec.SummaryFile), cfg, sl.Arm)
		if why != "" {
			t.Fatalf("%s: %s", rec.SummaryFile, why)
		}
		rec.Summary = s
		recs = append(recs, rec)
	}
	return BuildReport(cfg, recs, Meta{
		Machine:   Machine{CPUModel: "Test CPU", Cores: 2, MemoryBytes: 8 << 30, Kernel: "6.0", OS: "linux", Arch: "amd64", LoadAvgStart: 0.5, LoadAvgEnd: 0.6},
		GoVersion: "go1.26.8", Command: "ovrun bench --model /models/tiny --pairs 4 --allow-small --out x",
	})
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(1, math.Abs(b)) }

func TestReportStatisticsFromFixtures(t *testing.T) {
	r := fixtureReport(t)
	if r.Partial || r.Status != "complete: 10 runs" {
		t.Errorf("partial %v status %q", r.Partial, r.Status)
	}
	if len(r.Comparisons) != len(Endpoints) {
		t.Fatalf("%d comparisons, want %d", len(r.Comparisons), len(Endpoints))
	}
	// Values worked by hand from the fixture files. t(0.975, 3) = 3.1824463.
	const tcrit3 = 3.18244630528371
	half := tcrit3 * math.Sqrt(0.01/3) / 2 // sd of diffs {-1.5,-1.4,-1.5,-1.4}
	tests := []struct {
		endpoint         string
		ctlMean, trtMean float64
		diff             float64
		pct              *float64
		ciLow, ciHigh    float64
		p                float64
		wins             int
	}{
		{"foreground_compile_s", 2.5, 1.05, -1.45, ptrTo(-58), -1.45 - half, -1.45 + half, 0.125, 4},
		{"critical_path_s", 3.55, 2.2, -1.35, ptrTo(-1.35 / 3.55 * 100), -1.35 - half, -1.35 + half, 0.125, 4},
		// Control waits are all zero: no percent change; diffs {0.1,0,0,0} never win, p = 1.
		{"boundary_wait_s", 0, 0.025, 0.025, nil, 0.025 - tcrit3*0.05/2, 0.025 + tcrit3*0.05/2, 1, 0},
		// Identical peaks: zero effect, no wins, p = 1.
		{"kv_reserved_peak_bytes", 98304, 98304, 0, ptrTo(0), 0, 0, 1, 0},
		// Treatment always 4 MiB higher: the interval collapses onto the effect.
		{"peak_rss_bytes", 100.75 * (1 << 20), 104.75 * (1 << 20), 4 << 20, ptrTo(4 / 100.75 * 100), 4 << 20, 4 << 20, 0.125, 0},
	}
	for _, tc := range tests {
		t.Run(tc.endpoint, func(t *testing.T) {
			c := r.comparison("grow-one-ahead", tc.endpoint)
			if c == nil {
				t.Fatal("missing")
			}
			if c.N != 4 || c.Treatment != "grow-one-ahead" || c.Control != "grow-eager" || len(c.Pairs) != 4 {
				t.Errorf("n %d treatment %s control %s pairs %v", c.N, c.Treatment, c.Control, c.Pairs)
			}
			if !near(c.ControlMean, tc.ctlMean) || !near(c.TreatmentMean, tc.trtMean) || !near(c.DiffMean, tc.diff) {
				t.Errorf("means %g %g diff %g, want %g %g %g", c.ControlMean, c.TreatmentMean, c.DiffMean, tc.ctlMean, tc.trtMean, tc.diff)
			}
			switch {
			case (c.PctChange == nil) != (tc.pct == nil):
				t.Errorf("pct %v, want %v", c.PctChange, tc.pct)
			case tc.pct != nil && !near(*c.PctChange, *tc.pct):
				t.Errorf("pct %g, want %g", *c.PctChange, *tc.pct)
			}
			if c.CI95Low == nil || !near(*c.CI95Low, tc.ciLow) || !near(*c.CI95High, tc.ciHigh) {
				t.Errorf("CI %v..%v, want %g..%g", deref(c.CI95Low), deref(c.CI95High), tc.ciLow, tc.ciHigh)
			}
			if !near(c.PSignFlip, tc.p) || c.TreatmentWins != tc.wins {
				t.Errorf("p %g wins %d, want %g %d", c.PSignFlip, c.TreatmentWins, tc.p, tc.wins)
			}
		})
	}
	// Raw values are paired by block, whatever the order within it.
	c := r.comparison("grow-one-ahead", "foreground_compile_s")
	if want := []float64{2.5, 2.6, 2.4, 2.5}; !equalFloats(c.ControlValues, want) {
		t.Errorf("control values %v, want %v", c.ControlValues, want)
	}
	if want := []float64{1.0, 1.2, 0.9, 1.1}; !equalFloats(c.TreatmentValues, want) {
		t.Errorf("treatment values %v, want %v (warm-ups must be excluded)", c.TreatmentValues, want)
	}
}

func TestReportBoundaryEvidence(t *testing.T) {
	r := fixtureReport(t)
	if len(r.BoundaryEvidence) != 2 {
		t.Fatalf("%d boundary evidence rows", len(r.BoundaryEvidence))
	}
	eager, ahead := r.BoundaryEvidence[0], r.BoundaryEvidence[1]
	if eager.Arm != "grow-eager" || eager.Runs != 4 || eager.Boundaries != 8 || eager.Successors != 0 || eager.Verified != 8 || eager.Top1Matches != 8 {
		t.Errorf("eager evidence %+v", eager)
	}
	if ahead.Successors != 8 || ahead.SuccessorsReady != 7 || !near(ahead.BoundaryWaitS, 0.1) || ahead.Top1Matches != 8 {
		t.Errorf("one-ahead evidence %+v, want 7/8 successors ready (pair 1 waited 0.1 s)", ahead)
	}
	if ahead.MinCosine == nil || *ahead.MinCosine != 0.99999 {
		t.Errorf("one-ahead min cosine %v, want 0.99999", deref(ahead.MinCosine))
	}
}

func TestReportJSONFields(t *testing.T) {
	b, err := json.Marshal(fixtureReport(t))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"arms", "order", "runs", "comparisons", "boundary_evidence", "machine", "openvino_version", "go_version", "command", "partial"} {
		if _, ok := m[k]; !ok {
			t.Errorf("report.json lacks %q", k)
		}
	}
	run := m["runs"].([]any)[0].(map[string]any)
	for _, k := range []string{"pair", "position", "arm", "warmup", "summary_file", "summary"} {
		if _, ok := run[k]; !ok {
			t.Errorf("runs[0] lacks %q", k)
		}
	}
	if run["warmup"] != true {
		t.Errorf("runs[0] is not labelled a warm-up: %v", run["warmup"])
	}
	cmp := m["comparisons"].([]any)[0].(map[string]any)
	for _, k := range []string{"treatment", "endpoint", "n", "control_values", "treatment_values", "control_mean", "treatment_mean",
		"diff_mean", "pct_change", "ci95_low", "ci95_high", "p_signflip", "treatment_wins"} {
		if _, ok := cmp[k]; !ok {
			t.Errorf("comparisons[0] lacks %q", k)
		}
	}
	if m["openvino_version"] != "2026.3.0-fixture" {
		t.Errorf("openvino_version %v", m["openvino_version"])
	}
}

func TestMarkdownIsHonestAboutN(t *testing.T) {
	r := fixtureReport(t)
	var b strings.Builder
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"| endpoint | grow-eager mean | grow-one-ahead mean | paired effect | 95% CI | p (sign-flip) | wins |",
		"| Foreground compile wall `foreground_compile_s` | 2.500 s | 1.050 s | -1.450 s · -58.00% | [-1.542, -1.358] s | 0.125 | 4/4 |",
		"With N = 4 pairs the smallest possible two-sided sign-flip p is 2/2^4 = 0.125, so no endpoint can reach p < 0.05",
		"| grow-one-ahead | 4 | 8 | 7/8 |",
		"Top-1 matched the never-switched control in 16/16 boundary comparisons",
		"Test CPU, 2 logical CPUs, 8.00 GiB memory",
		"OpenVINO: 2026.3.0-fixture",
		"ovrun bench --model /models/tiny --pairs 4 --allow-small --out x",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if strings.Contains(md, "Partial report") {
		t.Error("a complete report says it is partial")
	}

	// With six pairs p < 0.05 is attainable and the report says so instead.
	r.Comparisons[0].N = 6
	b.Reset()
	r.WriteMarkdown(&b)
	if s := b.String(); strings.Contains(s, "can reach p < 0.05 here") || !strings.Contains(s, "2/2^6 = 0.03125: p < 0.05 needs") {
		t.Errorf("six-pair wording wrong:\n%s", s)
	}
}

func ptrTo(x float64) *float64 { return &x }

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !near(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestFormatterUnits(t *testing.T) {
	tests := []struct {
		name  string
		bytes bool
		v     float64
		want  string
	}{
		{"seconds", false, 3.184, "3.184 s"},
		{"tens of seconds", false, 17.123, "17.12 s"},
		{"milliseconds", false, 0.0214, "21.4 ms"},
		{"microseconds", false, 1.232e-5, "12.3 µs"},
		{"zero", false, 0, "0.000 s"},
		{"MiB", true, 5.77 * (1 << 20), "5.77 MiB"},
		{"GiB", true, 1.04 * (1 << 30), "1.04 GiB"},
		{"bytes", true, 512, "512 B"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := newFormatter(Endpoint{Bytes: tc.bytes}, tc.v).val(tc.v); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
