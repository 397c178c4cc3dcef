package tracing

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewProviderWithoutExportersRecordsNothing(t *testing.T) {
	for _, k := range otlpEnv {
		t.Setenv(k, "")
	}
	tp, shutdown, err := NewProvider(context.Background(), ServiceName, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, s := tp.Tracer(ScopeName).Start(context.Background(), SpanRun)
	s.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestNewProviderBadTraceOut(t *testing.T) {
	_, _, err := NewProvider(context.Background(), ServiceName, Options{TraceOut: filepath.Join(t.TempDir(), "no", "such", "dir", "t.jsonl")})
	if err == nil || !strings.Contains(err.Error(), "trace file") {
		t.Fatalf("err = %v, want a trace file error", err)
	}
}

// An unreachable collector is an error from shutdown, not a silent loss;
// the file written beside it is complete all the same.
func TestShutdownReportsExportFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the exporter's bounded retries (about 5 s)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens here now
	path := filepath.Join(t.TempDir(), "t.jsonl")
	tp, shutdown, err := NewProvider(context.Background(), ServiceName, Options{Endpoint: addr, TraceOut: path})
	if err != nil {
		t.Fatal(err)
	}
	_, s := tp.Tracer(ScopeName).Start(context.Background(), SpanRun)
	s.End()
	err = shutdown(context.Background())
	if err == nil || !strings.Contains(err.Error(), "otlp export") {
		t.Fatalf("shutdown err = %v, want an otlp export error", err)
	}
	if strings.Contains(err.Error(), "trace file") {
		t.Errorf("the file exporter failed too: %v", err)
	}
	spans, err := ReadTraceFile(path)
	if err != nil || len(spans) != 1 {
		t.Errorf("trace file: %d spans, err %v", len(spans), err)
	}
}

func TestIsLoopback(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"127.0.0.1:4317", true}, {"localhost:4317", true}, {"[::1]:4317", true},
		{"10.0.0.1:4317", false}, {"collector.example:4317", false},
	}
	for _, tc := range tests {
		if got := isLoopback(tc.in); got != tc.want {
			t.Errorf("isLoopback(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
