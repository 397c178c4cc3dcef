package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/ovtoolkit/ovrun/model"
)

// verifier recomputes, for a boundary, the state of a sequence that never
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
	return errors.Join(errs...)
}

// verifyStep compares the logits just computed by the switched rung at
// step with the control's.
func (q *Sequence) verifyStep(ctx context.Context, step int) error {
	t0 := q.now()
	defer func() { q.verifyS += q.now().Sub(t0).Seconds() }()
	got := append([]float32(nil), q.logits...)
	maxCap := q.l.caps.Max()
	if q.control == nil {
		chunk := max(q.l.cfg.PrefillChunk, 16)
		exe, err := q.l.comp.Compile(ctx, model.GraphSpec{Capacity: maxCap, Chunk: chunk})
		if err != nil {
			return fmt.Errorf("verify: compile control prefill: %w", err)
		}
		buf, err := AllocKV(q.l.cfg.Shape, maxCap, false)
		if err != nil {
			return errors.Join(err, exe.Close())
		}
		q.control = &verifier{prefill: exe, buf: buf}
	}
	kv, err := q.control.buf.View(maxCap)
	if err != nil {
		return err
	}
	// Everything before this step's input, through the control prefill graph.
	p := len(q.fed) - 1
	if err := q.control.prefill.Bind(kv); err != nil {
		return err
	}
	if _, err := Prefill(q.control.prefill, q.fed[:p]); err != nil {
		return fmt.Errorf("verify: control prefill: %w", err)
	}
	// The same step through the same rung's graph, over the control cache.
	view, err := q.control.buf.View(q.l.caps[q.cur])
	if err != nil {
		return err
	}
	var want []float32
	err = q.l.rungs[q.cur].run(q.exe, view, func() error {
		logits, err := q.exe.Step(q.fed[p:], p)
		want = append(want, logits...)
		return err
	})
	if err != nil {
		return fmt.Errorf("verify: control step: %w", err)
	}
	if err := checkFinite(q.l.comp, want, fmt.Sprintf("of the verify control at step %d", step)); err != nil {
		return err
	}
	b := &q.s.Boundaries[len(q.s.Boundaries)-1]
	b.Verified = true
	b.Top1, b.Top1Ctl = int64(Argmax(got)), int64(Argmax(want))
	b.Top1OK = b.Top1 == b.Top1Ctl
	b.Cosine = Cosine(got, want)
	for k := range got {
		b.MaxAbs = math.Max(b.MaxAbs, math.Abs(float64(got[k]-want[k])))
	}
	// Bind the sequence's own cache back.
	return q.l.rungs[q.cur].run(q.exe, q.kv, func() error { return nil })
}
