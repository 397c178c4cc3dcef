package bench

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ovtoolkit/ovrun/app/campaignq"
)

// queued reports whether r is a queued campaign's class or pooled report.
func (r *Report) queued() bool { return r.Class != "" || len(r.PooledClasses) > 0 }

// writeClass says which requirement class a queued campaign's report
// covers, or which classes it pools.
func (r *Report) writeClass(b *strings.Builder) {
	switch {
	case len(r.PooledClasses) > 0:
		fmt.Fprintf(b, "> **Pooled over %d requirement classes (`--pool`)**: %s. Pairs are numbered class after class. Each pair still ran whole on one machine, but the classes' machines differ: the effect here averages over them, and its interval holds their disagreement. Each class's own report is in `%s/`.\n\n",
			len(r.PooledClasses), "`"+strings.Join(r.PooledClasses, "`, `")+"`", filepath.Join("..", campaignq.ClassesDir))
	case r.Class != "":
		fmt.Fprintf(b, "Requirement class `%s`: every block ran on a worker whose labels hold it (machines below). Other classes of the campaign are separate reports; `%s` lists them all.\n\n", r.Class, filepath.Join("..", "..", MergeMD))
	}
}

// writeBlockMachines lists where each block of a queued campaign ran.
func (r *Report) writeBlockMachines(b *strings.Builder) {
	b.WriteString("## Machines and versions\n\n")
	b.WriteString("Each block ran whole, warm-ups included, on one worker. A delivery above 1 means earlier attempts of the block died or timed out; only the delivery shown counts.\n\n")
	if len(r.Blocks) == 0 {
		b.WriteString("No block has been collected yet.\n\n")
	} else {
		b.WriteString("| pair | class | worker | host | labels | CPU | cores | load start/end | delivery | block wall s |\n|---:|---|---|---|---|---|---:|---|---|---:|\n")
	}
	for _, br := range r.Blocks {
		m := br.Machine
		fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s | %d | %.2f/%.2f | %s (%d) | %.1f |\n", br.Pair, mdEscape(br.Class), mdEscape(br.Worker), mdEscape(br.Host),
			mdEscape(br.Labels), mdEscape(orUnknown(m.CPUModel)), m.Cores, m.LoadAvgStart, m.LoadAvgEnd, br.Delivery, br.Deliveries, br.WallS)
	}
	fmt.Fprintf(b, "\n- OpenVINO: %s\n", orUnknown(r.OpenVINOVersion))
	fmt.Fprintf(b, "- Go: %s\n\n", orUnknown(r.GoVersion))
	b.WriteString("## Command\n\n```\n" + r.Command + "\n```\n")
}

// markdown is merge.md: the classes, their tables, and the overall result.
func (mr *MergeReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# ovrun bench merge: %s\n\n", strings.Join(mr.Arms, " vs "))
	fmt.Fprintf(&b, "Campaign `%s` on `%s`: %d requirement classes, %d blocks each. Status: %s.", mr.Campaign, mr.Queue, len(mr.Classes), mr.Pairs, mr.Status)
	if mr.WallS > 0 {
		fmt.Fprintf(&b, " Published to last block collected: %.1f s.", mr.WallS)
	}
	b.WriteString("\n\n")
	fmt.Fprintf(&b, "**Overall: %s.**\n\n", mr.Overall)
	for _, c := range mr.Classes {
		fmt.Fprintf(&b, "# Class `%s`\n\n", c.Class)
		mr.writeResult(&b, c)
	}
	if mr.Pooled != nil {
		fmt.Fprintf(&b, "# Pooled: %s\n\n", mr.Overall)
		mr.writeResult(&b, *mr.Pooled)
	}
	return b.String()
}

func (mr *MergeReport) writeResult(b *strings.Builder, c ClassResult) {
	fmt.Fprintf(b, "Report: [`%s`](%s). %d of %d blocks collected", filepath.Join(c.Dir, "report.md"), filepath.Join(c.Dir, "report.md"), c.Collected, c.Blocks)
	if c.GaveUp > 0 {
		fmt.Fprintf(b, ", %d given up", c.GaveUp)
	}
	fmt.Fprintf(b, "; workers %s; machine labels %s. Status: %s.\n\n", orNoneList(c.Workers), orNoneList(c.Labels), c.Status)
	if len(c.Labels) > 1 && len(c.Report.PooledClasses) == 0 {
		b.WriteString("The class's blocks ran on machines with different labels (all meeting the class): each pair is within one machine, but the effect averages over them.\n\n")
	}
	for _, arm := range c.Report.Arms[1:] {
		c.Report.writeTable(b, arm)
	}
}

func orNoneList(xs []string) string {
	if len(xs) == 0 {
		return "none yet"
	}
	return "`" + strings.Join(xs, "`, `") + "`"
}
