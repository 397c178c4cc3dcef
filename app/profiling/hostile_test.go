package profiling

import (
	"bytes"
	"compress/gzip"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadFileNamesATruncatedGzip: a profile cut short inside its gzip
// stream is an error that names the file, not a bare "unexpected EOF".
func TestReadFileNamesATruncatedGzip(t *testing.T) {
	p := handBuilt(t, "cpu-clock", "nanoseconds", map[string][2]int64{"f<-main": {10, 0}}, "")
	var raw bytes.Buffer
	if err := p.WriteUncompressed(&raw); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw.Bytes())
	zw.Close()
	path := filepath.Join(t.TempDir(), "cut.pb.gz")
	if err := os.WriteFile(path, gz.Bytes()[:gz.Len()/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFile(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("err = %v, want one naming %s and saying it is truncated", err, path)
	}
}

// TestSumsSaturate: values whose sums pass the int64 limit are held at it
// and the reports say so, instead of wrapping to negative totals.
func TestSumsSaturate(t *testing.T) {
	big := int64(math.MaxInt64 / 2)
	a := handBuilt(t, "instructions", "count", map[string][2]int64{
		"f<-main": {big, 0}, "g<-main": {big, 0}, "h<-main": {big, 0},
	}, "")
	rep, err := Top(a, TopOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Saturated || rep.Total != math.MaxInt64 {
		t.Fatalf("total %d saturated %v, want the int64 limit and saturated", rep.Total, rep.Saturated)
	}
	for _, r := range rep.Rows {
		if r.Flat < 0 || r.Cum < 0 || r.FlatPct < 0 || r.CumPct < 0 {
			t.Errorf("row %+v went negative", r)
		}
	}
	var out bytes.Buffer
	if err := WriteTop(&out, rep, 40); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "passed the int64 limit") {
		t.Errorf("the table does not say the sums saturated:\n%s", out.String())
	}

	neg := handBuilt(t, "instructions", "count", map[string][2]int64{"f<-main": {math.MinInt64 + 1, 0}}, "")
	d, err := Diff(neg, a, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Saturated || d.TotalDelta() != math.MaxInt64 {
		t.Fatalf("diff saturated %v, delta %d; want saturated at the limit", d.Saturated, d.TotalDelta())
	}
	for _, r := range d.Rows {
		if r.FlatA < 0 && r.FlatB > 0 && r.FlatDelta < 0 {
			t.Errorf("row %+v: a rise reported as a fall", r)
		}
	}
	out.Reset()
	if err := WriteDiff(&out, d, 40); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "passed the int64 limit") || strings.Contains(strings.SplitN(out.String(), "\n", 2)[0], "delta -") {
		t.Errorf("diff table:\n%s", out.String())
	}
}

func TestPrintable(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"ov::Node::get_output()", "ov::Node::get_output()"},
		{`a\b`, `a\b`},
		{"ünïcødé · 名前", "ünïcødé · 名前"},
		{"nul\x00here", `nul\x00here`},
		{"red\x1b[31mtext", `red\x1b[31mtext`},
		{"tab\there", `tab\there`},
		{"bad\xffutf8", `bad\xffutf8`},
		{"zero\u200bwidth", `zero\u200bwidth`},
	} {
		if got := Printable(tc.in); got != tc.want {
			t.Errorf("Printable(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestTablesEscapeNames: control characters in function and object names
// never reach the writer raw.
func TestTablesEscapeNames(t *testing.T) {
	evil := "evil\x1b]0;owned\x07\x00name"
	a := handBuilt(t, "cpu-clock", "nanoseconds", map[string][2]int64{evil + "@/lib/lib\x1bx.so<-main": {10, 0}, "main": {5, 0}}, "")
	b := handBuilt(t, "cpu-clock", "nanoseconds", map[string][2]int64{evil + "@/lib/lib\x1bx.so<-main": {20, 0}}, "")
	rep, err := Top(a, TopOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteTop(&out, rep, 200); err != nil {
		t.Fatal(err)
	}
	for _, by := range []string{ByFunction, ByObject} {
		rep, err := Top(a, TopOptions{By: by})
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteTop(&out, rep, 200); err != nil {
			t.Fatal(err)
		}
		d, err := Diff(a, b, DiffOptions{By: by})
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteDiff(&out, d, 200); err != nil {
			t.Fatal(err)
		}
	}
	s := out.String()
	for _, c := range []string{"\x1b", "\x00", "\x07"} {
		if strings.Contains(s, c) {
			t.Fatalf("output holds %q raw:\n%q", c, s)
		}
	}
	if !strings.Contains(s, `evil\x1b]0;owned\a\x00name`) || !strings.Contains(s, `lib\x1bx.so`) {
		t.Errorf("names not shown escaped:\n%s", s)
	}
}
