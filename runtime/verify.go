package runtime

import (
	"fmt"
	"math"

	"github.com/ovtoolkit/ovrun/model"
)

// verifier recomputes, for a boundary, the state of a run that never
// switched: it prefills every token fed so far into a fresh cache of the
// largest capacity (a prefix of which is a valid cache of any rung) and
// runs the same step there. Its time is kept out of the critical path.
type verifier struct {
	prefill Executable
	buf     *KVBuffer
}

func (v *verifier) close() error {
	var errs []error
	if v.prefill != nil {
		errs = append(errs, v.prefill.Close())
	}
	errs = append(errs, v.buf.Free())
	return joinErrs(errs)
}

// verifyStep compares logits, just computed by the switched rung at step i,
// with the control's.
func (r *run) verifyStep(step int, logits []float32) error {
	t0 := r.now()
	defer func() { r.verifyS += r.now().Sub(t0).Seconds() }()
	got := append([]float32(nil), logits...)
	maxCap := r.rungs[len(r.rungs)-1]
	if r.control == nil {
		chunk := max(r.cfg.PrefillChunk, 16)
		exe, err := r.comp.Compile(r.ctx, model.GraphSpec{Capacity: maxCap, Chunk: chunk})
		if err != nil {
			return fmt.Errorf("verify: compile control prefill: %w", err)
		}
		buf, err := AllocKV(r.shape, maxCap, false)
		if err != nil {
			return joinErrs([]error{err, exe.Close()})
		}
		r.control = &verifier{prefill: exe, buf: buf}
	}
	kv, err := r.control.buf.View(maxCap)
	if err != nil {
		return err
	}
	// Everything before this step's input, through the control prefill graph.
	p := len(r.fed) - 1
	if err := r.control.prefill.Bind(kv); err != nil {
		return err
	}
	if _, err := Prefill(r.control.prefill, r.fed[:p]); err != nil {
		return fmt.Errorf("verify: control prefill: %w", err)
	}
	// The same step through the same rung's graph, over the control cache.
	view, err := r.control.buf.View(r.rungs[r.cur])
	if err != nil {
		return err
	}
	if err := r.exe.Bind(view); err != nil {
		return err
	}
	want, err := r.exe.Step(r.fed[p:], p)
	if err != nil {
		return fmt.Errorf("verify: control step: %w", err)
	}
	if err := checkFinite(r.comp, want, fmt.Sprintf("of the verify control at step %d", step)); err != nil {
		return err
	}
	b := &r.s.Boundaries[len(r.s.Boundaries)-1]
	b.Verified = true
	b.Top1, b.Top1Ctl = int64(Argmax(got)), int64(Argmax(want))
	b.Top1OK = b.Top1 == b.Top1Ctl
	b.Cosine = Cosine(got, want)
	for k := range got {
		b.MaxAbs = math.Max(b.MaxAbs, math.Abs(float64(got[k]-want[k])))
	}
	return r.exe.Bind(r.kv)
}
