package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/ovtoolkit/ovrun/runtime"
)

// SequentialConfig are a Sequential's per-request hooks (a server's
// metrics and traces); each may be nil.
type SequentialConfig struct {
	// Progress is called as a request's sequence is made, with its
	// prompt's length; it returns the sequence's progress callback
	// (runtime.SequenceConfig.Progress) and a function called once the
	// sequence has ended.
	Progress func(prompt int) (progress func(runtime.Progress), done func())
	// OnSummary receives each request's summary once its sequence has
	// ended (finished, failed or cancelled), with the origin of its
	// *_start_s offsets.
	OnSummary func(s *runtime.Summary, origin time.Time)
}

// Sequential decodes every request as one runtime.Sequence on a
// CompiledLadder shared by all of them: each rung is compiled when the
// ladder's schedule says (once, with LadderConfig.KeepRungs, for all the
// requests to come) and each sequence has its own KV store. Requests
// decode concurrently; a rung's graph runs one of them at a time.
type Sequential struct {
	l     *runtime.CompiledLadder
	cfg   SequentialConfig
	ready atomic.Bool
}

var _ Engine = (*Sequential)(nil)

// NewSequential serves requests on l, which the caller closes once
// every Generate has returned.
func NewSequential(l *runtime.CompiledLadder, cfg SequentialConfig) *Sequential {
	return &Sequential{l: l, cfg: cfg}
}

// MaxContext is the largest rung.
func (e *Sequential) MaxContext() int { return e.l.Rungs().Max() }

// Ready reports whether a sequence has started: the first rung (and, as
// the ladder's prefill mode says, its prefill graph) is compiled.
func (e *Sequential) Ready() bool { return e.ready.Load() }

// Warm runs a one-token sequence, so that what the first token needs is
// compiled before a server says it is ready.
func (e *Sequential) Warm(ctx context.Context) error {
	q, err := e.l.NewSequence(runtime.SequenceConfig{Prompt: []int64{0}, DecodeTokens: 1})
	if err != nil {
		return err
	}
	err = errors.Join(q.Run(ctx), q.Close())
	if err == nil {
		e.ready.Store(true)
	}
	return err
}

// Await waits for the rung a prompt of n tokens starts on (see Awaiter and
// runtime.CompiledLadder.Await).
func (e *Sequential) Await(ctx context.Context, n int, expect func(seconds float64) error) (bool, error) {
	return e.l.Await(ctx, n, expect)
}

// Generate decodes r as one sequence.
func (e *Sequential) Generate(ctx context.Context, r Request) (Finish, error) {
	fin, _, err := e.GenerateSummary(ctx, r, time.Time{})
	return fin, err
}

// GenerateSummary is Generate that also returns the sequence's summary
// (ovrun chat prints it and writes it as JSON), with its offsets from
// origin (zero: the call). The summary is returned after a failure or
// cancellation too, complete up to the last token; it is nil when no
// sequence was made (a request refused up front).
func (e *Sequential) GenerateSummary(ctx context.Context, r Request, origin time.Time) (Finish, *runtime.Summary, error) {
	start := time.Now()
	if origin.IsZero() {
		origin = start
	}
	if err := r.check(e.MaxContext()); err != nil {
		return Finish{}, nil, err
	}
	dec, tally, err := Decoding(r)
	if err != nil {
		return Finish{}, nil, err
	}
	cfg := runtime.SequenceConfig{Prompt: r.Prompt, DecodeTokens: r.Steps(e.MaxContext() - len(r.Prompt)),
		Decoding: dec, ProcessStart: origin}
	if e.cfg.Progress != nil {
		var done func()
		cfg.Progress, done = e.cfg.Progress(len(r.Prompt))
		if done != nil {
			defer done()
		}
	}
	q, err := e.l.NewSequence(cfg)
	if err != nil {
		return Finish{}, nil, err
	}
	err = q.Run(ctx)
	sum := q.Finish(err)
	if w := r.RungWait; w != nil {
		first, _ := e.l.Rungs().RungFor(len(r.Prompt) + 1)
		sum.RungWait = &runtime.RungWait{Capacity: e.l.Rungs()[first], StartS: w.Start.Sub(origin).Seconds(),
			WaitS: w.Wait.Seconds(), ExpectedS: w.ExpectedS}
	}
	err = errors.Join(err, q.Close())
	if e.cfg.OnSummary != nil {
		e.cfg.OnSummary(sum, origin)
	}
	fin := tally.Finish()
	fin.Prompt = len(r.Prompt)
	if err != nil {
		fin.Reason = "" // it did not finish; Tokens says how far it came
		return fin, sum, err
	}
	e.ready.Store(true)
	return fin, sum, nil
}

var _ Awaiter = (*Sequential)(nil)
