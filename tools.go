//go:build tools

// Package tools pins the module's dependencies before their first use.
package tools

import (
	_ "github.com/felixge/fgprof"
	_ "github.com/google/pprof/profile"
	_ "github.com/urfave/cli/v2"
	_ "go.opentelemetry.io/otel"
	_ "go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	_ "go.opentelemetry.io/otel/sdk/trace"
	_ "go.uber.org/goleak"
)
