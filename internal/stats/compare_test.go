package stats

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestWins(t *testing.T) {
	tests := []struct {
		name               string
		control, treatment []float64
		lowerIsBetter      bool
		want               int
	}{
		{name: "lower better", control: []float64{10, 10, 10}, treatment: []float64{9, 11, 10}, lowerIsBetter: true, want: 1},
		{name: "higher better", control: []float64{10, 10, 10}, treatment: []float64{9, 11, 10}, lowerIsBetter: false, want: 1},
		{name: "ties are not wins", control: []float64{1, 2}, treatment: []float64{1, 2}, lowerIsBetter: true, want: 0},
		{name: "all wins", control: []float64{5, 6, 7}, treatment: []float64{4, 5, 6}, lowerIsBetter: true, want: 3},
		{name: "mismatch counts common prefix", control: []float64{5, 6, 7}, treatment: []float64{4}, lowerIsBetter: true, want: 1},
		{name: "empty", want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Wins(tc.control, tc.treatment, tc.lowerIsBetter); got != tc.want {
				t.Errorf("Wins = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestCompareJSON(t *testing.T) {
	tests := []struct {
		name         string
		control, trt []float64
		wantKeys     []string
		absentKeys   []string
		wantWins     int
		wantP        float64
	}{
		{
			name:     "six pairs, all better",
			control:  []float64{84.1, 85.3, 83.9, 84.8, 84.5, 83.2},
			trt:      []float64{65.2, 66.0, 65.8, 64.9, 65.5, 64.7},
			wantKeys: []string{"endpoint", "n", "control_values", "treatment_values", "control_mean", "treatment_mean", "diff_mean", "pct_change", "ci95_low", "ci95_high", "p_signflip", "treatment_wins"},
			wantWins: 6, wantP: 0.03125,
		},
		{
			name:       "one pair omits the CI",
			control:    []float64{2},
			trt:        []float64{1},
			wantKeys:   []string{"endpoint", "n", "pct_change", "p_signflip", "treatment_wins"},
			absentKeys: []string{"ci95_low", "ci95_high"},
			wantWins:   1, wantP: 1,
		},
		{
			name:       "zero control mean omits pct change",
			control:    []float64{0, 0},
			trt:        []float64{1, 1},
			wantKeys:   []string{"ci95_low", "ci95_high"},
			absentKeys: []string{"pct_change"},
			wantWins:   0, wantP: 0.5,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Compare("compile_s", tc.control, tc.trt, true)
			if err != nil {
				t.Fatalf("Compare: %v", err)
			}
			if c.TreatmentWins != tc.wantWins || c.PSignFlip != tc.wantP || c.N != len(tc.control) {
				t.Errorf("wins=%d p=%v n=%d, want %d %v %d", c.TreatmentWins, c.PSignFlip, c.N, tc.wantWins, tc.wantP, len(tc.control))
			}
			b, err := json.Marshal(c)
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			if s := string(b); strings.Contains(s, "NaN") || strings.Contains(s, "Inf") {
				t.Errorf("JSON holds a non-finite value: %s", s)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			for _, k := range tc.wantKeys {
				if _, ok := m[k]; !ok {
					t.Errorf("key %q missing from %s", k, b)
				}
			}
			for _, k := range tc.absentKeys {
				if _, ok := m[k]; ok {
					t.Errorf("key %q present in %s", k, b)
				}
			}
		})
	}
}

func TestCompareValues(t *testing.T) {
	control := []float64{84.1, 85.3, 83.9, 84.8, 84.5, 83.2}
	trt := []float64{65.2, 66.0, 65.8, 64.9, 65.5, 64.7}
	c, err := Compare("foreground_compile_s", control, trt, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Endpoint != "foreground_compile_s" || math.Abs(c.DiffMean+18.95) > 1e-9 ||
		math.Abs(*c.CI95Low+19.606212030353603) > 1e-6 || math.Abs(*c.CI95High+18.293787969646395) > 1e-6 ||
		math.Abs(*c.PctChange+22.47924080664294) > 1e-9 {
		t.Errorf("unexpected comparison: %+v", c)
	}
	// Raw values are copies: changing the input later does not change the report.
	control[0] = 0
	if c.ControlValues[0] != 84.1 {
		t.Errorf("ControlValues aliases the input")
	}
}

func TestCompareErrors(t *testing.T) {
	if _, err := Compare("x", nil, nil, true); !errors.Is(err, ErrNoPairs) {
		t.Errorf("empty: err = %v", err)
	}
	if _, err := Compare("x", []float64{1}, []float64{1, 2}, true); !errors.Is(err, ErrLengthMismatch) {
		t.Errorf("mismatch: err = %v", err)
	}
	if _, err := Compare("x", []float64{math.NaN()}, []float64{1}, true); !errors.Is(err, ErrNonFinite) {
		t.Errorf("NaN: err = %v", err)
	}
}
