package profiling

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// describe prints a profile canonically: types, comments, mappings, and one
// line per sample (values, labels, stack leaf first as function@object).
func describe(p *profile.Profile) string {
	var b strings.Builder
	for _, st := range p.SampleType {
		fmt.Fprintf(&b, "sample type %s/%s\n", st.Type, st.Unit)
	}
	fmt.Fprintf(&b, "default %s, period %d", p.DefaultSampleType, p.Period)
	if p.PeriodType != nil {
		fmt.Fprintf(&b, " %s/%s", p.PeriodType.Type, p.PeriodType.Unit)
	}
	b.WriteString("\n")
	for _, c := range p.Comments {
		fmt.Fprintf(&b, "comment %s\n", c)
	}
	for _, m := range p.Mapping {
		fmt.Fprintf(&b, "mapping %d %s [%#x,%#x) functions=%v\n", m.ID, m.File, m.Start, m.Limit, m.HasFunctions)
	}
	var lines []string
	for _, s := range p.Sample {
		var frames []string
		for _, l := range s.Location {
			for _, ln := range l.Line {
				frames = append(frames, fmt.Sprintf("%s@%s", ln.Function.Name, filepath.Base(l.Mapping.File)))
			}
		}
		var labels []string
		for k, v := range s.Label {
			labels = append(labels, k+"="+strings.Join(v, ","))
		}
		slices.Sort(labels)
		lines = append(lines, fmt.Sprintf("%v %s | %s", s.Value, strings.Join(labels, " "), strings.Join(frames, " <- ")))
	}
	slices.Sort(lines)
	b.WriteString(strings.Join(lines, "\n"))
	b.WriteString("\n")
	return b.String()
}

func open(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
