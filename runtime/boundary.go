package runtime

import (
	"errors"
	"time"
)

// boundary switches from rung cur to cur+1 before decode step i.
func (r *run) boundary(step int) error {
	from, next := r.cur, r.cur+1
	arrive := r.now()
	r.closeWindow(arrive)
	rs := &r.s.Rungs[next]
	rs.WaitStartS = r.off(arrive)
	j := r.jobs[next]
	attempt := 1
	switch {
	case j == nil: // lazy: compile now, on the critical path
		r.progress(step-1, true)
		j = r.sch.foreground(r.decodeSpec(next))
		r.jobs[next] = j
		r.recordRung(next, j, attempt)
	case j.background:
		ready := j.ready()
		rs.ReadyAtBoundary = ready && j.err == nil
		if !ready {
			r.progress(step-1, true)
			<-j.done
		}
		r.recordRung(next, j, attempt)
		r.budgetDone(next, j)
	default:
		rs.ReadyAtBoundary = true
	}
	if j.err != nil && r.ctx.Err() == nil {
		// A failed background (or lazy) compile gets one foreground retry.
		r.note("compile of rung %d failed (%v); retrying in the foreground", r.rungs[next], j.err)
		attempt++
		j = r.sch.foreground(r.decodeSpec(next))
		r.jobs[next] = j
		r.recordRung(next, j, attempt)
	}
	if j.err != nil {
		return r.compileFailed(j)
	}
	waited := r.now()
	rs.WaitS = waited.Sub(arrive).Seconds()
	r.s.BoundaryWaitS += rs.WaitS

	// Move the live KV into the next rung's cache.
	rs.MigrateStartS = r.off(waited)
	live := len(r.fed)
	if r.policy.sharedKV() {
		kv, err := r.buf.View(r.rungs[next])
		if err != nil {
			return err
		}
		r.kv = kv
	} else {
		nb, err := AllocKV(r.shape, r.rungs[next], true)
		if err != nil {
			return err
		}
		r.setReserved(r.now(), r.buf.Bytes()+nb.Bytes()) // both buffers exist during the copy
		kv, err := nb.View(r.rungs[next])
		if err != nil {
			return errors.Join(err, nb.Free())
		}
		n, err := CopyLive(kv, r.kv, live, r.shape.RowBytes())
		if err != nil {
			return errors.Join(err, nb.Free())
		}
		rs.MigrateBytes = n
		old := r.buf
		r.buf, r.kv = nb, kv
		if err := old.Free(); err != nil {
			return err
		}
		r.setReserved(r.now(), r.buf.Bytes())
	}
	r.cur = next
	r.exe = j.exe
	if err := r.exe.Bind(r.kv); err != nil {
		return err
	}
	done := r.now()
	// The context only grows: the smaller graph is never used again, and
	// freeing it returns its compiled-model memory.
	if err := r.sch.drop(r.jobs[from]); err != nil {
		return err
	}
	rs.MigrateS = done.Sub(waited).Seconds()
	r.s.MigrateS += rs.MigrateS
	r.s.MigrateBytes += rs.MigrateBytes
	r.s.Boundaries = append(r.s.Boundaries, BoundarySummary{From: r.rungs[from], To: r.rungs[next], Step: step})
	r.windowStart = done
	rs.DecodeStartS = r.off(done)
	r.launchSuccessor()
	return nil
}

// closeWindow ends the current rung's decode window at t.
func (r *run) closeWindow(t time.Time) {
	if r.windowStart.IsZero() {
		return
	}
	r.decodeWindows = append(r.decodeWindows, [2]time.Time{r.windowStart, t})
	r.s.Rungs[r.cur].DecodeEndS = r.off(t)
	r.windowStart = time.Time{}
}
