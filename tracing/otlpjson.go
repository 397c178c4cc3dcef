package tracing

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// This file is the OTLP/JSON encoding of a trace file line: the protobuf
// JSON mapping of ExportTraceServiceRequest, with the two departures the
// OTLP specification makes (trace and span ids in hex, enums as numbers),
// so the OpenTelemetry Collector's otlpjsonfile receiver reads it back.

// Span flag bits (opentelemetry.proto.trace.v1.SpanFlags).
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// request groups ended spans by resource and instrumentation scope.
func request(spans []sdktrace.ReadOnlySpan) *coltracepb.ExportTraceServiceRequest {
	req := &coltracepb.ExportTraceServiceRequest{}
	byRes := map[attribute.Distinct]*tracepb.ResourceSpans{}
	byScope := map[*tracepb.ResourceSpans]map[string]*tracepb.ScopeSpans{}
	for _, s := range spans {
		res := s.Resource()
		rk := res.Equivalent()
		rs, ok := byRes[rk]
		if !ok {
			rs = &tracepb.ResourceSpans{
				Resource:  &resourcepb.Resource{Attributes: keyValues(res.Attributes())},
				SchemaUrl: res.SchemaURL(),
			}
			byRes[rk] = rs
			byScope[rs] = map[string]*tracepb.ScopeSpans{}
			req.ResourceSpans = append(req.ResourceSpans, rs)
		}
		sc := s.InstrumentationScope()
		sk := sc.Name + "\x00" + sc.Version + "\x00" + sc.SchemaURL + "\x00" + sc.Attributes.Encoded(attribute.DefaultEncoder())
		ss, ok := byScope[rs][sk]
		if !ok {
			ss = &tracepb.ScopeSpans{
				Scope: &commonpb.InstrumentationScope{
					Name: sc.Name, Version: sc.Version, Attributes: keyValues(sc.Attributes.ToSlice()),
				},
				SchemaUrl: sc.SchemaURL,
			}
			byScope[rs][sk] = ss
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		ss.Spans = append(ss.Spans, spanProto(s))
	}
	return req
}

func spanProto(s sdktrace.ReadOnlySpan) *tracepb.Span {
	sc, parent := s.SpanContext(), s.Parent()
	tid, sid := sc.TraceID(), sc.SpanID()
	p := &tracepb.Span{
		TraceId:                tid[:],
		SpanId:                 sid[:],
		TraceState:             sc.TraceState().String(),
		Flags:                  spanFlags(sc.TraceFlags(), parent.IsRemote()),
		Name:                   s.Name(),
		Kind:                   tracepb.Span_SpanKind(s.SpanKind()), // same numbering
		StartTimeUnixNano:      unixNano(s.StartTime().UnixNano()),
		EndTimeUnixNano:        unixNano(s.EndTime().UnixNano()),
		Attributes:             keyValues(s.Attributes()),
		DroppedAttributesCount: uint32(s.DroppedAttributes()),
		DroppedEventsCount:     uint32(s.DroppedEvents()),
		DroppedLinksCount:      uint32(s.DroppedLinks()),
		Status:                 statusProto(s.Status()),
	}
	if parent.HasSpanID() {
		psid := parent.SpanID()
		p.ParentSpanId = psid[:]
	}
	for _, e := range s.Events() {
		p.Events = append(p.Events, &tracepb.Span_Event{
			TimeUnixNano: unixNano(e.Time.UnixNano()), Name: e.Name,
			Attributes: keyValues(e.Attributes), DroppedAttributesCount: uint32(e.DroppedAttributeCount),
		})
	}
	for _, l := range s.Links() {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		p.Links = append(p.Links, &tracepb.Span_Link{
			TraceId: ltid[:], SpanId: lsid[:], TraceState: l.SpanContext.TraceState().String(),
			Attributes: keyValues(l.Attributes), DroppedAttributesCount: uint32(l.DroppedAttributeCount),
			Flags: spanFlags(l.SpanContext.TraceFlags(), l.SpanContext.IsRemote()),
		})
	}
	return p
}

func spanFlags(tf trace.TraceFlags, remote bool) uint32 {
	f := uint32(tf) | flagHasIsRemote
	if remote {
		f |= flagIsRemote
	}
	return f
}

func unixNano(n int64) uint64 {
	if n < 0 {
		return 0
	}
	return uint64(n)
}

func statusProto(s sdktrace.Status) *tracepb.Status {
	c := tracepb.Status_STATUS_CODE_UNSET
	switch s.Code {
	case codes.Ok:
		c = tracepb.Status_STATUS_CODE_OK
	case codes.Error:
		c = tracepb.Status_STATUS_CODE_ERROR
	}
	return &tracepb.Status{Code: c, Message: s.Description}
}

func keyValues(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, &commonpb.KeyValue{Key: string(kv.Key), Value: anyValue(kv.Value)})
	}
	return out
}

func anyValue(v attribute.Value) *commonpb.AnyValue {
	switch v.Type() {
	case attribute.BOOL:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	case attribute.INT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.FLOAT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
	case attribute.STRING:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.AsString()}}
	case attribute.BOOLSLICE:
		return array(v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		return array(v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		return array(v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		return array(v.AsStringSlice(), attribute.StringValue)
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.String()}}
}

func array[T any](xs []T, value func(T) attribute.Value) *commonpb.AnyValue {
	vs := make([]*commonpb.AnyValue, len(xs))
	for i, x := range xs {
		vs[i] = anyValue(value(x))
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}}
}

// idKeys are the byte fields OTLP/JSON writes in hex.
var idKeys = map[string]int{"traceId": 16, "spanId": 8, "parentSpanId": 8}

// marshalLine encodes req as one line of OTLP/JSON, newline included.
func marshalLine(req *coltracepb.ExportTraceServiceRequest) ([]byte, error) {
	b, err := protojson.MarshalOptions{UseEnumNumbers: true}.Marshal(req)
	if err != nil {
		return nil, err
	}
	v, err := decodeJSON(b)
	if err != nil {
		return nil, err
	}
	if err := recodeIDs(v, base64ToHex); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out) // sorted keys: lines diff well
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// unmarshalLine decodes one line of OTLP/JSON; ids may be hex (OTLP/JSON)
// or base64 (plain protobuf JSON). The line is decoded once, straight into
// the request: protojson reads the ids as base64, and hexIDs recovers those
// written in hex (a generic JSON tree of the line, to rewrite them first,
// took twenty times the line's size).
func unmarshalLine(line []byte) (*coltracepb.ExportTraceServiceRequest, error) {
	req := &coltracepb.ExportTraceServiceRequest{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(line, req); err != nil {
		return nil, err
	}
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				if err := hexIDs(&s.TraceId, &s.SpanId, &s.ParentSpanId); err != nil {
					return nil, err
				}
				for _, l := range s.Links {
					if err := hexIDs(&l.TraceId, &l.SpanId, nil); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	return req, nil
}

// hexIDs turns a trace id, span id and parent span id that protojson read
// as base64 back into the bytes their hex text names. Hex digits are base64
// digits, so the hex of n bytes (2n digits, a multiple of 4 for ids of 8
// and 16 bytes) reads as base64 of 3n/2 bytes, and encoding those again
// gives the hex text back exactly. An id of n bytes was base64 already; an
// empty one is absent.
func hexIDs(traceID, spanID, parentID *[]byte) error {
	for _, id := range []struct {
		b   *[]byte
		key string
		n   int
	}{{traceID, "traceId", 16}, {spanID, "spanId", 8}, {parentID, "parentSpanId", 8}} {
		if id.b == nil {
			continue
		}
		switch len(*id.b) {
		case 0, id.n:
			continue
		case 3 * id.n / 2:
			text := base64.StdEncoding.EncodeToString(*id.b)
			if b, err := hex.DecodeString(text); err == nil {
				*id.b = b
				continue
			}
		}
		return fmt.Errorf("%s reads as %d bytes: want %d bytes, in hex or base64", id.key, len(*id.b), id.n)
	}
	return nil
}

func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// recodeIDs rewrites every id field below v with f.
func recodeIDs(v any, f func(s string, n int) (string, error)) error {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if n, ok := idKeys[k]; ok {
				if s, ok := x.(string); ok {
					r, err := f(s, n)
					if err != nil {
						return fmt.Errorf("%s %q: %w", k, s, err)
					}
					v[k] = r
					continue
				}
			}
			if err := recodeIDs(x, f); err != nil {
				return err
			}
		}
	case []any:
		for _, x := range v {
			if err := recodeIDs(x, f); err != nil {
				return err
			}
		}
	}
	return nil
}

func base64ToHex(s string, _ int) (string, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
