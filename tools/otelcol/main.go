// Command otelcol-ovrun is the OpenTelemetry Collector that ovrun's
// telemetry pipeline runs (dashboards/otelcol.yaml): OTLP in, batched,
// OTLP out to a trace store (Jaeger, Tempo), and span metrics out to
// Prometheus. It is what the OpenTelemetry Collector Builder would generate
// for this component list, written by hand so the build needs only `go
// build`. It lives in its own module: the Collector's OpenTelemetry and
// Prometheus pins are not ovrun's.
//
//	cd tools/otelcol && go build -o otelcol-ovrun .
//	otelcol-ovrun --config dashboards/otelcol.yaml
package main

import (
	"errors"
	"log"

	"github.com/open-telemetry/opentelemetry-collector-contrib/connector/spanmetricsconnector"
	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/prometheusexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/exporter/otlphttpexporter"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/batchprocessor"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

// Version is the Collector release every component comes from (contrib's
// at its patch release v0.165.1).
const Version = "0.165.0"

func main() {
	info := component.BuildInfo{
		Command:     "otelcol-ovrun",
		Description: "OpenTelemetry Collector for ovrun: OTLP, batch, span metrics, Prometheus",
		Version:     Version,
	}
	set := otelcol.CollectorSettings{
		BuildInfo: info,
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{
					envprovider.NewFactory(),
					fileprovider.NewFactory(),
				},
				DefaultScheme: "env",
			},
		},
		ProviderModules: map[string]string{
			"env":  "go.opentelemetry.io/collector/confmap/provider/envprovider v1.71.0",
			"file": "go.opentelemetry.io/collector/confmap/provider/fileprovider v1.71.0",
		},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		log.Fatalf("otelcol-ovrun: %v", err)
	}
}

// components is the factory set: the component types the configuration
// may name (otlp, batch, otlp_grpc, otlp_http, debug, span_metrics,
// prometheus, and the deprecated aliases otlp and spanmetrics).
func components() (otelcol.Factories, error) {
	f := otelcol.Factories{
		Extensions: map[component.Type]extension.Factory{},
		Telemetry:  otelconftelemetry.NewFactory(),
	}
	var errs [4]error
	f.Receivers, errs[0] = otelcol.MakeFactoryMap[receiver.Factory](
		otlpreceiver.NewFactory(),
	)
	f.Processors, errs[1] = otelcol.MakeFactoryMap[processor.Factory](
		batchprocessor.NewFactory(),
	)
	f.Exporters, errs[2] = otelcol.MakeFactoryMap[exporter.Factory](
		otlpexporter.NewFactory(),
		otlphttpexporter.NewFactory(),
		debugexporter.NewFactory(),
		prometheusexporter.NewFactory(),
	)
	f.Connectors, errs[3] = otelcol.MakeFactoryMap[connector.Factory](
		spanmetricsconnector.NewFactory(),
	)
	core := func(path string) string { return "go.opentelemetry.io/collector/" + path + " v" + Version }
	contrib := func(path string) string {
		return "github.com/open-telemetry/opentelemetry-collector-contrib/" + path + " v0.165.1"
	}
	f.ReceiverModules = map[component.Type]string{
		component.MustNewType("otlp"): core("receiver/otlpreceiver"),
	}
	f.ProcessorModules = map[component.Type]string{
		component.MustNewType("batch"): core("processor/batchprocessor"),
	}
	f.ExporterModules = map[component.Type]string{
		component.MustNewType("otlp_grpc"):  core("exporter/otlpexporter"),
		component.MustNewType("otlp_http"):  core("exporter/otlphttpexporter"),
		component.MustNewType("debug"):      core("exporter/debugexporter"),
		component.MustNewType("prometheus"): contrib("exporter/prometheusexporter"),
	}
	f.ConnectorModules = map[component.Type]string{
		component.MustNewType("span_metrics"): contrib("connector/spanmetricsconnector"),
	}
	return f, errors.Join(errs[:]...)
}
