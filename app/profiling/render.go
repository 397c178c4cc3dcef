package profiling

import (
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"
)

// FormatValue prints a sample value in its unit: seconds for nanoseconds,
// a count with a k/M/G suffix otherwise.
func FormatValue(v int64, unit string) string {
	if unit == "nanoseconds" {
		return fmt.Sprintf("%.3fs", float64(v)/1e9)
	}
	f, sign := float64(v), ""
	if f < 0 {
		f, sign = -f, "-"
	}
	switch {
	case f >= 1e9:
		return fmt.Sprintf("%s%.2fG", sign, f/1e9)
	case f >= 1e6:
		return fmt.Sprintf("%s%.2fM", sign, f/1e6)
	case f >= 1e4:
		return fmt.Sprintf("%s%.1fk", sign, f/1e3)
	}
	return fmt.Sprintf("%s%d", sign, int64(f))
}

func signed(v int64, unit string) string {
	s := FormatValue(v, unit)
	if v > 0 {
		return "+" + s
	}
	return s
}

// MinNameWidth is the narrowest name column WriteTop and WriteDiff print.
const MinNameWidth = 8

// shorten keeps long C++ names readable in a table; widths below
// MinNameWidth count as MinNameWidth. The name is made printable first
// (Printable) and cut between characters, never inside one.
func shorten(name string, width int) string {
	width = max(width, MinNameWidth)
	r := []rune(Printable(name))
	if len(r) <= width {
		return string(r)
	}
	return string(r[:width-3]) + "..."
}

// Printable is s with every character that is not printable (control
// characters such as NUL, ESC and tab, invalid UTF-8) escaped as Go
// writes it in a quoted string (\x00, \x1b, \t, \u200b); printable text,
// backslashes included, is kept as it is. A profile's names come from the
// profiled program and its symbols: a name holding a terminal escape must
// not reach the terminal raw.
func Printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// saturatedLine is the note a report with saturated sums ends with.
func saturatedLine(w io.Writer, saturated bool) {
	if saturated {
		fmt.Fprintln(w, "note: "+SaturatedNote)
	}
}

// WriteTop prints a TopReport as an aligned table.
func WriteTop(w io.Writer, r *TopReport, nameWidth int) error {
	fmt.Fprintf(w, "%s total %s (%s)", Printable(r.SampleType), FormatValue(r.Total, r.Unit), r.By)
	if r.GraphNodes > 0 {
		fmt.Fprintf(w, ", graph of %d nodes", r.GraphNodes)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "flat\tflat%\tcum\tcum%\t"
	if r.HasCalls && r.By == ByFunction {
		head += "calls\t"
		if r.GraphNodes > 0 {
			head += "calls/node\t"
		}
	}
	if r.By == ByObject {
		fmt.Fprintln(tw, head+"object")
	} else {
		fmt.Fprintln(tw, head+"object\tname")
	}
	for _, row := range r.Rows {
		line := fmt.Sprintf("%s\t%.2f%%\t%s\t%.2f%%\t", FormatValue(row.Flat, r.Unit), row.FlatPct, FormatValue(row.Cum, r.Unit), row.CumPct)
		if r.HasCalls && r.By == ByFunction {
			line += callsCell(row) + "\t"
			if r.GraphNodes > 0 {
				line += perNodeCell(row) + "\t"
			}
		}
		if r.By == ByObject {
			fmt.Fprintln(tw, line+Printable(row.Object))
		} else {
			fmt.Fprintln(tw, line+Printable(filepath.Base(row.Object))+"\t"+shorten(row.Name, nameWidth))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	saturatedLine(w, r.Saturated)
	switch {
	case !r.HasCalls:
		fmt.Fprintln(w, "calls: not in this profile (sampled profiles have no call counts; use --backend callgrind)")
	case r.GraphNodes == 0:
		fmt.Fprintln(w, "repeated work: give --nodes N (the graph's node count) to flag functions called far more often than the graph has nodes")
	case len(r.Repeated) == 0:
		fmt.Fprintf(w, "repeated work: no function called >= %.0f times per graph node\n", r.RepeatRatio)
	default:
		fmt.Fprintf(w, "repeated work: called >= %.0f times per graph node (%d nodes):\n", r.RepeatRatio, r.GraphNodes)
		for _, row := range r.Repeated {
			fmt.Fprintf(w, "  %s calls (%s/node), self %s (%.2f%%)  %s\n",
				FormatValue(*row.Calls, "count"), perNodeCell(row), FormatValue(row.Flat, r.Unit), row.FlatPct, shorten(row.Name, nameWidth))
		}
	}
	return nil
}

func callsCell(row TopRow) string {
	if row.Calls == nil {
		return "-"
	}
	return FormatValue(*row.Calls, "count")
}

func perNodeCell(row TopRow) string {
	if row.CallsPerNode == nil {
		return "-"
	}
	s := fmt.Sprintf("%.1f", *row.CallsPerNode)
	if row.Repeated {
		s += " !"
	}
	return s
}

// WriteDiff prints a DiffReport as an aligned table.
func WriteDiff(w io.Writer, r *DiffReport, nameWidth int) error {
	pct := ""
	if r.TotalA != 0 {
		pct = fmt.Sprintf(" (%+.2f%%)", 100*(float64(r.TotalB)-float64(r.TotalA))/float64(r.TotalA))
	}
	fmt.Fprintf(w, "%s total A %s, B %s, delta %s%s (%s)\n", Printable(r.SampleType),
		FormatValue(r.TotalA, r.Unit), FormatValue(r.TotalB, r.Unit), signed(r.TotalDelta(), r.Unit), pct, r.By)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "flat A\tflat B\tdelta\tof A\tcum A\tcum B\tdelta\tobject\tname")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%+.2f%%\t%s\t%s\t%s\t%s\t%s\n",
			FormatValue(row.FlatA, r.Unit), FormatValue(row.FlatB, r.Unit), signed(row.FlatDelta, r.Unit), row.FlatDeltaPctOfA,
			FormatValue(row.CumA, r.Unit), FormatValue(row.CumB, r.Unit), signed(row.CumDelta, r.Unit),
			Printable(filepath.Base(row.Object)), shorten(row.Name, nameWidth))
	}
	if len(r.Rows) == 0 {
		fmt.Fprintln(tw, strings.Repeat("-\t", 8)+"no differences")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	saturatedLine(w, r.Saturated)
	return nil
}
