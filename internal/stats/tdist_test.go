package stats

import (
	"math"
	"testing"
)

func TestTQuantileKnownValues(t *testing.T) {
	// Reference values: scipy.stats.t.ppf, and the closed forms for df=1
	// (Cauchy: tan(π(p-½))) and df=2 ((2p-1)/√(2p(1-p))).
	closed2 := func(p float64) float64 { return (2*p - 1) / math.Sqrt(2*p*(1-p)) }
	tests := []struct {
		name  string
		p, df float64
		want  float64
	}{
		{name: "df1 0.975", p: 0.975, df: 1, want: 12.706204736174698},
		{name: "df5 0.975", p: 0.975, df: 5, want: 2.5705818366147395},
		{name: "df30 0.975", p: 0.975, df: 30, want: 2.0422724563012373},
		{name: "df2 0.975 closed form", p: 0.975, df: 2, want: closed2(0.975)},
		{name: "df2 0.999 closed form", p: 0.999, df: 2, want: closed2(0.999)},
		{name: "df1 0.9995 closed form", p: 0.9995, df: 1, want: math.Tan(math.Pi * (0.9995 - 0.5))},
		{name: "df10 0.995", p: 0.995, df: 10, want: 3.169272672616956},
		{name: "df100 0.975", p: 0.975, df: 100, want: 1.983971518523552},
		{name: "lower tail is symmetric", p: 0.025, df: 5, want: -2.5705818366147395},
		{name: "median", p: 0.5, df: 3, want: 0},
		{name: "huge df approaches normal", p: 0.975, df: 1e7, want: 1.959964},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := TQuantile(tc.p, tc.df)
			if math.Abs(got-tc.want) > 1e-6 {
				t.Errorf("TQuantile(%v, %v) = %.10f, want %.10f", tc.p, tc.df, got, tc.want)
			}
			if tc.p != 0.5 {
				if back := TCDF(got, tc.df); math.Abs(back-tc.p) > 1e-9 {
					t.Errorf("TCDF(TQuantile) = %.12f, want %v", back, tc.p)
				}
			}
		})
	}
}

func TestTCDFClosedForms(t *testing.T) {
	for _, x := range []float64{-30, -3, -0.7, 0, 0.2, 1, 4.5, 100} {
		if got, want := TCDF(x, 1), 0.5+math.Atan(x)/math.Pi; math.Abs(got-want) > 1e-12 {
			t.Errorf("TCDF(%v, 1) = %v, want %v", x, got, want)
		}
		if got, want := TCDF(x, 2), 0.5+x/(2*math.Sqrt(2+x*x)); math.Abs(got-want) > 1e-12 {
			t.Errorf("TCDF(%v, 2) = %v, want %v", x, got, want)
		}
	}
}

func TestTInvalid(t *testing.T) {
	tests := []struct {
		name  string
		p, df float64
	}{
		{name: "p zero", p: 0, df: 3},
		{name: "p one", p: 1, df: 3},
		{name: "p NaN", p: math.NaN(), df: 3},
		{name: "df zero", p: 0.9, df: 0},
		{name: "df negative", p: 0.9, df: -2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := TQuantile(tc.p, tc.df); !math.IsNaN(got) {
				t.Errorf("TQuantile(%v, %v) = %v, want NaN", tc.p, tc.df, got)
			}
		})
	}
	if got := TCDF(1, 0); !math.IsNaN(got) {
		t.Errorf("TCDF(1, 0) = %v, want NaN", got)
	}
}
