package runtime

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ovtoolkit/ovrun/tracing"
)

// EventBudget names the root-span event of a compile budget overrun or a
// predicted deadline miss.
const EventBudget = "compile.budget"

// EmitSpans turns a finished (or failed, or interrupted) run's summary into
// one trace: a root span for the run with compile, prefill, decode, migrate
// and boundary.wait children, at the times the summary recorded. The
// summary's *_s offsets count from processStart. The KV timeline becomes
// kv events on the root span.
func EmitSpans(ctx context.Context, tracer trace.Tracer, s *Summary, processStart time.Time) {
	if s == nil {
		return
	}
	at := func(off float64) trace.SpanEventOption {
		return trace.WithTimestamp(processStart.Add(time.Duration(off * float64(time.Second))))
	}
	end := s.EndS
	if end < s.RunStartS {
		end = s.RunStartS
	}
	ctx, root := tracer.Start(ctx, tracing.SpanRun, at(s.RunStartS), trace.WithAttributes(runAttrs(s)...))
	// child is a child span of the run from start to stop, failed with
	// errMsg unless that is empty.
	child := func(name string, start, stop float64, errMsg string, attrs ...attribute.KeyValue) {
		_, sp := tracer.Start(ctx, name, at(start), trace.WithAttributes(attrs...))
		if errMsg != "" {
			fail(sp, errMsg, at(stop))
		}
		sp.End(at(stop))
	}
	device := tracing.AttrDevice.String(s.Device)

	for _, c := range s.Compiles {
		stop := c.EndS
		if stop < c.StartS {
			stop = end // never finished
		}
		outcome := c.Outcome()
		attrs := []attribute.KeyValue{tracing.AttrCapacity.Int(c.Capacity), tracing.AttrChunk.Int(c.Chunk), device,
			tracing.AttrCompileForeground.Bool(c.Foreground), tracing.AttrCompileKind.String(c.Kind),
			tracing.AttrCompileAttempt.Int(c.Attempt), tracing.AttrCompileS.Float64(c.CompileS),
			tracing.AttrOutcome.String(outcome)}
		if c.IRBytes > 0 {
			attrs = append(attrs, tracing.AttrIRBytes.Int(c.IRBytes))
		}
		if c.Source != "" {
			attrs = append(attrs, tracing.AttrCompileSource.String(c.Source))
		}
		if c.ImportS > 0 {
			attrs = append(attrs, tracing.AttrImportS.Float64(c.ImportS))
		}
		if c.ExportS > 0 {
			attrs = append(attrs, tracing.AttrExportS.Float64(c.ExportS))
		}
		child(tracing.SpanCompile, c.StartS, stop, c.Error, attrs...)
	}
	if s.PrefillStartS > 0 {
		stop := s.PrefillEndS
		if stop < s.PrefillStartS {
			stop = end
		}
		attrs := []attribute.KeyValue{tracing.AttrTokens.Int(s.PromptTokens),
			tracing.AttrPrefillMode.String(s.PrefillMode), tracing.AttrPrefillUsed.String(s.PrefillUsed),
			tracing.AttrPrefillReason.String(s.PrefillReason), tracing.AttrPrefillDecodeTokens.Int(s.PrefillDecodeTokens)}
		if s.SharedStepPenalty > 0 {
			attrs = append(attrs, tracing.AttrPrefillSharedCost.Float64(s.SharedStepPenalty))
		}
		child(tracing.SpanPrefill, s.PrefillStartS, stop, "", attrs...)
	}
	for i, r := range s.Rungs {
		capacity := tracing.AttrCapacity.Int(r.Capacity)
		from := 0
		if i > 0 {
			from = s.Rungs[i-1].Capacity
		}
		if r.WaitStartS > 0 && (r.WaitS > 0 || r.MigrateStartS == 0) {
			// A boundary that waited, or that was reached and never passed.
			stop, errMsg := r.WaitStartS+r.WaitS, ""
			if r.MigrateStartS == 0 {
				stop, errMsg = end, s.Error
			}
			child(tracing.SpanBoundaryWait, r.WaitStartS, stop, errMsg, capacity,
				tracing.AttrFromCapacity.Int(from), tracing.AttrToCapacity.Int(r.Capacity),
				tracing.AttrWaitS.Float64(stop-r.WaitStartS), tracing.AttrReady.Bool(r.ReadyAtBoundary))
		}
		if r.MigrateStartS > 0 {
			stop, errMsg := r.MigrateStartS+r.MigrateS, ""
			if r.DecodeStartS == 0 { // the migration failed
				stop, errMsg = end, s.Error
			}
			child(tracing.SpanMigrate, r.MigrateStartS, stop, errMsg,
				tracing.AttrFromCapacity.Int(from), tracing.AttrToCapacity.Int(r.Capacity),
				tracing.AttrBytes.Int64(r.MigrateBytes), tracing.AttrMigrateS.Float64(r.MigrateS))
		}
		if r.DecodeStartS > 0 {
			stop := r.DecodeEndS
			if stop < r.DecodeStartS {
				stop = end
			}
			tokens := 0
			if r.FirstStep > 0 {
				tokens = r.LastStep - r.FirstStep + 1
			}
			child(tracing.SpanDecode, r.DecodeStartS, stop, "", capacity, device,
				tracing.AttrTokens.Int(tokens), tracing.AttrFirstStep.Int(r.FirstStep), tracing.AttrLastStep.Int(r.LastStep),
				tracing.AttrTokensPerS.Float64(r.TokensPerS), tracing.AttrDecodeS.Float64(r.DecodeS))
		}
	}
	// Compile budgets from --compile-cost: an event where a rung overran its
	// predicted compile time or was predicted to miss its deadline.
	for _, b := range s.Budgets {
		if b.OverrunS <= 0 && b.MissedS <= 0 {
			continue
		}
		t := end
		for _, r := range s.Rungs {
			if r.Capacity == b.Capacity && r.CompileEndS > 0 {
				t = r.CompileEndS
			}
		}
		root.AddEvent(EventBudget, at(t), trace.WithAttributes(tracing.AttrCapacity.Int(b.Capacity),
			attribute.Float64("ovrun.budget.predicted_s", b.PredictedS), attribute.Float64("ovrun.budget.actual_s", b.ActualS),
			attribute.Float64("ovrun.budget.overrun_s", b.OverrunS), attribute.Float64("ovrun.budget.window_s", b.WindowS),
			attribute.Float64("ovrun.budget.deadline_missed_by_s", b.MissedS), attribute.Int("ovrun.budget.lookahead", b.Lookahead),
			attribute.String("ovrun.budget.basis", b.Basis), attribute.Float64("ovrun.budget.profile_s", b.ProfileS),
			attribute.Float64("ovrun.budget.correction", b.Correction), attribute.Float64("ovrun.budget.error", b.Error)))
	}
	// Budgeted compiles that ran while this run did (a server's request
	// sees the compiles launched for it and for the requests beside it).
	for _, b := range s.Budgets {
		stop := b.ReadyS
		if stop == 0 {
			stop = end
		}
		if stop < s.RunStartS || b.LaunchS > end {
			continue
		}
		child(tracing.SpanBudget, b.LaunchS, stop, "", tracing.AttrCapacity.Int(b.Capacity),
			tracing.AttrBudgetReason.String(b.Reason), tracing.AttrBudgetPredictedS.Float64(b.PredictedS),
			tracing.AttrBudgetActualS.Float64(b.ActualS), tracing.AttrBudgetProfileS.Float64(b.ProfileS),
			tracing.AttrBudgetCorrection.Float64(b.Correction), tracing.AttrBudgetError.Float64(b.Error),
			tracing.AttrBudgetWindowS.Float64(b.WindowS), tracing.AttrBudgetMissedS.Float64(b.MissedS),
			tracing.AttrBudgetWaitS.Float64(b.WaitS), tracing.AttrBudgetBasis.String(b.Basis))
	}
	if w := s.RungWait; w != nil {
		child(tracing.SpanRungWait, w.StartS, w.StartS+w.WaitS, "", tracing.AttrCapacity.Int(w.Capacity),
			tracing.AttrWaitS.Float64(w.WaitS), tracing.AttrExpectedS.Float64(w.ExpectedS))
	}
	for _, k := range kvEvents(s.KVTimeline, tracing.MaxKVEvents) {
		root.AddEvent(tracing.EventKV, at(k.TS), trace.WithAttributes(
			tracing.AttrKVReservedBytes.Int64(k.ReservedBytes), tracing.AttrKVLiveBytes.Int64(k.LiveBytes)))
	}
	if s.Error != "" {
		fail(root, s.Error, at(end))
	}
	root.End(at(end))
}

func runAttrs(s *Summary) []attribute.KeyValue {
	return []attribute.KeyValue{
		tracing.AttrPolicy.String(s.Policy), tracing.AttrModel.String(s.Model),
		tracing.AttrDevice.String(s.Device), tracing.AttrPrecision.String(s.Precision),
		tracing.AttrOpenVINO.String(s.OpenVINOVersion), tracing.AttrLadder.IntSlice(s.Ladder),
		tracing.AttrPromptTokens.Int(s.PromptTokens), tracing.AttrDecodeTokens.Int(s.DecodeTokens),
		tracing.AttrDecodedTokens.Int(s.DecodedTokens), tracing.AttrFinishReason.String(s.FinishReason),
		tracing.AttrCriticalPathS.Float64(s.CriticalPathS), tracing.AttrForegroundS.Float64(s.ForegroundCompileS),
		tracing.AttrBoundaryWaitS.Float64(s.BoundaryWaitS), tracing.AttrOverlappedS.Float64(s.SuccessorCompileOverlappedS),
		tracing.AttrKVReservedAvg.Float64(s.KVReservedAvgBytes), tracing.AttrKVReservedPeak.Int64(s.KVReservedPeakBytes),
		tracing.AttrKVLiveAvg.Float64(s.KVLiveAvgBytes), tracing.AttrPeakRSS.Int64(s.PeakRSSBytes),
		tracing.AttrTTFTS.Float64(s.TTFTS), tracing.AttrPrefillMode.String(s.PrefillMode), tracing.AttrPrefillUsed.String(s.PrefillUsed),
		tracing.AttrCompileIn.String(s.CompileIn),
	}
}

// fail marks sp as failed with msg, both as an exception event and as the status.
func fail(sp trace.Span, msg string, at trace.SpanEventOption) {
	sp.RecordError(errors.New(msg), at)
	sp.SetStatus(codes.Error, msg)
}

// kvEvents thins the KV timeline to at most max points (max >= 2). Every
// change of the reserved level is kept with the point before it, so the
// reserved step line survives exactly, unless there are more changes than
// max allows (grow-remap commits pages every few steps); the rest are
// evenly spaced samples.
func kvEvents(tl []KVSample, max int) []KVSample {
	if len(tl) <= max {
		return tl
	}
	keep := make([]bool, len(tl))
	keep[0], keep[len(tl)-1] = true, true
	n := 2
	for i := 1; i < len(tl); i++ {
		if tl[i].ReservedBytes != tl[i-1].ReservedBytes {
			for _, j := range []int{i - 1, i} {
				if !keep[j] {
					keep[j] = true
					n++
				}
			}
		}
	}
	if n > max { // too many steps: sample evenly instead
		clear(keep)
		keep[0], keep[len(tl)-1] = true, true
		n = 2
	}
	for k, room := 1, max-n; k <= room; k++ {
		keep[k*(len(tl)-1)/(room+1)] = true
	}
	out := make([]KVSample, 0, max)
	for i, k := range keep {
		if k {
			out = append(out, tl[i])
		}
	}
	return out
}
