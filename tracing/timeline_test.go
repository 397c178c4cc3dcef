package tracing

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// run.otlp.jsonl is a real trace: tiny preset, grow-one-ahead over
// 128,512,1024,2048, 20 prompt + 2000 decode tokens, on a 2-core CPU.
func TestTimelineGolden(t *testing.T) {
	spans, err := ReadTraceFile(filepath.Join("testdata", "run.otlp.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := WriteTimeline(context.Background(), &got, spans, TimelineOptions{}); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "timeline.svg")
	if *update {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./tracing -run Golden -update)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("timeline differs from %s; if the change is intended, rerun with -update and look at the picture", golden)
	}
	// What a reader looks for, independent of layout details.
	svg := got.String()
	for _, s := range []string{"grow-one-ahead", "128→512", "512→1024", "1024→2048", "decode @2048", "background compile", "reserved KV", "live KV", "prefill"} {
		if !strings.Contains(svg, s) {
			t.Errorf("timeline lacks %q", s)
		}
	}
}

func TestTimelineNeedsARun(t *testing.T) {
	err := WriteTimeline(context.Background(), &bytes.Buffer{}, []Span{{Name: SpanDecode, TraceID: "a"}}, TimelineOptions{})
	if !errors.Is(err, ErrNoRun) {
		t.Errorf("err = %v, want ErrNoRun", err)
	}
	spans, err := ReadTraceFile(filepath.Join("testdata", "run.otlp.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteTimeline(context.Background(), &bytes.Buffer{}, spans, TimelineOptions{TraceID: "00"}); !errors.Is(err, ErrNoRun) {
		t.Errorf("unknown trace id: err = %v, want ErrNoRun", err)
	}
}

func TestTicks(t *testing.T) {
	tests := []struct {
		span        float64
		first, step float64
	}{
		{6.2, 0, 1}, {1.5, 0, 0.2}, {0.3, 0, 0.05}, {240, 0, 50}, {10, 0, 2},
	}
	for _, tc := range tests {
		got := ticks(tc.span)
		if len(got) < 4 || len(got) > 11 || got[0] != tc.first || got[1]-got[0] < tc.step*0.999 || got[1]-got[0] > tc.step*1.001 {
			t.Errorf("ticks(%v) = %v, want steps of %v", tc.span, got, tc.step)
		}
	}
}

// spanLine is one OTLP/JSON request line of n spans named name in trace
// 0102...10, each with an attribute.
func spanLine(name string, n int) string {
	var b strings.Builder
	b.WriteString(`{"resourceSpans":[{"scopeSpans":[{"spans":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"%016x","parentSpanId":"00000000000000aa","name":%q,`+
			`"startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":[{"key":"ovrun.capacity","value":{"intValue":"64"}}]}`,
			i+1, name, 1_700_000_000_000_000_000+i, 1_700_000_000_000_000_100+i)
	}
	b.WriteString(`]}]}]}` + "\n")
	return b.String()
}

// ReadTimeline keeps what the picture needs: the same picture as from
// every span.
func TestReadTimelineDrawsTheSame(t *testing.T) {
	path := filepath.Join("testdata", "run.otlp.jsonl")
	all, err := ReadTraceFile(path)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := ReadTimeline(context.Background(), path, "")
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if err := WriteTimeline(context.Background(), &a, all, TimelineOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := WriteTimeline(context.Background(), &b, kept, TimelineOptions{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) || len(kept) == 0 {
		t.Errorf("the timeline of the spans ReadTimeline keeps (%d of %d) differs", len(kept), len(all))
	}
	id := all[0].TraceID
	if other, err := ReadTimeline(context.Background(), path, "00"+id[2:]); err != nil || len(other) != 0 {
		t.Errorf("another trace id: %d spans, %v; want none", len(other), err)
	}
}

func TestReadTimelineBoundsWhatItHolds(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name, in, want string
	}{
		{"a line over the limit", spanLine(SpanDecode, 2000), "line 1: trace too large to plot: longer than 64.0 KiB"},
		{"too many spans to draw", strings.Repeat(spanLine(SpanDecode, 50), 5), "line 3: trace too large to plot: more than 120 spans and events"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readTimeline(ctx, strings.NewReader(tc.in), "", 64<<10, 120)
			if !errors.Is(err, ErrTraceTooLarge) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrTraceTooLarge: %q", err, tc.want)
			}
		})
	}
	// Spans the picture does not draw are not held, so not counted.
	spans, err := readTimeline(ctx, strings.NewReader(strings.Repeat(spanLine("http.request", 50), 5)+spanLine(SpanDecode, 3)), "", 64<<10, 120)
	if err != nil || len(spans) != 3 {
		t.Errorf("read %d spans, %v; want the 3 decode spans", len(spans), err)
	}
}

// endless yields the same line forever, and cancels after a few.
type endless struct {
	line   string
	left   string
	n      int
	cancel func()
}

func (e *endless) Read(p []byte) (int, error) {
	if e.left == "" {
		if e.n++; e.n == 5 {
			e.cancel()
		}
		e.left = e.line
	}
	k := copy(p, e.left)
	e.left = e.left[k:]
	return k, nil
}

// TestReadTimelineStopsWhenCancelled: Ctrl-C ends the reading of a trace
// that would not end.
func TestReadTimelineStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := readTimeline(ctx, &endless{line: spanLine("http.request", 20), cancel: cancel}, "", 1<<20, 100)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute): // a hang guard, not a timing
		t.Fatal("the reading did not stop")
	}
	spans, err := ReadTraceFile(filepath.Join("testdata", "run.otlp.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteTimeline(ctx, &bytes.Buffer{}, spans, TimelineOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("drawing after Ctrl-C: %v, want context.Canceled", err)
	}
}

// TestUnmarshalLineIsLean: decoding a line allocates a small multiple of
// it (a generic JSON tree of it took over twenty times its size).
func TestUnmarshalLineIsLean(t *testing.T) {
	line := []byte(spanLine(SpanDecode, 20000))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req, err := unmarshalLine(line)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(req.ResourceSpans[0].ScopeSpans[0].Spans); n != 20000 {
		t.Fatalf("%d spans", n)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 10*uint64(len(line)) {
		t.Errorf("decoding a line of %d bytes allocated %d (%.1fx)", len(line), got, float64(got)/float64(len(line)))
	}
}
