package stats

import (
	"errors"
	"math"
	"testing"
)

func TestPairedTKnownValues(t *testing.T) {
	// Expected values computed independently with numpy (mean, std ddof=1)
	// and scipy's t.ppf(0.975, 5) = 2.5705818366147395.
	tests := []struct {
		name               string
		control, treatment []float64
		want               Summary
	}{
		{
			name:      "six pairs, seed-like compile times",
			control:   []float64{84.1, 85.3, 83.9, 84.8, 84.5, 83.2},
			treatment: []float64{65.2, 66.0, 65.8, 64.9, 65.5, 64.7},
			want: Summary{
				N: 6, ControlMean: 84.3, TreatmentMean: 65.35, DiffMean: -18.95,
				PctChange: -22.47924080664294, PctDefined: true,
				DiffSD: 0.6252999280345343, TCrit: 2.5705818366147395,
				CI95Low: -19.606212030353603, CI95High: -18.293787969646395, CIDefined: true,
			},
		},
		{
			name:      "two pairs use df 1",
			control:   []float64{10, 20},
			treatment: []float64{11, 23},
			// diffs 1, 3: mean 2, sd √2, half width 12.7062·√2/√2.
			want: Summary{
				N: 2, ControlMean: 15, TreatmentMean: 17, DiffMean: 2,
				PctChange: 2.0 / 15 * 100, PctDefined: true,
				DiffSD: math.Sqrt2, TCrit: 12.706204736174698,
				CI95Low: 2 - 12.706204736174698, CI95High: 2 + 12.706204736174698, CIDefined: true,
			},
		},
		{
			name:      "zero variance collapses the CI to the mean",
			control:   []float64{1, 2, 3, 4},
			treatment: []float64{1.5, 2.5, 3.5, 4.5},
			want: Summary{
				N: 4, ControlMean: 2.5, TreatmentMean: 3, DiffMean: 0.5,
				PctChange: 20, PctDefined: true,
				DiffSD: 0, TCrit: 3.182446305284263,
				CI95Low: 0.5, CI95High: 0.5, CIDefined: true,
			},
		},
		{
			name:      "one pair has no CI",
			control:   []float64{4},
			treatment: []float64{3},
			want: Summary{
				N: 1, ControlMean: 4, TreatmentMean: 3, DiffMean: -1,
				PctChange: -25, PctDefined: true,
			},
		},
		{
			name:      "zero control mean leaves pct undefined",
			control:   []float64{-1, 1, 0},
			treatment: []float64{0, 2, 1},
			want: Summary{
				N: 3, ControlMean: 0, TreatmentMean: 1, DiffMean: 1,
				DiffSD: 0, TCrit: 4.302652729749464,
				CI95Low: 1, CI95High: 1, CIDefined: true,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PairedT(tc.control, tc.treatment)
			if err != nil {
				t.Fatalf("PairedT: %v", err)
			}
			const tol = 1e-6
			if got.N != tc.want.N || got.CIDefined != tc.want.CIDefined || got.PctDefined != tc.want.PctDefined {
				t.Fatalf("got N=%d CIDefined=%v PctDefined=%v, want %d %v %v",
					got.N, got.CIDefined, got.PctDefined, tc.want.N, tc.want.CIDefined, tc.want.PctDefined)
			}
			fields := []struct {
				name      string
				got, want float64
			}{
				{"ControlMean", got.ControlMean, tc.want.ControlMean},
				{"TreatmentMean", got.TreatmentMean, tc.want.TreatmentMean},
				{"DiffMean", got.DiffMean, tc.want.DiffMean},
				{"PctChange", got.PctChange, tc.want.PctChange},
				{"DiffSD", got.DiffSD, tc.want.DiffSD},
				{"TCrit", got.TCrit, tc.want.TCrit},
				{"CI95Low", got.CI95Low, tc.want.CI95Low},
				{"CI95High", got.CI95High, tc.want.CI95High},
			}
			for _, f := range fields {
				if math.Abs(f.got-f.want) > tol {
					t.Errorf("%s = %.12g, want %.12g", f.name, f.got, f.want)
				}
			}
		})
	}
}

func TestPairedTErrors(t *testing.T) {
	tests := []struct {
		name               string
		control, treatment []float64
		want               error
	}{
		{name: "empty", want: ErrNoPairs},
		{name: "length mismatch", control: []float64{1, 2}, treatment: []float64{1}, want: ErrLengthMismatch},
		{name: "NaN control", control: []float64{1, math.NaN()}, treatment: []float64{1, 2}, want: ErrNonFinite},
		{name: "Inf treatment", control: []float64{1, 2}, treatment: []float64{math.Inf(1), 2}, want: ErrNonFinite},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := PairedT(tc.control, tc.treatment)
			if !errors.Is(err, tc.want) {
				t.Errorf("PairedT error = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestMeanStdDev(t *testing.T) {
	tests := []struct {
		name     string
		xs       []float64
		mean, sd float64
	}{
		{name: "empty", xs: nil, mean: 0, sd: 0},
		{name: "one", xs: []float64{7}, mean: 7, sd: 0},
		{name: "classic", xs: []float64{2, 4, 4, 4, 5, 5, 7, 9}, mean: 5, sd: math.Sqrt(32.0 / 7)},
		{name: "large offset", xs: []float64{1e9 + 1, 1e9 + 2, 1e9 + 3}, mean: 1e9 + 2, sd: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Mean(tc.xs); math.Abs(got-tc.mean) > 1e-9 {
				t.Errorf("Mean = %v, want %v", got, tc.mean)
			}
			if got := StdDev(tc.xs); math.Abs(got-tc.sd) > 1e-9 {
				t.Errorf("StdDev = %v, want %v", got, tc.sd)
			}
		})
	}
}
