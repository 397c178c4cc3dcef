package runtime

import (
	"context"
	"errors"
	"math"
	"time"
)

// finish fills the totals; err is the run's outcome.
func (r *run) finish(err error) {
	end := r.now()
	s := r.s
	if r.sch != nil {
		// Background jobs that finished after the decode still belong in the record.
		for i, j := range r.jobs {
			if j != nil && j.background && !s.Rungs[i].Compiled && j.ready() && s.Rungs[i].CompileAttempts == 0 {
				r.recordRung(i, j, 1)
				r.budgetDone(i, j)
			}
		}
	}
	r.closeWindow(end)
	s.EndS = r.off(end)
	last := end
	s.CriticalPathS = last.Sub(r.cfg.ProcessStart).Seconds() - r.verifyS
	s.VerifyS = r.verifyS
	if r.meter.running {
		s.KVReservedAvgBytes, s.KVLiveAvgBytes = r.meter.averages(end)
		r.sample(end, true)
	}
	s.KVReservedPeakBytes = r.meter.peak
	s.KVLiveFinalBytes = int64(len(r.fed)) * r.shape.TokenBytes()
	for i := range s.Rungs {
		rs := &s.Rungs[i]
		if rs.DecodeS > 0 {
			rs.TokensPerS = float64(rs.LastStep-rs.FirstStep+1) / rs.DecodeS
		}
	}
	s.SuccessorCompileOverlappedS = r.overlap()
	if r.budgets != nil {
		s.Budgets = r.budgets.list()
	}
	s.PeakRSSBytes = PeakRSS()
	switch {
	case err == nil:
		if s.FinishReason == "" {
			s.FinishReason = "length"
		}
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		s.FinishReason, s.Error = "interrupted", err.Error()
	case errors.Is(err, ErrCompile):
		s.FinishReason, s.Error = "compile_error", err.Error()
	default:
		s.FinishReason, s.Error = "error", err.Error()
	}
}

// overlap is the background compile time that ran while decode ran.
func (r *run) overlap() float64 {
	var total float64
	for _, j := range r.sch.jobs {
		if !j.background || j.start.IsZero() {
			continue
		}
		end := j.end
		if end.IsZero() {
			end = r.now()
		}
		for _, w := range r.decodeWindows {
			a, b := maxTime(j.start, w[0]), minTime(end, w[1])
			if b.After(a) {
				total += b.Sub(a).Seconds()
			}
		}
	}
	return total
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Cosine is the cosine similarity of two vectors, in float64.
func Cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		ab += x * y
		aa += x * x
		bb += y * y
	}
	if aa == 0 || bb == 0 {
		return 0
	}
	return ab / math.Sqrt(aa*bb)
}
