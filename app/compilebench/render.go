package compilebench

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/ovtoolkit/ovrun/compilecost"
)

// formatValue prints an endpoint value: seconds with milliseconds, bytes in MiB.
func formatValue(endpoint string, v float64) string {
	if endpointUnit(endpoint) == "bytes" {
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	}
	return fmt.Sprintf("%.3f s", v)
}

func formatDelta(endpoint string, v float64) string {
	s := formatValue(endpoint, v)
	if v > 0 {
		return "+" + s
	}
	return s
}

// WriteReport prints the experiment in the seed's style: per endpoint the
// arm means, the paired effect with its % change, the paired-t 95% CI, the
// exact sign-flip p and the treatment's wins, then the equivalence evidence.
func WriteReport(w io.Writer, r *Report) error {
	fmt.Fprintf(w, "%d pairs, order %s, finish %s\n", r.Pairs, orderSummary(r.Order), r.FinishReason)
	for i, v := range r.Variants {
		role := "treatment"
		if i == 0 {
			role = "control"
		}
		line := fmt.Sprintf("  %s (%s): %s", v.Name, role, cmp.Or(v.Spec, "defaults"))
		if v.PrecisionEffective != "" {
			line += ", runs " + v.PrecisionEffective
		}
		if v.OpenVINOVersion != "" {
			line += ", OpenVINO " + v.OpenVINOVersion
		}
		fmt.Fprintln(w, line)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, c := range r.Comparisons {
		if i == 0 || c.Treatment != r.Comparisons[i-1].Treatment {
			fmt.Fprintf(tw, "Endpoint\t%s\t%s\tPaired effect\t95%% CI\tp (sign-flip)\twins\n", c.Control, c.Treatment)
		}
		effect := formatDelta(c.Endpoint, c.DiffMean)
		if c.PctChange != nil {
			effect += fmt.Sprintf(" · %+.2f%%", *c.PctChange)
		}
		ci := "-"
		if c.CI95Low != nil {
			ci = fmt.Sprintf("[%s, %s]", formatDelta(c.Endpoint, *c.CI95Low), formatDelta(c.Endpoint, *c.CI95High))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.4g\t%d/%d\n", c.Endpoint,
			formatValue(c.Endpoint, c.ControlMean), formatValue(c.Endpoint, c.TreatmentMean),
			effect, ci, c.PSignFlip, c.TreatmentWins, c.N)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Comparisons) > 0 {
		n := r.Comparisons[0].N
		fmt.Fprintf(w, "wins: pairs in which the treatment was lower; the smallest possible two-sided sign-flip p with %d pairs is %.4g\n",
			n, 2/float64(uint64(1)<<min(n, 62)))
	}
	if e := r.Equivalent; e != nil {
		if c := e.Compiled; c != nil {
			verdict := "identical compiled models"
			if !c.Equal {
				verdict = "compiled models DIFFER"
			}
			fmt.Fprintf(w, "equivalence: %s (%s)\n", verdict, c.Detail)
		}
		verdict := "equal logits"
		if !e.Equal {
			verdict = "logits DIFFER"
		}
		fmt.Fprintf(w, "equivalence: %s (%s)\n", verdict, e.Detail)
	}
	for _, m := range r.Memo {
		fmt.Fprintf(w, "memo: %s (%s): %s calls per compile, hit rate %.2f%% over %d trials%s\n", m.Variant, m.Patch,
			compactCount(m.CallsPerCompile), 100*m.HitRate, m.Trials, memoExtras(m.Counters))
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	if r.Error != "" {
		fmt.Fprintln(w, "stopped:", r.Error)
	}
	return nil
}

// memoExtras lists a memo's counters other than calls and hits.
func memoExtras(c map[string]uint64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		if k != "calls" && k != "hits" {
			parts = append(parts, fmt.Sprintf("%s %d", k, c[k]))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (in all: " + strings.Join(parts, ", ") + ")"
}

// compactCount prints 1234567 as 1.23M.
func compactCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func orderSummary(order [][]string) string {
	if len(order) == 0 {
		return "-"
	}
	var parts []string
	for i, o := range order {
		if i == 4 {
			parts = append(parts, "...")
			break
		}
		parts = append(parts, strings.Join(o, "→"))
	}
	return strings.Join(parts, ", ")
}

// WriteProfile prints a compile-cost profile: per capacity the median
// compile wall and CPU time, IR build time and peak RSS, then the fit.
func WriteProfile(w io.Writer, p *compilecost.Profile) error {
	fmt.Fprintf(w, "%s on %s, OpenVINO %s", p.Model, p.Device, p.OpenVINOVersion)
	if p.Precision != "" {
		fmt.Fprintf(w, ", precision %s", p.Precision)
	}
	if p.Attention != "" {
		fmt.Fprintf(w, ", attention %s, kv %s", p.Attention, p.KVPrecision)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "capacity\treps\tcompile s (median)\tmin\tmax\tcompile CPU s\tIR build s\tpeak RSS MiB\tfit s\timport s\texport s\t")
	for _, r := range p.Rungs {
		lo, hi := minMax(r.CompileS)
		fmt.Fprintf(tw, "%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f\t%.3f\t%s\t%s\t\n", r.Capacity, len(r.CompileS), r.MedianS, lo, hi,
			compilecost.Median(r.CompileCPUS), compilecost.Median(r.IRBuildS), float64(r.PeakRSSBytes)/(1<<20), p.Fit.At(r.Capacity),
			medianOrDash(r.ImportS), medianOrDash(r.ExportS))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	f := p.Fit
	switch f.Model {
	case compilecost.FitLinear:
		fmt.Fprintf(w, "fit: t = %.4g + %.4g·C s  (R² %.4f, max rel err %.1f%%, %d rungs)", f.A, f.B, f.R2, 100*f.MaxRelErr, f.N)
	case compilecost.FitPower:
		fmt.Fprintf(w, "fit: t = %.4g·C^%.3f s  (R² %.4f, max rel err %.1f%%, %d rungs)", f.A, f.B, f.R2, 100*f.MaxRelErr, f.N)
	case compilecost.FitConstant:
		fmt.Fprintf(w, "fit: t = %.4g s (constant, %d rung)", f.A, f.N)
	default:
		fmt.Fprintf(w, "fit: %s", f.Model)
	}
	if f.Note != "" {
		fmt.Fprintf(w, "; %s", f.Note)
	}
	fmt.Fprintln(w)
	return writeKinds(w, p)
}

// writeKinds prints the median compile time of every other kind the
// profile measured, per capacity, next to the decode graph compiled first.
func writeKinds(w io.Writer, p *compilecost.Profile) error {
	kinds := p.Kinds()
	if len(kinds) < 2 {
		return nil
	}
	fmt.Fprintln(w, "median compile s by kind (first: in a fresh process; successor: after the graph the runtime compiles before it)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "capacity\t")
	for _, k := range kinds {
		fmt.Fprintf(tw, "%s\t", k)
	}
	fmt.Fprintln(tw)
	for _, r := range p.Rungs {
		fmt.Fprintf(tw, "%d\t", r.Capacity)
		for _, k := range kinds {
			if s, ok := p.PredictKind(k, r.Capacity); ok && measuredKind(p, r.Capacity, k) {
				fmt.Fprintf(tw, "%.3f\t", s)
			} else {
				fmt.Fprint(tw, "-\t")
			}
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// measuredKind reports whether kind k was measured at a capacity.
func measuredKind(p *compilecost.Profile, capacity int, k compilecost.Kind) bool {
	for _, x := range p.KindRungs(k) {
		if x.Capacity == capacity {
			return true
		}
	}
	return false
}

func minMax(xs []float64) (lo, hi float64) {
	for i, x := range xs {
		if i == 0 || x < lo {
			lo = x
		}
		if i == 0 || x > hi {
			hi = x
		}
	}
	return lo, hi
}

// medianOrDash is the median of xs with three decimals, "-" when empty.
func medianOrDash(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", compilecost.Median(xs))
}
