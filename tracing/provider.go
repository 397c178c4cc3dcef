package tracing

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Options says where spans go. With neither set (and no OTLP variables in
// the environment) the provider records nothing anywhere.
type Options struct {
	// Endpoint is an OTLP gRPC collector, host:port (plain text on a
	// loopback host, TLS otherwise) or a URL (http:// for plain text).
	Endpoint string
	// TraceOut is a file that receives OTLP JSON, one
	// ExportTraceServiceRequest per line.
	TraceOut string
}

// MaxKVEvents bounds the kv events on a run span; the provider allows at
// least this many events per span.
const MaxKVEvents = 512

// otlpEnv are the standard variables that turn on OTLP export without a flag.
var otlpEnv = []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"}

// OTLPFromEnv reports whether a standard OTLP endpoint variable is set.
func OTLPFromEnv() bool {
	for _, k := range otlpEnv {
		if os.Getenv(k) != "" {
			return true
		}
	}
	return false
}

// NewProvider builds a tracer provider for service that exports to what
// opts and the OTEL_EXPORTER_OTLP_* variables name. shutdown flushes every
// exporter and returns their errors joined, export failures included.
func NewProvider(ctx context.Context, service string, opts Options) (*sdktrace.TracerProvider, func(context.Context) error, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", service)))
	if err != nil {
		return nil, nil, fmt.Errorf("trace resource: %w", err)
	}
	limits := sdktrace.NewSpanLimits()
	if limits.EventCountLimit >= 0 && limits.EventCountLimit < MaxKVEvents+16 {
		limits.EventCountLimit = MaxKVEvents + 16
	}
	popts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithRawSpanLimits(limits)}
	var exporters []*capture
	if opts.Endpoint != "" || OTLPFromEnv() {
		e, err := newOTLP(ctx, opts.Endpoint)
		if err != nil {
			return nil, nil, err
		}
		exporters = append(exporters, &capture{SpanExporter: e, what: "otlp export"})
	}
	if opts.TraceOut != "" {
		e, err := NewFileExporter(opts.TraceOut)
		if err != nil {
			for _, c := range exporters {
				_ = c.Shutdown(ctx)
			}
			return nil, nil, err
		}
		exporters = append(exporters, &capture{SpanExporter: e, what: "trace file " + opts.TraceOut})
	}
	for _, e := range exporters {
		popts = append(popts, sdktrace.WithBatcher(e))
	}
	tp := sdktrace.NewTracerProvider(popts...)
	shutdown := func(ctx context.Context) error {
		errs := []error{tp.Shutdown(ctx)}
		for _, e := range exporters {
			errs = append(errs, e.err())
		}
		return errors.Join(errs...)
	}
	return tp, shutdown, nil
}

// newOTLP is the gRPC exporter. With endpoint empty it reads the standard
// variables itself. Retries are bounded so a missing collector costs
// seconds, not the exporter's default minute.
func newOTLP(ctx context.Context, endpoint string) (sdktrace.SpanExporter, error) {
	o := []otlptracegrpc.Option{otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{
		Enabled: true, InitialInterval: 200 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: 5 * time.Second,
	})}
	switch {
	case strings.Contains(endpoint, "://"):
		o = append(o, otlptracegrpc.WithEndpointURL(endpoint))
	case endpoint != "":
		o = append(o, otlptracegrpc.WithEndpoint(endpoint))
		if isLoopback(endpoint) {
			o = append(o, otlptracegrpc.WithInsecure())
		}
	}
	e, err := otlptracegrpc.New(ctx, o...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	return e, nil
}

func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// capture keeps an exporter's errors: the batch processor hands export
// failures to the global handler, and shutdown should return them.
type capture struct {
	sdktrace.SpanExporter
	what string
	mu   sync.Mutex
	errs []error
}

func (c *capture) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.SpanExporter.ExportSpans(ctx, spans)
	c.keep(err)
	return err
}

func (c *capture) Shutdown(ctx context.Context) error {
	if err := c.SpanExporter.Shutdown(ctx); err != nil {
		return fmt.Errorf("%s: %w", c.what, err)
	}
	return nil
}

func (c *capture) keep(err error) {
	if err == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

// err is the first failure, once: later ones usually repeat it.
func (c *capture) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w", c.what, c.errs[0])
}
