package bench

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/ovtoolkit/ovrun/internal/stats"
)

// WriteMarkdown writes report.md: the endpoint tables, boundary evidence,
// plots, runs, machine, versions and the command.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	cfg := &r.Campaign
	fmt.Fprintf(&b, "# ovrun bench: %s\n\n", strings.Join(r.Arms, " vs "))
	if r.Partial {
		fmt.Fprintf(&b, "> **Partial report** (%s). Statistics use only the pairs in which both runs finished; continue with `--resume`.\n\n", r.Status)
	}
	fmt.Fprintf(&b, "Model `%s`, ladder %s, %d prompt + %d decode tokens", cfg.Model, joinInts(cfg.Ladder), cfg.PromptTokens, cfg.DecodeTokens)
	if cfg.TeacherForced {
		b.WriteString(" (teacher-forced)")
	}
	fmt.Fprintf(&b, ", seed %d, precision %s", cfg.Seed, orDefault(cfg.Precision))
	switch cfg.Cache {
	case CacheCold:
		b.WriteString(", compiled-rung cache cold (a fresh empty one per run)")
	case CacheWarm:
		b.WriteString(", compiled-rung cache warm (filled by the warm-up runs; measured runs import)")
	}
	fmt.Fprintf(&b, ". Control: **%s**. ", r.Control)
	design := "AB/BA alternation"
	if len(r.Arms) > 2 {
		design = fmt.Sprintf("Williams design (%d sequences per cycle)", stats.CycleLen(len(r.Arms)))
	}
	if r.queued() {
		fmt.Fprintf(&b, "%d blocks in %s, each run a fresh process, each block whole on one worker machine after its own warm-up run per arm (excluded). Status: %s.\n\n", len(r.Order), design, r.Status)
		r.writeClass(&b)
	} else {
		fmt.Fprintf(&b, "%d blocks in %s, each run a fresh process, one warm-up run per arm first (excluded). Status: %s.\n\n", cfg.Pairs, design, r.Status)
	}

	for _, arm := range r.Arms[1:] {
		r.writeTable(&b, arm)
	}
	r.writeReading(&b)
	r.writeBoundary(&b)
	r.writePlots(&b)
	r.writeRuns(&b)
	r.writeMachine(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Report) writeTable(b *strings.Builder, arm string) {
	n := 0
	if c := r.comparison(arm, Endpoints[0].Name); c != nil {
		n = c.N
	}
	fmt.Fprintf(b, "## %s vs %s (control), N = %d pairs\n\n", arm, r.Control, n)
	if n == 0 {
		b.WriteString("No pair in which both arms finished.\n\n")
		return
	}
	fmt.Fprintf(b, "| endpoint | %s mean | %s mean | paired effect | 95%% CI | p (sign-flip) | wins |\n", r.Control, arm)
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	for _, e := range Endpoints {
		c := r.comparison(arm, e.Name)
		if c == nil {
			continue
		}
		f := newFormatter(e, c.ControlMean, c.TreatmentMean)
		pct := "n/a"
		if c.PctChange != nil {
			pct = fmtPct(*c.PctChange)
		}
		ci := "n/a"
		if c.CI95Low != nil {
			ci = fmt.Sprintf("[%s, %s]", f.num(*c.CI95Low), f.num(*c.CI95High))
		}
		fmt.Fprintf(b, "| %s `%s` | %s | %s | %s %s · %s | %s %s | %s | %d/%d |\n",
			e.Label, e.Name, f.val(c.ControlMean), f.val(c.TreatmentMean),
			f.signed(c.DiffMean), f.unit, pct, ci, f.unit, fmtP(c.PSignFlip), c.TreatmentWins, c.N)
	}
	b.WriteString("\n")
}

// writeReading explains how to read the tables, honestly about N.
func (r *Report) writeReading(b *strings.Builder) {
	if len(r.Comparisons) == 0 {
		return
	}
	n := r.Comparisons[0].N
	b.WriteString("Paired effect = treatment − control, mean over pairs (negative: lower for the treatment) and as % of the control mean. ")
	b.WriteString("95% CI: paired t. p: exact two-sided sign-flip (permutation) test of the paired differences. ")
	b.WriteString("Wins: pairs in which the treatment's value was better: lower, except for successor compile overlapped, where more compile hidden behind decode is better. ")
	b.WriteString("Raw per-run values are in `report.json` (`comparisons[].control_values`, `treatment_values`).\n\n")
	floor := stats.SignFlipFloor(n)
	if floor > 0.05 {
		fmt.Fprintf(b, "**With N = %d pairs the smallest possible two-sided sign-flip p is 2/2^%d = %.4g, so no endpoint can reach p < 0.05 here.** Read the effect sizes, the intervals and the wins, not p.\n\n", n, n, floor)
	} else {
		fmt.Fprintf(b, "With N = %d pairs the smallest possible two-sided sign-flip p is 2/2^%d = %.4g: p < 0.05 needs (nearly) every pair to move the same way.\n\n", n, n, floor)
	}
	for _, arm := range r.Arms[1:] {
		var excl []string
		for _, c := range r.Comparisons {
			if c.Treatment == arm && c.CI95Low != nil && (*c.CI95Low > 0 || *c.CI95High < 0) {
				excl = append(excl, "`"+c.Endpoint+"`")
			}
		}
		if len(excl) == 0 {
			fmt.Fprintf(b, "- %s: no 95%% interval excludes zero.\n", arm)
		} else {
			fmt.Fprintf(b, "- %s: the 95%% interval excludes zero for %s.\n", arm, strings.Join(excl, ", "))
		}
	}
	b.WriteString("\n")
}

func (r *Report) writeBoundary(b *strings.Builder) {
	b.WriteString("## Boundary evidence\n\n")
	b.WriteString("| arm | runs | boundaries crossed | background successors ready | boundary wait, total | top-1 matches | min cosine |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	verified, matches := 0, 0
	minCos := math.Inf(1)
	for _, ev := range r.BoundaryEvidence {
		ready := "— (none compiled in the background)"
		if ev.Successors > 0 {
			ready = fmt.Sprintf("%d/%d", ev.SuccessorsReady, ev.Successors)
		}
		top1, cos := "not verified", "—"
		if ev.Verified > 0 {
			top1 = fmt.Sprintf("%d/%d", ev.Top1Matches, ev.Verified)
			verified += ev.Verified
			matches += ev.Top1Matches
		}
		if ev.MinCosine != nil {
			cos = fmt.Sprintf("%.7f", *ev.MinCosine)
			minCos = min(minCos, *ev.MinCosine)
		}
		fmt.Fprintf(b, "| %s | %d | %d | %s | %.3f s | %s | %s |\n", ev.Arm, ev.Runs, ev.Boundaries, ready, ev.BoundaryWaitS, top1, cos)
	}
	b.WriteString("\n")
	if verified > 0 {
		fmt.Fprintf(b, "Top-1 matched the never-switched control in %d/%d boundary comparisons across all arms", matches, verified)
		if !math.IsInf(minCos, 0) {
			fmt.Fprintf(b, " (minimum logit cosine %.7f)", minCos)
		}
		b.WriteString(". The comparison runs outside the timed path.\n\n")
	} else {
		b.WriteString("Boundary logits were not compared; `--verify-boundaries` passes `--verify` to every run (outside the timed path).\n\n")
	}
}

func (r *Report) writePlots(b *strings.Builder) {
	if len(r.Plots) == 0 {
		return
	}
	b.WriteString("## Plots\n\n")
	for _, p := range r.Plots {
		fmt.Fprintf(b, "![%s](%s)\n\n%s\n\n", p, p, plotCaptions[p])
	}
}

func (r *Report) writeRuns(b *strings.Builder) {
	b.WriteString("## Runs\n\n| pair | pos | arm | foreground compile s | first token s | critical path s | decode s | boundary wait s | status |\n|---:|---:|---|---:|---:|---:|---:|---:|---|\n")
	for _, rr := range r.Runs {
		pair := fmt.Sprint(rr.Pair)
		switch {
		case rr.Warmup && rr.Pair > 0:
			pair = fmt.Sprintf("warm-up %d", rr.Pair)
		case rr.Warmup:
			pair = "warm-up"
		}
		status := "ok"
		switch {
		case rr.Error != "":
			status = rr.Error
		case rr.Reused:
			status = "ok (reused)"
		}
		if s := rr.Summary; s != nil {
			fmt.Fprintf(b, "| %s | %d | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %s |\n", pair, rr.Position, rr.Arm,
				s.ForegroundCompileS, s.TTFTS, s.CriticalPathS, s.DecodeS, s.BoundaryWaitS, mdEscape(status))
		} else {
			fmt.Fprintf(b, "| %s | %d | %s | | | | | | %s |\n", pair, rr.Position, rr.Arm, mdEscape(status))
		}
	}
	b.WriteString("\n")
}

func (r *Report) writeMachine(b *strings.Builder) {
	if r.queued() {
		r.writeBlockMachines(b)
		return
	}
	m := r.Machine
	b.WriteString("## Machine and versions\n\n")
	fmt.Fprintf(b, "- CPU: %s, %d logical CPUs, %s memory\n", orUnknown(m.CPUModel), m.Cores, fmtBytes(float64(m.MemoryBytes)))
	fmt.Fprintf(b, "- Kernel: %s (%s/%s)\n", orUnknown(m.Kernel), m.OS, m.Arch)
	fmt.Fprintf(b, "- 1-minute load average: %.2f at start, %.2f at end (a load above %d means other work shared the CPUs and adds noise to every wall time)\n", m.LoadAvgStart, m.LoadAvgEnd, m.Cores)
	fmt.Fprintf(b, "- OpenVINO: %s\n", orUnknown(r.OpenVINOVersion))
	fmt.Fprintf(b, "- Go: %s\n\n", orUnknown(r.GoVersion))
	b.WriteString("## Command\n\n```\n" + r.Command + "\n```\n")
}

// formatter prints one table row's values in one unit.
type formatter struct {
	unit     string
	scale    float64
	decimals int
}

func newFormatter(e Endpoint, values ...float64) formatter {
	m := 0.0
	for _, v := range values {
		m = max(m, math.Abs(v))
	}
	if e.Bytes {
		f := formatter{unit: "B", scale: 1, decimals: 0}
		for _, u := range []struct {
			name  string
			scale float64
		}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
			if m >= u.scale {
				f = formatter{unit: u.name, scale: u.scale, decimals: 2}
				break
			}
		}
		return f
	}
	switch {
	case m == 0:
		return formatter{unit: "s", scale: 1, decimals: 3}
	case m >= 1:
		return formatter{unit: "s", scale: 1, decimals: max(2, 3-int(math.Floor(math.Log10(m))))}
	case m >= 1e-3:
		return formatter{unit: "ms", scale: 1e-3, decimals: msDecimals(m / 1e-3)}
	}
	return formatter{unit: "µs", scale: 1e-6, decimals: msDecimals(m / 1e-6)}
}

// msDecimals gives a value in [1, 1000) three significant digits.
func msDecimals(v float64) int { return min(3, max(1, 2-int(math.Floor(math.Log10(v))))) }

func (f formatter) num(v float64) string {
	s := fmt.Sprintf("%.*f", f.decimals, v/f.scale)
	if strings.Trim(s, "-0.") == "" {
		s = strings.TrimPrefix(s, "-") // no "-0.000"
	}
	return s
}

// signed is num with an explicit sign.
func (f formatter) signed(v float64) string {
	s := f.num(v)
	if !strings.HasPrefix(s, "-") {
		s = "+" + s
	}
	return s
}

// fmtPct prints a percent change; huge ones (a control mean near zero)
// in three significant digits.
func fmtPct(p float64) string {
	if math.Abs(p) >= 1000 {
		return fmt.Sprintf("%+.3g%%", p)
	}
	return fmt.Sprintf("%+.2f%%", p)
}

func (f formatter) val(v float64) string { return f.num(v) + " " + f.unit }

func fmtBytes(v float64) string { return newFormatter(Endpoint{Bytes: true}, v).val(v) }

func fmtP(p float64) string {
	if p >= 0.001 {
		return fmt.Sprintf("%.3f", p)
	}
	return fmt.Sprintf("%.1e", p)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
