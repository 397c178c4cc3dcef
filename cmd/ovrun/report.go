package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/runtime"
)

// progress draws a run's status line on a terminal, at most every 100 ms.
type progress struct {
	st   *cliutil.Status
	last time.Time
}

func newProgress(quiet bool) *progress {
	return &progress{st: cliutil.NewStatus(os.Stderr, quiet)}
}

func (p *progress) update(s runtime.Progress) {
	if p.st == nil || (!s.Waiting && time.Since(p.last) < 100*time.Millisecond && s.Step != s.Total) {
		return
	}
	p.last = time.Now()
	state := fmt.Sprintf("%.1f tok/s", s.TokensPerS)
	if s.Waiting {
		state = "waiting for the next graph"
	}
	next := ""
	if s.Next != "" {
		next = "  next: " + s.Next
	}
	p.st.Show("%d/%d tokens  rung %d  %s%s", s.Step, s.Total, s.Capacity, state, next)
}

func (p *progress) done() { p.st.Clear() }

// printSummary writes the short human summary of a run.
func printSummary(w io.Writer, s *runtime.Summary) {
	fmt.Fprintf(w, "%s on %s: %d prompt + %d/%d decode tokens, finish %s\n",
		s.Policy, s.Device, s.PromptTokens, s.DecodedTokens, s.DecodeTokens, s.FinishReason)
	fmt.Fprintf(w, "first token %.2f s  foreground compile %.2f s  critical path %.2f s  decode %.2f s  boundary wait %.2f s  overlapped compile %.2f s\n",
		s.TTFTS, s.ForegroundCompileS, s.CriticalPathS, s.DecodeS, s.BoundaryWaitS, s.SuccessorCompileOverlappedS)
	if s.PrefillUsed != "" {
		fmt.Fprintf(w, "prefill %s (%s): %.3f s; %s\n", s.PrefillUsed, s.PrefillMode, s.PrefillS, s.PrefillReason)
	}
	fmt.Fprintf(w, "KV reserved avg %s peak %s (%s), live avg %s; migrated %s in %.3f s; peak RSS %s\n",
		mib(s.KVReservedAvgBytes), mib(float64(s.KVReservedPeakBytes)), s.KVMeasured, mib(s.KVLiveAvgBytes),
		mib(float64(s.MigrateBytes)), s.MigrateS, mib(float64(s.PeakRSSBytes)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rung\tcompile s\twhen\tready\twait s\tmigrate s\tsteps\ttok/s\t")
	for _, r := range s.Rungs {
		if !r.Compiled && r.FirstStep < 0 && r.CompileAttempts == 0 {
			continue
		}
		when := "background"
		if r.Foreground {
			when = "foreground"
		}
		if r.CompileStopped {
			when = "stopped" // not needed when the run ended
		}
		steps := "-"
		if r.FirstStep > 0 {
			steps = fmt.Sprintf("%d-%d", r.FirstStep, r.LastStep)
		}
		ready := "-" // no boundary leads into the first rung
		if r.WaitStartS > 0 {
			ready = fmt.Sprint(r.ReadyAtBoundary)
		}
		fmt.Fprintf(tw, "%d\t%.2f\t%s\t%s\t%.3f\t%.3f\t%s\t%.1f\t\n", r.Capacity, r.CompileS, when, ready, r.WaitS, r.MigrateS, steps, r.TokensPerS)
	}
	tw.Flush()
	printBudgets(w, s.Budgets)
	for _, b := range s.Boundaries {
		if b.Verified {
			fmt.Fprintf(w, "boundary %d->%d at step %d: top-1 %v, cosine %.7f\n", b.From, b.To, b.Step, b.Top1OK, b.Cosine)
		}
	}
	for _, n := range s.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	if s.Error != "" {
		fmt.Fprintln(w, "error:", s.Error)
	}
}

// printBudgets is the --compile-cost budgets: per rung the profile's
// figure and its basis, the correction learnt from earlier compiles, the
// prediction, the actual compile and the prediction's error.
func printBudgets(w io.Writer, budgets []runtime.Budget) {
	if len(budgets) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "budget	basis	profile s	correction	predicted s	actual s	error	window s	")
	for _, b := range budgets {
		basis := b.Basis
		if b.Reused {
			basis = "reused"
		}
		actual, errPct := "-", "-"
		if b.ActualS > 0 {
			actual = fmt.Sprintf("%.2f", b.ActualS)
			if b.PredictedS > 0 {
				errPct = fmt.Sprintf("%+.0f%%", 100*b.Error)
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%.2f\t%.2f\t%.2f\t%s\t%s\t%.2f\t\n", b.Capacity, basis, b.ProfileS, b.Correction, b.PredictedS, actual, errPct, b.WindowS)
	}
	tw.Flush()
}

// mib formats bytes in MiB, or KiB below one MiB.
func mib(b float64) string {
	if b < 1<<20 {
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", b/(1<<20))
}
