package runtime

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ovtoolkit/ovrun/tracing"
)

// traceSummary is a grow-one-ahead run over 64,128,256: rung 128 compiled
// behind decode and was ready; rung 256's background compile failed, the
// foreground retry made the boundary wait; then the run was interrupted.
func traceSummary() *Summary {
	return &Summary{
		Policy: "grow-one-ahead", Model: "/m/tiny", Device: "CPU", Ladder: []int{64, 128, 256},
		PromptTokens: 20, DecodeTokens: 300, DecodedTokens: 250,
		RunStartS: 0.1, PrefillStartS: 1.2, PrefillEndS: 1.3, EndS: 9.0,
		Compiles: []CompileRecord{
			{Capacity: 64, Chunk: 64, Kind: "prefill", Foreground: true, Attempt: 1, StartS: 0.1, EndS: 0.6, CompileS: 0.5},
			{Capacity: 64, Chunk: 1, Kind: "decode", Foreground: true, Attempt: 1, StartS: 0.6, EndS: 1.1, CompileS: 0.5},
			{Capacity: 128, Chunk: 1, Kind: "decode", Attempt: 1, StartS: 1.15, EndS: 2.0, CompileS: 0.85},
			{Capacity: 256, Chunk: 1, Kind: "decode", Attempt: 1, StartS: 3.01, EndS: 4.0, CompileS: 0.99, Error: "out of memory"},
			{Capacity: 256, Chunk: 1, Kind: "decode", Foreground: true, Attempt: 2, StartS: 5.0, EndS: 6.0, CompileS: 1.0},
		},
		Rungs: []RungSummary{
			{Capacity: 64, FirstStep: 1, LastStep: 44, DecodeStartS: 1.3, DecodeEndS: 3.0, TokensPerS: 30},
			{Capacity: 128, FirstStep: 45, LastStep: 108, ReadyAtBoundary: true, WaitStartS: 3.0,
				MigrateStartS: 3.0, MigrateS: 0.01, MigrateBytes: 4096, DecodeStartS: 3.01, DecodeEndS: 5.0, TokensPerS: 40},
			{Capacity: 256, FirstStep: 109, LastStep: 250, WaitStartS: 5.0, WaitS: 1.0,
				MigrateStartS: 6.0, MigrateS: 0.02, MigrateBytes: 8192, DecodeStartS: 6.02, DecodeEndS: 9.0, TokensPerS: 50},
		},
		KVTimeline:   []KVSample{{TS: 1.3, ReservedBytes: 100, LiveBytes: 10}, {TS: 3.0, ReservedBytes: 300, LiveBytes: 20}},
		Boundaries:   []BoundarySummary{{From: 64, To: 128, Step: 45}, {From: 128, To: 256, Step: 109}},
		FinishReason: "interrupted", Error: "context canceled",
	}
}

func recordSpans(t *testing.T, s *Summary, origin time.Time) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	EmitSpans(context.Background(), tp.Tracer("test"), s, origin)
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	return rec.Ended()
}

func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestEmitSpansShape(t *testing.T) {
	origin := time.Unix(1000, 0)
	spans := recordSpans(t, traceSummary(), origin)
	var root sdktrace.ReadOnlySpan
	count := map[string]int{}
	for _, s := range spans {
		count[s.Name()]++
		if s.Name() == tracing.SpanRun {
			root = s
		}
	}
	want := map[string]int{tracing.SpanRun: 1, tracing.SpanCompile: 5, tracing.SpanPrefill: 1,
		tracing.SpanDecode: 3, tracing.SpanMigrate: 2, tracing.SpanBoundaryWait: 1}
	for name, n := range want {
		if count[name] != n {
			t.Errorf("%d %q spans, want %d", count[name], name, n)
		}
	}
	if len(count) != len(want) {
		t.Errorf("span names %v, want %v", count, want)
	}
	if root == nil {
		t.Fatal("no run span")
	}
	if root.Parent().IsValid() {
		t.Error("run span has a parent")
	}
	for _, s := range spans {
		if s != root && (s.Parent().SpanID() != root.SpanContext().SpanID() || s.SpanContext().TraceID() != root.SpanContext().TraceID()) {
			t.Errorf("%s is not a child of the run span", s.Name())
		}
	}
	if got, want := root.StartTime(), origin.Add(100*time.Millisecond); !got.Equal(want) {
		t.Errorf("run starts %v, want %v", got, want)
	}
	if got, want := root.EndTime(), origin.Add(9*time.Second); !got.Equal(want) {
		t.Errorf("run ends %v, want %v", got, want)
	}
	ra := attrsOf(root)
	if ra[tracing.AttrPolicy].AsString() != "grow-one-ahead" || ra[tracing.AttrDevice].AsString() != "CPU" ||
		ra[tracing.AttrModel].AsString() != "/m/tiny" || ra[tracing.AttrFinishReason].AsString() != "interrupted" {
		t.Errorf("run attributes %v", ra)
	}
	if l := ra[tracing.AttrLadder].AsInt64Slice(); len(l) != 3 || l[2] != 256 {
		t.Errorf("ladder attribute %v", l)
	}
	if root.Status().Code != codes.Error || root.Status().Description != "context canceled" {
		t.Errorf("run status %+v, want error", root.Status())
	}
	kv := 0
	for _, e := range root.Events() {
		if e.Name == tracing.EventKV {
			kv++
		}
	}
	if kv != 2 {
		t.Errorf("%d kv events, want 2", kv)
	}
}

func TestEmitSpansAttributes(t *testing.T) {
	spans := recordSpans(t, traceSummary(), time.Unix(1000, 0))
	decode := map[int64]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		a := attrsOf(s)
		switch s.Name() {
		case tracing.SpanDecode:
			decode[a[tracing.AttrCapacity].AsInt64()] = s
		case tracing.SpanMigrate:
			from, to := a[tracing.AttrFromCapacity].AsInt64(), a[tracing.AttrToCapacity].AsInt64()
			if !(from == 64 && to == 128 && a[tracing.AttrBytes].AsInt64() == 4096) && !(from == 128 && to == 256 && a[tracing.AttrBytes].AsInt64() == 8192) {
				t.Errorf("migrate %d->%d bytes %d", from, to, a[tracing.AttrBytes].AsInt64())
			}
		case tracing.SpanBoundaryWait:
			if a[tracing.AttrCapacity].AsInt64() != 256 || a[tracing.AttrWaitS].AsFloat64() != 1.0 {
				t.Errorf("boundary.wait attributes %v", a)
			}
			if d := s.EndTime().Sub(s.StartTime()); d != time.Second {
				t.Errorf("boundary.wait lasts %v, want 1s", d)
			}
		case tracing.SpanCompile:
			failed := a[tracing.AttrOutcome].AsString() == tracing.OutcomeError
			if failed != (s.Status().Code == codes.Error) {
				t.Errorf("compile %v: outcome %q but status %v", a[tracing.AttrCapacity], a[tracing.AttrOutcome].AsString(), s.Status())
			}
			if failed {
				if a[tracing.AttrCapacity].AsInt64() != 256 || a[tracing.AttrCompileForeground].AsBool() || s.Status().Description != "out of memory" {
					t.Errorf("failed compile %v %+v", a, s.Status())
				}
				if len(s.Events()) != 1 || s.Events()[0].Name != "exception" {
					t.Errorf("failed compile events %v, want one recorded error", s.Events())
				}
			}
			if a[tracing.AttrDevice].AsString() != "CPU" || a[tracing.AttrCompileKind].AsString() == "" {
				t.Errorf("compile attributes %v", a)
			}
		}
	}
	if len(decode) != 3 {
		t.Fatalf("decode spans for %d capacities, want 3", len(decode))
	}
	if a := attrsOf(decode[128]); a[tracing.AttrTokens].AsInt64() != 64 || a[tracing.AttrTokensPerS].AsFloat64() != 40 {
		t.Errorf("decode 128 attributes %v", a)
	}
}

// A background compile overlaps the decode window it ran behind.
func TestEmitSpansBackgroundCompileOverlapsDecode(t *testing.T) {
	spans := recordSpans(t, traceSummary(), time.Unix(1000, 0))
	var bg, dec sdktrace.ReadOnlySpan
	for _, s := range spans {
		a := attrsOf(s)
		c := a[tracing.AttrCapacity].AsInt64()
		if s.Name() == tracing.SpanCompile && c == 128 && !a[tracing.AttrCompileForeground].AsBool() {
			bg = s
		}
		if s.Name() == tracing.SpanDecode && c == 64 {
			dec = s
		}
	}
	if bg == nil || dec == nil {
		t.Fatal("missing background compile of 128 or decode at 64")
	}
	if !bg.StartTime().Before(dec.EndTime()) || !dec.StartTime().Before(bg.EndTime()) {
		t.Errorf("compile 128 [%v, %v] does not overlap decode 64 [%v, %v]", bg.StartTime(), bg.EndTime(), dec.StartTime(), dec.EndTime())
	}
}

func TestEmitSpansSuccessAndEarlyFailure(t *testing.T) {
	ok := traceSummary()
	ok.FinishReason, ok.Error = "length", ""
	for _, s := range recordSpans(t, ok, time.Unix(0, 0)) {
		if s.Name() != tracing.SpanCompile && s.Status().Code == codes.Error {
			t.Errorf("%s has error status in a successful run", s.Name())
		}
	}
	// A run that failed before any decode: only the run span and its compile.
	early := &Summary{Policy: "lazy", RunStartS: 0.1, EndS: 0.5, FinishReason: "compile_error", Error: "compile: boom",
		Compiles: []CompileRecord{{Capacity: 32, Chunk: 1, Kind: "decode", Foreground: true, Attempt: 1, StartS: 0.1, EndS: 0.5, Error: "boom"}}}
	spans := recordSpans(t, early, time.Unix(0, 0))
	if len(spans) != 2 {
		t.Fatalf("%d spans, want run and compile", len(spans))
	}
	for _, s := range spans {
		if s.Status().Code != codes.Error {
			t.Errorf("%s status %v, want error", s.Name(), s.Status())
		}
	}
	// A boundary reached and never passed: the wait runs to the end, failed.
	cut := traceSummary()
	cut.Rungs[2].WaitS, cut.Rungs[2].MigrateStartS, cut.Rungs[2].MigrateS, cut.Rungs[2].DecodeStartS, cut.Rungs[2].DecodeEndS = 0, 0, 0, 0, 0
	n := 0
	for _, s := range recordSpans(t, cut, time.Unix(0, 0)) {
		if s.Name() == tracing.SpanBoundaryWait {
			n++
			if s.Status().Code != codes.Error || s.EndTime() != time.Unix(9, 0) {
				t.Errorf("unfinished wait: status %v, end %v", s.Status(), s.EndTime())
			}
		}
	}
	if n != 1 {
		t.Errorf("%d boundary.wait spans, want 1", n)
	}
	if got := recordSpans(t, nil, time.Unix(0, 0)); len(got) != 0 {
		t.Errorf("a nil summary gave %d spans", len(got))
	}
}

func TestKVEventsKeepEveryReservedStep(t *testing.T) {
	var tl []KVSample
	reserved := int64(100)
	for i := range 5000 {
		if i == 1234 || i == 3000 || i == 3001 {
			reserved *= 2
		}
		tl = append(tl, KVSample{TS: float64(i), ReservedBytes: reserved, LiveBytes: int64(i)})
	}
	got := kvEvents(tl, 64)
	if len(got) > 64 || len(got) < 32 {
		t.Fatalf("%d points, want at most 64 and most of them", len(got))
	}
	if got[0] != tl[0] || got[len(got)-1] != tl[len(tl)-1] {
		t.Error("first or last point dropped")
	}
	seen := map[float64]bool{}
	for i, p := range got {
		seen[p.TS] = true
		if i > 0 && p.TS <= got[i-1].TS {
			t.Fatal("points out of order")
		}
	}
	for _, ts := range []float64{1233, 1234, 2999, 3000, 3001} {
		if !seen[ts] {
			t.Errorf("reserved step at %v dropped", ts)
		}
	}
	// More steps than room: evenly sampled, still bounded.
	for i := range tl {
		tl[i].ReservedBytes = int64(i)
	}
	if got := kvEvents(tl, 64); len(got) > 64 || got[len(got)-1] != tl[len(tl)-1] {
		t.Errorf("%d points (last %v) from a timeline that steps every sample", len(got), got[len(got)-1])
	}
	if got := kvEvents(tl[:10], 64); len(got) != 10 {
		t.Errorf("short timeline thinned to %d", len(got))
	}
}

func TestEmitSpansBudgetOverrunEvent(t *testing.T) {
	s := traceSummary()
	s.Compiles[0].IRBytes = 1234
	s.Budgets = []Budget{{Capacity: s.Rungs[len(s.Rungs)-1].Capacity, PredictedS: 1, ActualS: 3, OverrunS: 2, Lookahead: 1}}
	var root sdktrace.ReadOnlySpan
	var irBytes int64
	for _, sp := range recordSpans(t, s, time.Unix(0, 0)) {
		if sp.Parent().IsValid() {
			if v, ok := attrsOf(sp)["ovrun.ir_bytes"]; ok {
				irBytes = v.AsInt64()
			}
			continue
		}
		root = sp
	}
	if irBytes != 1234 {
		t.Errorf("compile span ir_bytes = %d, want 1234", irBytes)
	}
	n := 0
	for _, e := range root.Events() {
		if e.Name == EventBudget {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d %s events on the run span, want 1", n, EventBudget)
	}
}
