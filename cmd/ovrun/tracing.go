package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/felixge/fgprof"
	"github.com/urfave/cli/v2"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/runtime"
	"github.com/ovtoolkit/ovrun/tracing"
)

// Flags that observe a run: its trace (OTLP, file) and a profile of ovrun.
var (
	otlpEndpointFlag = &cli.StringFlag{Name: "otlp-endpoint", EnvVars: []string{"OVRUN_OTLP_ENDPOINT"},
		Usage: "send the run's trace to the OTLP gRPC collector at `HOST:PORT` (Jaeger: 127.0.0.1:4317; plain text on loopback); OTEL_EXPORTER_OTLP_ENDPOINT works too"}
	traceOutFlag = &cli.StringFlag{Name: "trace-out",
		Usage: "write the run's trace to `FILE` as OTLP JSON, one request per line (draw it with ovrun timeline)"}
	profileOutFlag = &cli.StringFlag{Name: "profile-out",
		Usage: "write a wall-clock profile of ovrun itself to `FILE` (pprof format; go tool pprof FILE)"}
)

var traceFlags = []cli.Flag{otlpEndpointFlag, traceOutFlag, profileOutFlag}

// flushTimeout bounds the export at exit, Ctrl-C included.
const flushTimeout = 10 * time.Second

// observer is what the trace flags started for one run.
type observer struct {
	ctx         context.Context
	tp          *sdktrace.TracerProvider
	shutdown    func(context.Context) error
	profile     *safefile.File
	stopProfile func() error
	stderr      io.Writer

	mu      sync.Mutex
	handled []error // export errors the SDK reports out of band
}

// startObserver starts the profile and the tracer provider the flags ask
// for. A bad path fails here, before the run.
func startObserver(c *cli.Context) (*observer, error) {
	o := &observer{ctx: c.Context, stderr: c.App.ErrWriter}
	if o.stderr == nil {
		o.stderr = os.Stderr
	}
	if p := profileOutFlag.Get(c); p != "" {
		f, err := safefile.Create(p)
		if err != nil {
			return nil, fmt.Errorf("--profile-out: %w", err)
		}
		o.profile, o.stopProfile = f, fgprof.Start(f, fgprof.FormatPprof)
	}
	opts := tracing.Options{Endpoint: otlpEndpointFlag.Get(c), TraceOut: traceOutFlag.Get(c)}
	if opts.Endpoint != "" || opts.TraceOut != "" || tracing.OTLPFromEnv() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			o.mu.Lock()
			defer o.mu.Unlock()
			o.handled = append(o.handled, err)
		}))
		tp, shutdown, err := tracing.NewProvider(c.Context, tracing.ServiceName, opts)
		if err != nil {
			o.finishProfile()
			return nil, err
		}
		o.tp, o.shutdown = tp, shutdown
	}
	return o, nil
}

// finish emits the run's spans from its summary (nil when the run never
// started), flushes them and stops the profile. It runs after success,
// failure and Ctrl-C alike; what goes wrong here is reported on one line
// and never replaces the run's own outcome.
// emit adds the spans of one run that started at start (a served
// request's) without flushing; finish flushes.
func (o *observer) emit(s *runtime.Summary, start time.Time) {
	if o.tp != nil {
		runtime.EmitSpans(context.WithoutCancel(o.ctx), o.tp.Tracer(tracing.ScopeName), s, start)
	}
}

func (o *observer) finish(s *runtime.Summary) {
	if o.tp != nil {
		// After Ctrl-C the flush still runs (a second Ctrl-C exits at once);
		// after a finished run, a first Ctrl-C stops the flush.
		base := o.ctx
		if base.Err() != nil {
			base = context.WithoutCancel(base)
		}
		ctx, cancel := context.WithTimeout(base, flushTimeout)
		defer cancel()
		runtime.EmitSpans(ctx, o.tp.Tracer(tracing.ScopeName), s, processStart)
		err := o.shutdown(ctx)
		if err == nil {
			o.mu.Lock()
			if len(o.handled) > 0 {
				err = o.handled[0]
			}
			o.mu.Unlock()
		}
		if err != nil {
			fmt.Fprintln(o.stderr, "ovrun: warning: trace export:", cliutil.OneLine(err))
		}
	}
	o.finishProfile()
}

func (o *observer) finishProfile() {
	if o.profile == nil {
		return
	}
	err := o.stopProfile()
	if err == nil {
		err = o.profile.Commit()
	}
	o.profile.Abort()
	if err != nil {
		fmt.Fprintln(o.stderr, "ovrun: warning: --profile-out:", cliutil.OneLine(err))
	}
	o.profile = nil
}
