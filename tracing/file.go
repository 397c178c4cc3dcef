package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// FileExporter writes spans to a file as OTLP/JSON, one
// ExportTraceServiceRequest per line per export call.
type FileExporter struct {
	mu   sync.Mutex
	path string
	f    *os.File
}

var _ sdktrace.SpanExporter = (*FileExporter)(nil)

// NewFileExporter creates (or truncates) path.
func NewFileExporter(path string) (*FileExporter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("trace file: %w", err)
	}
	return &FileExporter{path: path, f: f}, nil
}

// ExportSpans appends one line holding spans.
func (e *FileExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	line, err := marshalLine(request(spans))
	if err != nil {
		return fmt.Errorf("encode spans: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return errors.New("trace file is closed")
	}
	_, err = e.f.Write(line)
	return err
}

// Shutdown syncs and closes the file.
func (e *FileExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return nil
	}
	err := errors.Join(e.f.Sync(), e.f.Close())
	e.f = nil
	return err
}
