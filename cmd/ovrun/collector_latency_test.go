package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkCollectorLatency measures what the Collector of
// dashboards/otelcol.yaml adds to a span batch's way into Jaeger: from the
// OTLP export call (a batch of spans of one trace, as ovrun's batch span
// processor sends it) until Jaeger's query API returns the whole trace,
// sent to Jaeger directly and through the Collector. Jaeger's own batch
// processor (200 ms) is on both paths; the Collector adds its batch
// processor (OTELCOL_BATCH_TIMEOUT, 200 ms by default: a batch waits for the
// next tick of that timer, half of it on average) and a gRPC hop.
//
//	make otelcol jaeger
//	OVRUN_JAEGER=$PWD/.cache/bin/jaeger OVRUN_OTELCOL=$PWD/.cache/bin/otelcol-ovrun \
//	    go test ./cmd/ovrun -run '^$' -bench CollectorLatency -benchtime 40x
func BenchmarkCollectorLatency(b *testing.B) {
	otelcol := os.Getenv("OVRUN_OTELCOL")
	if otelcol == "" {
		b.Skip("OVRUN_OTELCOL is not set: `make otelcol` builds .cache/bin/otelcol-ovrun")
	}
	j := startJaeger(b)
	c := startCollector(b, otelcol, j.otlp)
	for _, path := range []struct{ name, endpoint string }{{"direct", j.otlp}, {"collector", c.otlp}} {
		b.Run(path.name, func(b *testing.B) {
			ctx := context.Background()
			exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(path.endpoint), otlptracegrpc.WithInsecure())
			if err != nil {
				b.Fatal(err)
			}
			defer exp.Shutdown(ctx)
			var took []time.Duration
			for b.Loop() {
				// Batch processors flush on a free-running timer: a
				// random pause keeps the exports from locking to its
				// phase, which would always wait the whole timeout.
				b.StopTimer()
				time.Sleep(time.Duration(mrand.Int64N(int64(250 * time.Millisecond))))
				spans, id := spanBatch(spansPerBatch)
				b.StartTimer()
				start := time.Now()
				if err := exp.ExportSpans(ctx, spans); err != nil {
					b.Fatal(err)
				}
				j.waitTrace(b, id, spansPerBatch)
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			var total time.Duration
			for _, d := range took {
				total += d
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
			b.ReportMetric(ms(total)/float64(len(took)), "ms/batch")
			b.ReportMetric(ms(took[len(took)*95/100]), "p95-ms/batch")
		})
	}
}

const spansPerBatch = 20

// spanBatch is a finished trace of n spans: a root and its children.
func spanBatch(n int) ([]sdktrace.ReadOnlySpan, trace.TraceID) {
	var tid trace.TraceID
	_, _ = rand.Read(tid[:])
	res := resource.NewSchemaless(attribute.String("service.name", "ovrun-collector-bench"))
	end := time.Now()
	var stubs tracetest.SpanStubs
	var root trace.SpanContext
	for i := range n {
		var sid trace.SpanID
		_, _ = rand.Read(sid[:])
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
		s := tracetest.SpanStub{Name: "decode", SpanContext: sc, Resource: res,
			StartTime: end.Add(-time.Duration(n-i) * time.Millisecond), EndTime: end}
		if i == 0 {
			s.Name, root = "ovrun.request", sc
		} else {
			s.Parent = root
		}
		stubs = append(stubs, s)
	}
	return stubs.Snapshots(), tid
}

// waitTrace polls Jaeger every 2 ms until trace id holds n spans.
func (j jaeger) waitTrace(tb testing.TB, id trace.TraceID, n int) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got jaegerTraces
		resp, err := http.Get(j.query + "/api/traces/" + id.String())
		if err == nil {
			if resp.StatusCode == http.StatusOK {
				err = json.NewDecoder(resp.Body).Decode(&got)
			}
			resp.Body.Close()
		}
		if err == nil && len(got.Data) == 1 && len(got.Data[0].Spans) == n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("trace %s not in Jaeger with %d spans after 30 s (%v)", id, n, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
