package tracing

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// writeTrace writes a run span with two children through a provider.
func writeTrace(t testing.TB, path string) (t0 time.Time) {
	t.Helper()
	tp, shutdown, err := NewProvider(context.Background(), ServiceName, Options{TraceOut: path})
	if err != nil {
		t.Fatal(err)
	}
	tr := tp.Tracer(ScopeName)
	t0 = time.Unix(1_700_000_000, 123456789)
	at := func(s float64) trace.SpanEventOption { return trace.WithTimestamp(t0.Add(time.Duration(s * 1e9))) }
	ctx, root := tr.Start(context.Background(), SpanRun, at(0), trace.WithAttributes(
		AttrPolicy.String("grow-one-ahead"), AttrLadder.IntSlice([]int{32, 64}), AttrCriticalPathS.Float64(2.5)))
	_, c := tr.Start(ctx, SpanCompile, at(0.1), trace.WithAttributes(
		AttrCapacity.Int(64), AttrCompileForeground.Bool(false), attribute.StringSlice("x.tags", []string{"a", "<b>"})))
	c.RecordError(errors.New("boom"), at(0.4))
	c.SetStatus(codes.Error, "boom")
	c.End(at(0.4))
	_, d := tr.Start(ctx, SpanDecode, at(0.5), trace.WithAttributes(AttrCapacity.Int(32), AttrTokensPerS.Float64(123.5)))
	d.End(at(2))
	root.AddEvent(EventKV, at(1), trace.WithAttributes(AttrKVReservedBytes.Int64(4096), AttrKVLiveBytes.Int64(100)))
	root.End(at(2.5))
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	return t0
}

func TestTraceFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	t0 := writeTrace(t, path)
	spans, err := ReadTraceFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	by := map[string]Span{}
	for _, s := range spans {
		by[s.Name] = s
	}
	root, c, d := by[SpanRun], by[SpanCompile], by[SpanDecode]
	if root.ParentID != "" || c.ParentID != root.SpanID || d.ParentID != root.SpanID || c.TraceID != root.TraceID {
		t.Errorf("structure: root %s/%s compile parent %s decode parent %s", root.TraceID, root.SpanID, c.ParentID, d.ParentID)
	}
	if root.Service != ServiceName {
		t.Errorf("service %q", root.Service)
	}
	if !root.Start.Equal(t0) || !root.End.Equal(t0.Add(2500*time.Millisecond)) {
		t.Errorf("run [%v, %v], want from %v for 2.5s", root.Start, root.End, t0)
	}
	if v, _ := c.Attrs.Int(AttrCapacity); v != 64 {
		t.Errorf("compile capacity %v", c.Attrs)
	}
	if fg, ok := c.Attrs.Bool(AttrCompileForeground); !ok || fg {
		t.Errorf("compile foreground %v", c.Attrs)
	}
	if v, _ := d.Attrs.Float(AttrTokensPerS); v != 123.5 {
		t.Errorf("decode tok/s %v", d.Attrs)
	}
	if l, _ := root.Attrs[string(AttrLadder)].([]any); len(l) != 2 || l[1] != int64(64) {
		t.Errorf("ladder %#v", root.Attrs[string(AttrLadder)])
	}
	if tags, _ := c.Attrs["x.tags"].([]any); len(tags) != 2 || tags[1] != "<b>" {
		t.Errorf("string slice %#v", c.Attrs["x.tags"])
	}
	if c.Status != "error" || c.Message != "boom" || d.Status != "" {
		t.Errorf("status compile %q %q, decode %q", c.Status, c.Message, d.Status)
	}
	if len(c.Events) != 1 || c.Events[0].Name != "exception" {
		t.Errorf("compile events %v", c.Events)
	}
	if len(root.Events) != 1 || root.Events[0].Name != EventKV || !root.Events[0].Time.Equal(t0.Add(time.Second)) {
		t.Fatalf("run events %v", root.Events)
	}
	if v, _ := root.Events[0].Attrs.Int(AttrKVReservedBytes); v != 4096 {
		t.Errorf("kv event %v", root.Events[0].Attrs)
	}
}

// The file is OTLP/JSON: one request per line, hex ids, numeric enums.
func TestTraceFileIsOTLPJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	writeTrace(t, path)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	lines := 0
	hexID := regexp.MustCompile(`^[0-9a-f]+$`)
	for sc.Scan() {
		lines++
		var req struct {
			ResourceSpans []struct {
				ScopeSpans []struct {
					Spans []struct {
						TraceID, SpanID, ParentSpanID string
						Kind                          int
						Status                        struct{ Code int }
					}
				}
			}
		}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			t.Fatalf("line %d: %v", lines, err)
		}
		for _, s := range req.ResourceSpans[0].ScopeSpans[0].Spans {
			if len(s.TraceID) != 32 || len(s.SpanID) != 16 || !hexID.MatchString(s.TraceID+s.SpanID+s.ParentSpanID) {
				t.Errorf("ids not hex: %q %q %q", s.TraceID, s.SpanID, s.ParentSpanID)
			}
			if s.Kind != 1 {
				t.Errorf("kind %d, want 1 (internal)", s.Kind)
			}
		}
		// And it is the protobuf JSON mapping once the ids are base64.
		ids := regexp.MustCompile(`("(?:traceId|spanId|parentSpanId)":")([0-9a-f]*)"`)
		line := ids.ReplaceAllFunc(sc.Bytes(), func(m []byte) []byte {
			g := ids.FindSubmatch(m)
			raw, _ := hex.DecodeString(string(g[2]))
			return []byte(string(g[1]) + base64.StdEncoding.EncodeToString(raw) + `"`)
		})
		var v coltracepb.ExportTraceServiceRequest
		if err := protojson.Unmarshal(line, &v); err != nil {
			t.Errorf("line %d is not protobuf JSON: %v", lines, err)
		}
	}
	if lines != 1 {
		t.Errorf("%d lines, want one request", lines)
	}
}

// Plain protobuf JSON (base64 ids) reads too.
func TestReadTraceAcceptsBase64IDs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	writeTrace(t, path)
	want, err := ReadTraceFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	req, err := unmarshalLine(b)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadTrace(strings.NewReader(string(plain) + "\n\n" + string(plain)))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2*len(want) || got[0].SpanID != want[0].SpanID || got[0].ParentID != want[0].ParentID {
		t.Errorf("read %d spans (first %s), want %d (first %s)", len(got), got[0].SpanID, 2*len(want), want[0].SpanID)
	}
}

func TestReadTraceRejectsGarbage(t *testing.T) {
	tests := []struct{ name, in string }{
		{"not json", "{nope\n"},
		{"bad id", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","name":"x"}]}]}]}` + "\n"},
		{"wrong type", `{"resourceSpans":"x"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ReadTrace(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), "line 1") {
				t.Errorf("err = %v, want an error naming line 1", err)
			}
		})
	}
}
