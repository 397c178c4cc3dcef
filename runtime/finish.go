package runtime

import (
	"errors"
	"math"
	"time"
)

// Compiles lists every compile attempt so far, times as offsets from
// origin (for a server's metrics; a run's summary gets them from record).
func (l *CompiledLadder) Compiles(origin time.Time) []CompileRecord {
	var s Summary
	l.record(&s, origin)
	return s.Compiles
}

// record adds the ladder's compiles to a summary: every attempt, and each
// rung's latest one in its RungSummary. Times are offsets from origin.
func (l *CompiledLadder) record(s *Summary, origin time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	off := func(t time.Time) float64 { return t.Sub(origin).Seconds() }
	for _, a := range l.records {
		j := a.job
		c := CompileRecord{Capacity: j.spec.Capacity, Chunk: j.spec.Chunk, Kind: a.kind, Foreground: !j.background,
			Attempt: a.attempt, StartS: off(j.start), EndS: off(j.end), CompileS: j.seconds(), IRBytes: a.irBytes,
			Source: a.origin.Source, ImportS: a.origin.ImportS, ExportS: a.origin.ExportS}
		switch {
		case errors.Is(j.err, ErrLadderClosed):
			c.Stopped = true
		case j.err != nil:
			c.Error = j.err.Error()
		}
		s.Compiles = append(s.Compiles, c)
		if a.rung < 0 || a.rung >= len(s.Rungs) {
			continue
		}
		rs := &s.Rungs[a.rung]
		rs.Compiled = j.err == nil
		rs.CompileS, rs.CompileStartS, rs.CompileEndS = c.CompileS, c.StartS, c.EndS
		rs.Foreground = !j.background
		rs.CompileAttempts = a.attempt
		rs.CompileError = c.Error
		rs.CompileSource, rs.ImportS, rs.ExportS = c.Source, c.ImportS, c.ExportS
		rs.CompileStopped = c.Stopped
		rs.Shared = j.spec.Shared
	}
}

// overlap is the background compile time that ran inside decode windows;
// a compile still running counts up to now.
func overlap(jobs []*compileJob, windows [][2]time.Time, now time.Time) float64 {
	var total float64
	for _, j := range jobs {
		// A job still running is read through its atomic start time only:
		// its other fields belong to the worker until done is closed.
		var start, end time.Time
		switch ns := j.startNS.Load(); {
		case j.ready():
			start, end = j.start, j.end
		case ns != 0:
			start, end = time.Unix(0, ns), now
		}
		if start.IsZero() {
			continue
		}
		if end.IsZero() {
			end = now
		}
		for _, w := range windows {
			a, b := maxTime(start, w[0]), minTime(end, w[1])
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
