package bench

import (
	"bytes"
	"encoding/xml"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden SVGs in testdata/golden")

func TestPlotsGolden(t *testing.T) {
	r := fixtureReport(t)
	tests := []struct {
		name string
		svg  []byte
	}{
		{PlotTimeline, TimelineSVG(r, 1)},
		{PlotKV, KVSVG(r, 1)},
		{PlotEndpoints, EndpointsSVG(r)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.svg) == 0 {
				t.Fatal("no SVG")
			}
			if err := xml.Unmarshal(tc.svg, new(struct{})); err != nil {
				t.Fatalf("not well-formed XML: %v", err)
			}
			golden := filepath.Join("testdata", "golden", tc.name)
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, tc.svg, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(tc.svg, want) {
				got := filepath.Join(t.TempDir(), tc.name)
				os.WriteFile(got, tc.svg, 0o644)
				t.Errorf("%s differs from %s (wrote %s; go test -update accepts it)", tc.name, golden, got)
			}
		})
	}
}

func TestPlotsOfAMissingPair(t *testing.T) {
	r := fixtureReport(t)
	if TimelineSVG(r, 99) != nil || KVSVG(r, 99) != nil {
		t.Error("plots drawn for a pair that does not exist")
	}
	if EndpointsSVG(&Report{Arms: r.Arms, Order: r.Order}) != nil {
		t.Error("strip plot drawn without runs")
	}
}
