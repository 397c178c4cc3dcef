package tracing

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"go.opentelemetry.io/otel/attribute"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

// Span is a finished span as read back from a trace file.
type Span struct {
	TraceID  string // hex
	SpanID   string // hex
	ParentID string // hex, empty for a root
	Service  string // the resource's service.name
	Name     string
	Start    time.Time
	End      time.Time
	Attrs    Attrs
	Events   []Event
	Status   string // "", "ok" or "error"
	Message  string // status description
	Links    []Link // spans of other traces this one is linked to
}

// Link names another span (a batch step's link to a request it carried).
type Link struct {
	TraceID, SpanID string // hex
}

// Event is a timed annotation of a span.
type Event struct {
	Name  string
	Time  time.Time
	Attrs Attrs
}

// Attrs are attribute values: bool, int64, float64, string or []any of those.
type Attrs map[string]any

// Int is the integer attribute k.
func (a Attrs) Int(k attribute.Key) (int64, bool) {
	v, ok := a[string(k)].(int64)
	return v, ok
}

// Float is the numeric attribute k.
func (a Attrs) Float(k attribute.Key) (float64, bool) {
	switch v := a[string(k)].(type) {
	case float64:
		return v, true
	case int64:
		return float64(v), true
	}
	return 0, false
}

// Str is the string attribute k.
func (a Attrs) Str(k attribute.Key) string {
	v, _ := a[string(k)].(string)
	return v
}

// Bool is the boolean attribute k.
func (a Attrs) Bool(k attribute.Key) (bool, bool) {
	v, ok := a[string(k)].(bool)
	return v, ok
}

// Duration is End - Start.
func (s Span) Duration() time.Duration { return s.End.Sub(s.Start) }

// MaxTraceBytes is the largest trace file read (an 8K-token run writes
// well under 1 MiB).
const MaxTraceBytes = 256 << 20

// ReadTraceFile reads an OTLP/JSON trace file (one ExportTraceServiceRequest
// per line) and returns its spans in file order. The file must be a regular
// file of at most MaxTraceBytes.
func ReadTraceFile(path string) ([]Span, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	spans, err := ReadTrace(safefile.LimitReader(f, MaxTraceBytes, "trace"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return spans, nil
}

// ReadTrace reads OTLP/JSON lines from r.
func ReadTrace(r io.Reader) ([]Span, error) {
	var out []Span
	err := eachSpan(context.Background(), r, MaxTraceBytes, func(_ int, s *tracepb.Span, service string) error {
		out = append(out, spanOf(s, service))
		return nil
	})
	return out, err
}

// eachSpan calls fn with every span of the OTLP/JSON lines of r (one
// ExportTraceServiceRequest per line), in order, with the line number and
// its resource's service name; it checks ctx between spans, and a line
// longer than maxLine is ErrTraceTooLarge. An error of fn ends the reading.
func eachSpan(ctx context.Context, r io.Reader, maxLine int, fn func(line int, s *tracepb.Span, service string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, maxLine)
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		req, err := unmarshalLine(line)
		if err != nil {
			return fmt.Errorf("line %d: not an OTLP/JSON trace request: %w", n, err)
		}
		for _, rs := range req.ResourceSpans {
			service := attrsOf(rs.GetResource().GetAttributes()).Str("service.name")
			for _, ss := range rs.ScopeSpans {
				for _, ps := range ss.Spans {
					if err := ctx.Err(); err != nil {
						return err
					}
					if err := fn(n, ps, service); err != nil {
						return err
					}
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("line %d: %w: longer than %s, the limit of one line (ovrun writes one export of spans per line)", n+1, ErrTraceTooLarge, safefile.Size(int64(maxLine)))
		}
		return err
	}
	return nil
}

func spanOf(s *tracepb.Span, service string) Span {
	sp := Span{
		TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
		ParentID: hex.EncodeToString(s.ParentSpanId), Service: service, Name: s.Name,
		Start: timeOf(s.StartTimeUnixNano), End: timeOf(s.EndTimeUnixNano),
		Attrs: attrsOf(s.Attributes), Message: s.GetStatus().GetMessage(),
	}
	switch s.GetStatus().GetCode() {
	case tracepb.Status_STATUS_CODE_OK:
		sp.Status = "ok"
	case tracepb.Status_STATUS_CODE_ERROR:
		sp.Status = "error"
	}
	for _, l := range s.Links {
		sp.Links = append(sp.Links, Link{TraceID: hex.EncodeToString(l.TraceId), SpanID: hex.EncodeToString(l.SpanId)})
	}
	for _, e := range s.Events {
		sp.Events = append(sp.Events, Event{Name: e.Name, Time: timeOf(e.TimeUnixNano), Attrs: attrsOf(e.Attributes)})
	}
	return sp
}

func timeOf(ns uint64) time.Time { return time.Unix(0, int64(ns)) }

func attrsOf(kvs []*commonpb.KeyValue) Attrs {
	a := Attrs{}
	for _, kv := range kvs {
		a[kv.Key] = valueOf(kv.Value)
	}
	return a
}

func valueOf(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_ArrayValue:
		out := make([]any, len(x.ArrayValue.GetValues()))
		for i, e := range x.ArrayValue.GetValues() {
			out[i] = valueOf(e)
		}
		return out
	case *commonpb.AnyValue_BytesValue:
		return x.BytesValue
	}
	return nil
}
