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

// EmitSpans turns a finished (or failed, or interrupted) run's summary into
// one trace: a root span for the run with compile, prefill, decode, migrate
// and boundary.wait children, at the times the summary recorded. The
// summary's *_s offsets count from processStart. The KV timeline becomes
// kv events on the root span.
func EmitSpans(ctx context.Context, tracer trace.Tracer, s *Summary, processStart time.Time) {
	if s == nil {
		return
	}
	at := func(off float64) trace.SpanStartEventOption {
		return trace.WithTimestamp(processStart.Add(time.Duration(off * float64(time.Second))))
	}
	end := s.EndS
	if end < s.RunStartS {
		end = s.RunStartS
	}
	ctx, root := tracer.Start(ctx, tracing.SpanRun, at(s.RunStartS), trace.WithAttributes(runAttrs(s)...))
	child := func(name string, start, stop float64, attrs ...attribute.KeyValue) trace.Span {
		_, sp := tracer.Start(ctx, name, at(start), trace.WithAttributes(attrs...))
		defer sp.End(trace.WithTimestamp(processStart.Add(time.Duration(stop * float64(time.Second)))))
		return sp
	}
	device := tracing.AttrDevice.String(s.Device)

	for _, c := range s.Compiles {
		stop := c.EndS
		if stop < c.StartS {
			stop = end // never finished
		}
		outcome := tracing.OutcomeOK
		if c.Error != "" {
			outcome = tracing.OutcomeError
		}
		_, sp := tracer.Start(ctx, tracing.SpanCompile, at(c.StartS), trace.WithAttributes(
			tracing.AttrCapacity.Int(c.Capacity), tracing.AttrChunk.Int(c.Chunk), device,
			tracing.AttrCompileForeground.Bool(c.Foreground), tracing.AttrCompileKind.String(c.Kind),
			tracing.AttrCompileAttempt.Int(c.Attempt), tracing.AttrCompileS.Float64(c.CompileS),
			tracing.AttrOutcome.String(outcome)))
		if c.Error != "" {
			fail(sp, c.Error, at(stop))
		}
		sp.End(at(stop))
	}
	if s.PrefillStartS > 0 {
		stop := s.PrefillEndS
		if stop < s.PrefillStartS {
			stop = end
		}
		child(tracing.SpanPrefill, s.PrefillStartS, stop, tracing.AttrTokens.Int(s.PromptTokens))
	}
	for i, r := range s.Rungs {
		capacity := tracing.AttrCapacity.Int(r.Capacity)
		from := 0
		if i > 0 {
			from = s.Rungs[i-1].Capacity
		}
		if r.WaitStartS > 0 && (r.WaitS > 0 || r.MigrateStartS == 0) {
			// A boundary that waited, or that was reached and never passed.
			stop := r.WaitStartS + r.WaitS
			if r.MigrateStartS == 0 {
				stop = end
			}
			sp := child(tracing.SpanBoundaryWait, r.WaitStartS, stop, capacity,
				tracing.AttrFromCapacity.Int(from), tracing.AttrToCapacity.Int(r.Capacity),
				tracing.AttrWaitS.Float64(stop-r.WaitStartS), tracing.AttrReady.Bool(r.ReadyAtBoundary))
			if r.MigrateStartS == 0 && s.Error != "" {
				fail(sp, s.Error, at(stop))
			}
		}
		if r.MigrateStartS > 0 {
			stop := r.MigrateStartS + r.MigrateS
			if r.DecodeStartS == 0 {
				stop = end // the migration failed
			}
			child(tracing.SpanMigrate, r.MigrateStartS, stop,
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
			child(tracing.SpanDecode, r.DecodeStartS, stop, capacity, device,
				tracing.AttrTokens.Int(tokens), tracing.AttrFirstStep.Int(r.FirstStep), tracing.AttrLastStep.Int(r.LastStep),
				tracing.AttrTokensPerS.Float64(r.TokensPerS), tracing.AttrDecodeS.Float64(r.DecodeS))
		}
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
	}
}

// fail marks sp as failed with msg, both as an exception event and as the status.
func fail(sp trace.Span, msg string, ts trace.SpanStartEventOption) {
	sp.RecordError(errors.New(msg), trace.WithTimestamp(ts.(interface{ Timestamp() time.Time }).Timestamp()))
	sp.SetStatus(codes.Error, msg)
}

// kvEvents thins the KV timeline to at most max points. Every change of
// the reserved level is kept with the point before it, so the reserved
// step line survives exactly; live bytes grow smoothly and are sampled.
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
	if room := max - n; room > 0 {
		stride := float64(len(tl)) / float64(room+1)
		for k := 1; k <= room; k++ {
			if j := int(float64(k) * stride); j < len(tl) && !keep[j] {
				keep[j] = true
			}
		}
	}
	out := make([]KVSample, 0, max)
	for i, k := range keep {
		if k {
			out = append(out, tl[i])
		}
	}
	return out
}
