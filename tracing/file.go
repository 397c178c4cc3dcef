package tracing

import (
	"context"
	"errors"
	"fmt"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

// FileExporter writes spans to a file as OTLP/JSON, one
// ExportTraceServiceRequest per line per export call.
type FileExporter struct {
	mu   sync.Mutex
	path string
	f    *safefile.File
}

var _ sdktrace.SpanExporter = (*FileExporter)(nil)

// NewFileExporter starts writing path, through safefile: the spans go to a
// temporary file beside it, which Shutdown puts in place ("-" writes to
// standard output).
func NewFileExporter(path string) (*FileExporter, error) {
	f, err := safefile.Create(path)
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

// Shutdown syncs the file and puts it in place.
func (e *FileExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return nil
	}
	err := e.f.Commit()
	e.f = nil
	return err
}
