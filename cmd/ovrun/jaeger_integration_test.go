package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/tracing"
)

// jaegerConfig is a Jaeger v2 (OpenTelemetry Collector) configuration: the
// all-in-one set-up with in-memory storage, every port given, nothing on
// the default ports so parallel runs and a developer's Jaeger don't clash.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:%[1]d
  jaeger_query:
    enable_tracing: false
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:%[2]d
    grpc:
      endpoint: 127.0.0.1:%[3]d
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 1000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%[4]d
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

type jaeger struct {
	otlp  string // host:port of OTLP gRPC
	query string // base URL of the query API
}

// startJaeger runs $OVRUN_JAEGER (jaegerConfig) on free loopback ports
// until the test or benchmark ends.
func startJaeger(tb testing.TB) jaeger {
	tb.Helper()
	bin := os.Getenv("OVRUN_JAEGER")
	if bin == "" {
		tb.Skip("OVRUN_JAEGER is not set: run `make test` (it builds Jaeger into .cache/bin/jaeger and sets it)")
	}
	a := loopbackPorts(tb, 4)
	port := func(addr string) int { _, p, _ := net.SplitHostPort(addr); n, _ := strconv.Atoi(p); return n }
	cfg := filepath.Join(tb.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, port(a[0]), port(a[1]), port(a[2]), port(a[3])), 0o644); err != nil {
		tb.Fatal(err)
	}
	j := jaeger{otlp: a[3], query: "http://" + a[1]}
	startProcess(tb, "jaeger", bin, nil, func() bool {
		return httpOK("http://"+a[0]+"/status") && httpOK(j.query+"/api/services") && dials(j.otlp)
	}, "--config", cfg)
	return j
}

func httpOK(url string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func dials(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Jaeger's query API, the parts the test reads.
type jaegerTraces struct {
	Data []struct {
		TraceID string `json:"traceID"`
		Spans   []struct {
			SpanID        string `json:"spanID"`
			OperationName string `json:"operationName"`
			References    []struct {
				RefType string `json:"refType"`
				SpanID  string `json:"spanID"`
			} `json:"references"`
			Tags []struct {
				Key   string `json:"key"`
				Value any    `json:"value"`
			} `json:"tags"`
		} `json:"spans"`
	} `json:"data"`
}

func TestJaegerReceivesRunTrace(t *testing.T) {
	j := startJaeger(t)
	tiny := testenv.Synth(t, "tiny", "F32")
	js := filepath.Join(t.TempDir(), "run.json")
	// 8 + 100 tokens cross both boundaries of 32,64,128.
	_, stderr, code := ovrun(t, nil, "run", "--model", tiny, "--ladder", "32,64,128", "--policy", "grow-one-ahead",
		"--prompt-tokens", "8", "--decode-tokens", "100", "--json", js, "-q", "--otlp-endpoint", j.otlp)
	if code != 0 || stderr != "" {
		t.Fatalf("ovrun run: exit %d, stderr %q", code, stderr)
	}
	var sum struct {
		Compiles []struct {
			Capacity int    `json:"capacity"`
			Kind     string `json:"kind"`
		} `json:"compiles"`
		Rungs []struct {
			WaitS float64 `json:"wait_s"`
		} `json:"rungs"`
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	waits := 0
	for _, r := range sum.Rungs {
		if r.WaitS > 0 {
			waits++
		}
	}
	want := map[string]int{tracing.SpanRun: 1, tracing.SpanCompile: len(sum.Compiles), tracing.SpanPrefill: 1,
		tracing.SpanDecode: 3, tracing.SpanMigrate: 2, tracing.SpanBoundaryWait: waits}
	total := 0
	for _, n := range want {
		total += n
	}

	// The batch processor flushed before ovrun exited; Jaeger's own
	// pipeline may take a moment to store it. Poll until the trace has
	// every span, or its span count has stopped growing for 3 s.
	var got jaegerTraces
	deadline := time.Now().Add(30 * time.Second)
	last, stable := -1, time.Now()
	for {
		got = jaegerTraces{}
		resp, err := http.Get(j.query + "/api/traces?service=" + tracing.ServiceName + "&limit=20")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
		}
		n := 0
		if err == nil && len(got.Data) > 0 {
			n = len(got.Data[0].Spans)
		}
		if n != last {
			last, stable = n, time.Now()
		}
		if n >= total || (n > 0 && time.Since(stable) > 3*time.Second) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no trace of service %q in Jaeger after 30 s (last error %v)", tracing.ServiceName, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(got.Data) != 1 {
		t.Fatalf("%d traces in Jaeger, want 1", len(got.Data))
	}
	spans := got.Data[0].Spans
	count := map[string]int{}
	rootID := ""
	for _, s := range spans {
		count[s.OperationName]++
		if s.OperationName == tracing.SpanRun {
			rootID = s.SpanID
		}
	}
	for name, n := range want {
		if count[name] != n {
			t.Errorf("%d %q spans in Jaeger, want %d", count[name], name, n)
		}
	}
	if len(spans) != total {
		t.Errorf("%d spans in Jaeger, want %d: %v", len(spans), total, count)
	}
	capacities := map[string][]int{}
	for _, s := range spans {
		tags := map[string]any{}
		for _, tg := range s.Tags {
			tags[tg.Key] = tg.Value
		}
		if s.OperationName == tracing.SpanRun {
			if len(s.References) != 0 {
				t.Errorf("run span has references %v", s.References)
			}
			if tags[string(tracing.AttrPolicy)] != "grow-one-ahead" {
				t.Errorf("run span policy tag %v", tags[string(tracing.AttrPolicy)])
			}
			continue
		}
		if len(s.References) != 1 || s.References[0].RefType != "CHILD_OF" || s.References[0].SpanID != rootID {
			t.Errorf("%s span references %v, want CHILD_OF the run span %s", s.OperationName, s.References, rootID)
		}
		key := string(tracing.AttrCapacity)
		if s.OperationName == tracing.SpanMigrate {
			key = string(tracing.AttrToCapacity)
		}
		if c, ok := tags[key].(float64); ok {
			capacities[s.OperationName] = append(capacities[s.OperationName], int(c))
		} else if s.OperationName != tracing.SpanPrefill {
			t.Errorf("%s span has no numeric %s tag: %v", s.OperationName, key, tags)
		}
	}
	for name, w := range map[string][]int{tracing.SpanDecode: {32, 64, 128}, tracing.SpanMigrate: {64, 128}} {
		sort.Ints(capacities[name])
		if fmt.Sprint(capacities[name]) != fmt.Sprint(w) {
			t.Errorf("%s capacities %v, want %v", name, capacities[name], w)
		}
	}
	var wantCompiles, gotCompiles []int
	for _, c := range sum.Compiles {
		wantCompiles = append(wantCompiles, c.Capacity)
	}
	sort.Ints(wantCompiles)
	gotCompiles = capacities[tracing.SpanCompile]
	sort.Ints(gotCompiles)
	if fmt.Sprint(gotCompiles) != fmt.Sprint(wantCompiles) {
		t.Errorf("compile capacities %v, want %v (the summary's)", gotCompiles, wantCompiles)
	}
	if !strings.Contains(fmt.Sprint(wantCompiles), "128") {
		t.Errorf("no compile of rung 128 in the summary: %v", wantCompiles)
	}
}
