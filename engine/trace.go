package engine

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ovtoolkit/ovrun/tracing"
)

// Traces of a batched engine: a request is one trace (a SpanRequest root
// from Generate's call to its end, with its prompt, cached, generated
// tokens, queue time and time to first token), and every step one span of
// its own (SpanBatchStep) linked to the requests it carried. A step serves
// many requests at once, so it belongs to none of their traces; a span per
// token would be thousands per request.

// Traced is e with one SpanRequest per Generate, started from tr. The
// request's span rides in the context Generate passes on, where a batched
// engine's steps find it (StepInfo.Contexts) to link to.
func Traced(e Engine, tr trace.Tracer) Engine { return &traced{Engine: e, tr: tr} }

type traced struct {
	Engine
	tr trace.Tracer
}

// Await is the inner engine's (Awaiter), or returns at once.
func (t *traced) Await(ctx context.Context, n int, expect func(seconds float64) error) (bool, error) {
	if a, ok := t.Engine.(Awaiter); ok {
		return a.Await(ctx, n, expect)
	}
	return false, nil
}

func (t *traced) Generate(ctx context.Context, r Request) (Finish, error) {
	opts := []trace.SpanStartOption{trace.WithNewRoot(),
		trace.WithAttributes(tracing.AttrPromptTokens.Int(len(r.Prompt)), tracing.AttrDecodeTokens.Int(r.MaxTokens))}
	if w := r.RungWait; w != nil { // the request began with its wait in the queue
		opts = append(opts, trace.WithTimestamp(w.Start))
	}
	ctx, span := t.tr.Start(ctx, tracing.SpanRequest, opts...)
	defer span.End()
	if w := r.RungWait; w != nil {
		_, ws := t.tr.Start(ctx, tracing.SpanRungWait, trace.WithTimestamp(w.Start),
			trace.WithAttributes(tracing.AttrWaitS.Float64(w.Wait.Seconds()), tracing.AttrExpectedS.Float64(w.ExpectedS)))
		ws.End(trace.WithTimestamp(w.Start.Add(w.Wait)))
	}
	fin, err := t.Engine.Generate(ctx, r)
	span.SetAttributes(tracing.AttrDecodedTokens.Int(fin.Tokens), tracing.AttrCachedTokens.Int(fin.Cached),
		tracing.AttrQueueS.Float64(fin.Queued.Seconds()), tracing.AttrTTFTS.Float64(fin.TTFT.Seconds()),
		tracing.AttrFinishReason.String(fin.Reason))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return fin, err
}

// StepSpans returns a BatchConfig.OnStep that records every step as a
// SpanBatchStep from tr, linked to the spans of the requests it carried.
func StepSpans(tr trace.Tracer) func(StepInfo) {
	return func(s StepInfo) {
		links := make([]trace.Link, 0, len(s.Contexts))
		for _, c := range s.Contexts {
			if sc := trace.SpanContextFromContext(c); sc.IsValid() {
				links = append(links, trace.Link{SpanContext: sc})
			}
		}
		ids := make([]int64, len(s.SeqIDs))
		for i, id := range s.SeqIDs {
			ids[i] = int64(id)
		}
		_, span := tr.Start(context.Background(), tracing.SpanBatchStep, trace.WithNewRoot(),
			trace.WithTimestamp(s.Start), trace.WithLinks(links...),
			trace.WithAttributes(tracing.AttrCapacity.Int(s.Rung), tracing.AttrBatchSeqs.Int(s.Seqs),
				tracing.AttrBatchTokens.Int(s.Tokens), tracing.AttrBatchPrefill.Int(s.PrefillTokens),
				attribute.Int64Slice(string(tracing.AttrBatchRequests), ids)))
		if s.Err != nil {
			span.SetStatus(codes.Error, s.Err.Error())
		}
		span.End(trace.WithTimestamp(s.Start.Add(s.Dur)))
	}
}

var _ Awaiter = (*traced)(nil)
