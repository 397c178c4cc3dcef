package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ovtoolkit/ovrun/compilecost"
)

// RunConfig is one decode across a ladder: one sequence on a ladder of its
// own.
type RunConfig struct {
	Ladder       Ladder
	Policy       Policy
	Prompt       []int64
	DecodeTokens int     // decode steps
	Forced       []int64 // teacher-forced inputs, one per decode step; nil decodes greedily
	Verify       bool    // compare the first step after every switch with a control that never switched
	PrefillChunk int     // tokens per prefill call; <= 1 prefills through the decode graph
	Background   BackgroundOptions
	Decoding     // token choice, end-of-generation and streaming; greedy by default
	// Prefill is how the prompt is processed: auto, graph or decode; "" is
	// graph when PrefillChunk > 1.
	Prefill PrefillMode

	// ProcessStart is the origin of every *_start_s / *_end_s offset.
	ProcessStart time.Time
	// Progress, when set, is called after every decode step and while
	// waiting at a boundary.
	Progress func(Progress)
	// CompileCost, when set, gives per-rung compile budgets: successor
	// deadlines are predicted from it and a rung that cannot be compiled
	// within its one-ahead window is launched two ahead.
	CompileCost *compilecost.Profile
	// Clock replaces time.Now (tests use a simulated clock to check the
	// time-weighted KV accounting against analytic values).
	Clock func() time.Time
}

// Run decodes cfg.DecodeTokens steps across the ladder under cfg.Policy and
// returns the summary: one Sequence on a CompiledLadder of its own. On
// failure or cancellation the summary is still returned, complete up to the
// last decoded token, with FinishReason and Error set.
func Run(ctx context.Context, comp Compiler, shape KVShape, cfg RunConfig) (*Summary, error) {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.ProcessStart.IsZero() {
		cfg.ProcessStart = cfg.Clock()
	}
	s := &Summary{Schema: SummarySchema,
		Policy: string(cfg.Policy), Ladder: cfg.Ladder, PromptTokens: len(cfg.Prompt),
		DecodeTokens: cfg.DecodeTokens, TeacherForced: cfg.Forced != nil,
		Predictions: []int64{}, Rungs: []RungSummary{}, Boundaries: []BoundarySummary{},
		Compiles: []CompileRecord{}, KVTimeline: []KVSample{}, KVMeasured: Allocated,
	}
	s.RunStartS = cfg.Clock().Sub(cfg.ProcessStart).Seconds()
	fail := func(err error) (*Summary, error) {
		s.FinishReason, s.Error = "error", err.Error()
		return s, err
	}
	if cfg.DecodeTokens < 1 { // a run measures decoding
		return fail(fmt.Errorf("decode tokens must be at least 1, got %d", cfg.DecodeTokens))
	}
	l, err := NewCompiledLadder(ctx, comp, LadderConfig{Ladder: cfg.Ladder, Policy: cfg.Policy, Shape: shape,
		PrefillChunk: cfg.PrefillChunk, Prefill: cfg.Prefill, Background: cfg.Background, CompileCost: cfg.CompileCost, Clock: cfg.Clock,
		Note: func(n string) { s.Notes = append(s.Notes, n) }})
	if err != nil {
		return fail(err)
	}
	s.RemapFallback = l.RemapFallback()
	q, err := l.newSequence(SequenceConfig{Prompt: cfg.Prompt, DecodeTokens: cfg.DecodeTokens, Forced: cfg.Forced,
		Verify: cfg.Verify, Decoding: cfg.Decoding, ProcessStart: cfg.ProcessStart, Progress: cfg.Progress}, s)
	if err != nil {
		return fail(errors.Join(err, l.Close()))
	}
	err = q.Run(ctx)
	// The run ends with its last token, not when the ladder has finished
	// compiling rungs it launched and no longer needs.
	end := q.now()
	q.finish(end)
	// The graphs go first: nothing may run over the KV once it is freed.
	err = errors.Join(err, l.Close(), q.Close())
	if terr := l.ThreadError(); terr != nil {
		q.note("background compile thread options not applied: %v", terr)
	}
	finish(s, l, q, end, err)
	return s, err
}

// finish fills the ladder's part of a run's summary and its outcome.
func finish(s *Summary, l *CompiledLadder, q *Sequence, end time.Time, err error) {
	l.record(s, q.cfg.ProcessStart)
	s.SuccessorCompileOverlappedS = overlap(l.backgroundJobs(), q.decodeWindows, end)
	if q.l.cfg.CompileCost != nil {
		s.Budgets = l.BudgetStats(q.cfg.ProcessStart).Budgets
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
