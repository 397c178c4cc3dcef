package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/tracing"
)

// The telemetry pipeline of docs/fleet.md, end to end on loopback: two
// ovrun serve processes (continuous batching, and a sequence per request on
// lazily compiled rungs) send their spans to the OpenTelemetry Collector of
// dashboards/otelcol.yaml, which forwards them to Jaeger and turns them into
// span metrics; Prometheus, with dashboards/prometheus.yml, scrapes both
// servers, the span metrics and the Collector's own metrics. Every request
// trace must reach Jaeger, and every PromQL expression of every Grafana
// dashboard in dashboards/ must return a series with a value: a panel that
// would show nothing fails the test.
func TestCollectorPipeline(t *testing.T) {
	otelcol, prom := collectorTools(t)
	j := startJaeger(t)
	c := startCollector(t, otelcol, j.otlp)
	g := testenv.SmolLM2(t)

	// The batched server answers the requests most panels plot; the
	// other one decodes each request on its own ladder, compiling rung 128
	// only when a sequence reaches it (lazy, a graph per rung), so a
	// request crosses a boundary that waits: the boundary-wait and
	// compile panels have something to show.
	_, batched, blines := startServe(t, nil, "--model", g, "--precision", "f32", "--ladder", "64,128,256",
		"--max-seqs", "4", "--batching", "on", "--otlp-endpoint", c.otlp)
	_, single, slines := startServe(t, nil, "--model", g, "--precision", "f32", "--ladder", "64,128",
		"--max-seqs", "2", "--batching", "off", "--policy", "lazy", "--graph-per-rung", "--otlp-endpoint", c.otlp)
	for _, lines := range []chan string{blines, slines} {
		go func() {
			for range lines {
			}
		}()
	}
	p := startPrometheus(t, prom, []string{hostOf(batched), hostOf(single)}, c)

	// Traffic only once Prometheus holds a first sample of every target,
	// so each counter's rate sees it grow.
	p.waitTargetsScraped(t, 4)
	long := "Explain in a few paragraphs how a compiler turns source code into machine code."
	chat := func(base, q string, max int) {
		body := fmt.Sprintf(`{"temperature":0,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, max, q)
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Errorf("chat %q on %s: %v", q, base, err)
			return
		}
		defer resp.Body.Close()
		var r struct {
			Choices []struct{ Message struct{ Content string } }
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK || len(r.Choices) != 1 {
			t.Errorf("chat %q on %s: %d %+v %v", q, base, resp.StatusCode, r, err)
		}
	}
	// The same prompt twice, one after the other: the second's prompt
	// comes from the prefix cache. Then three at once, batched, and two
	// on the other server, one long enough to cross rung 64 and wait for
	// 128's compile.
	chat(batched, colorsQuestion, 20)
	chat(batched, colorsQuestion, 20)
	var wg sync.WaitGroup
	for _, q := range []string{long, "What is the capital of France?", colorsQuestion} {
		wg.Go(func() { chat(batched, q, 40) })
	}
	wg.Go(func() { chat(single, long, 100) })
	wg.Go(func() { chat(single, colorsQuestion, 20) })
	wg.Wait()
	// The Collector makes a span-metrics series when the first span of its
	// kind arrives; one more request each, once Prometheus holds those
	// series, makes them grow, so their rates have a value.
	for _, name := range []string{tracing.SpanRequest, tracing.SpanRun} {
		p.waitSeries(t, fmt.Sprintf(`traces_span_metrics_calls_total{span_name=%q}`, name))
	}
	for _, base := range []string{batched, single} {
		wg.Go(func() { chat(base, "What is the capital of France?", 10) })
	}
	wg.Wait()
	const batchedRequests, singleRequests = 6, 3

	// Every request's trace came through the Collector into Jaeger: a
	// batched request is an ovrun.request trace, a sequence an ovrun.run.
	for op, want := range map[string]int{tracing.SpanRequest: batchedRequests, tracing.SpanRun: singleRequests} {
		ids := j.waitTraces(t, op, want)
		if len(ids) != want {
			t.Errorf("%d %s traces in Jaeger, want %d (one per request)", len(ids), op, want)
		}
	}

	// Every panel of every dashboard has a series, with a value.
	exprs := dashboardExprs(t, filepath.Join("..", "..", "dashboards"))
	if len(exprs) == 0 {
		t.Fatal("no PromQL expression in dashboards/*.json")
	}
	var spanMetrics bool
	for _, e := range exprs {
		spanMetrics = spanMetrics || strings.Contains(e.expr, "traces_span_metrics_")
	}
	if !spanMetrics {
		t.Error("no dashboard plots the Collector's span metrics (traces_span_metrics_*)")
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		failed := 0
		for i := range exprs {
			exprs[i].result, exprs[i].err = p.query(exprs[i].expr)
			if exprs[i].err == nil && exprs[i].result.finite() == 0 {
				exprs[i].err = fmt.Errorf("%d series, none with a finite value", len(exprs[i].result))
			}
			if exprs[i].err != nil {
				failed++
			}
		}
		if failed == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	for _, e := range exprs {
		if e.err != nil {
			t.Errorf("%s: panel %q: %s\n\t%v", e.file, e.panel, e.expr, e.err)
			continue
		}
		t.Logf("%s: panel %q: %d series, e.g. %s", e.file, e.panel, len(e.result), e.result)
	}

	// The Collector says what it passed on: spans in, spans to Jaeger.
	for _, q := range []string{`sum({__name__=~"otelcol_receiver_accepted_spans(_total)?"})`, `sum({__name__=~"otelcol_exporter_sent_spans(_total)?"})`} {
		r, err := p.query(q)
		if err != nil || r.finite() == 0 || r[0].value() <= 0 {
			t.Errorf("%s: %v %v, want a positive count", q, r, err)
		}
	}
}

// collectorTools finds the Collector and Prometheus binaries, or skips.
func collectorTools(t testing.TB) (otelcol, prom string) {
	t.Helper()
	otelcol = os.Getenv("OVRUN_OTELCOL")
	if otelcol == "" {
		t.Skip("OVRUN_OTELCOL is not set: run `make test` (it builds the Collector into .cache/bin/otelcol-ovrun and sets it)")
	}
	prom = os.Getenv("OVRUN_PROMETHEUS")
	if prom == "" {
		var err error
		if prom, err = exec.LookPath("prometheus"); err != nil {
			t.Skip("no prometheus on PATH: `make prometheus` installs Debian's package (or set OVRUN_PROMETHEUS)")
		}
	}
	return otelcol, prom
}

// syncBuffer is a process's output, written by exec's copier while a
// failing test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startProcess runs bin until the test ends (interrupt, then kill after
// 10 s) and waits up to a minute for ready.
func startProcess(tb testing.TB, name, bin string, env []string, ready func() bool, args ...string) {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		tb.Fatalf("%s (%s): %v", name, bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if tb.Failed() {
			tb.Logf("%s output:\n%s", name, log.String())
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-exited:
			exited <- err
			tb.Fatalf("%s exited before it was ready (%v):\n%s", name, err, log.String())
		default:
		}
		if ready() {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s not ready after a minute:\n%s", name, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func loopbackPorts(tb testing.TB, n int) []string {
	tb.Helper()
	var addrs []string
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return addrs
}

func hostOf(base string) string { return strings.TrimPrefix(base, "http://") }

// waitTraces polls Jaeger for the traces whose root is operation op until
// there are want of them, or their number has not grown for 5 s (at most
// 60 s: ovrun's batch span processor exports every 5 s, the Collector's
// batch within 200 ms).
func (j jaeger) waitTraces(t *testing.T, op string, want int) []string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	last, stable := -1, time.Now()
	for {
		var got jaegerTraces
		q := url.Values{"service": {tracing.ServiceName}, "operation": {op}, "limit": {"100"}, "lookback": {"1h"}}
		resp, err := http.Get(j.query + "/api/traces?" + q.Encode())
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
		}
		var ids []string
		for _, tr := range got.Data {
			for _, s := range tr.Spans {
				if s.OperationName == op && len(s.References) == 0 {
					ids = append(ids, tr.TraceID)
				}
			}
		}
		if len(ids) != last {
			last, stable = len(ids), time.Now()
		}
		if len(ids) >= want || (len(ids) > 0 && time.Since(stable) > 5*time.Second) || time.Now().After(deadline) {
			if len(ids) == 0 {
				t.Errorf("no %s trace of service %q in Jaeger after 60 s (last error %v)", op, tracing.ServiceName, err)
			}
			return ids
		}
		time.Sleep(250 * time.Millisecond)
	}
}

type collector struct {
	otlp      string // OTLP gRPC, host:port
	otlpHTTP  string // OTLP HTTP, host:port
	spans     string // the prometheus exporter (span metrics), host:port
	telemetry string // the Collector's own metrics, host:port
}

// startCollector runs the Collector on dashboards/otelcol.yaml, every
// address on a free loopback port through the file's variables, its spans
// forwarded to the OTLP gRPC endpoint traces.
func startCollector(tb testing.TB, bin, traces string) collector {
	tb.Helper()
	a := loopbackPorts(tb, 4)
	c := collector{otlp: a[0], otlpHTTP: a[1], spans: a[2], telemetry: a[3]}
	host, port, _ := net.SplitHostPort(c.telemetry)
	env := []string{
		"OTELCOL_OTLP_GRPC=" + c.otlp, "OTELCOL_OTLP_HTTP=" + c.otlpHTTP, "OTELCOL_PROMETHEUS=" + c.spans,
		"OTELCOL_TELEMETRY_HOST=" + host, "OTELCOL_TELEMETRY_PORT=" + port,
		"OTELCOL_TRACES_ENDPOINT=" + traces, "OTELCOL_SPANMETRICS_FLUSH=1s",
	}
	cfg, err := filepath.Abs(filepath.Join("..", "..", "dashboards", "otelcol.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	startProcess(tb, "otelcol", bin, env, func() bool {
		return dials(c.otlp) && dials(c.otlpHTTP) && httpOK("http://"+c.spans+"/metrics") && httpOK("http://"+c.telemetry+"/metrics")
	}, "--config", cfg)
	return c
}

type prometheusServer struct{ base string }

// startPrometheus runs Prometheus on dashboards/prometheus.yml, copied
// with a 1 s scrape interval beside target files that name the servers
// and the Collector.
func startPrometheus(tb testing.TB, bin string, servers []string, c collector) prometheusServer {
	tb.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "dashboards", "prometheus.yml"))
	if err != nil {
		tb.Fatal(err)
	}
	cfg := string(src)
	for _, k := range []string{"scrape_interval", "evaluation_interval"} {
		if !strings.Contains(cfg, k+": 15s") {
			tb.Fatalf("dashboards/prometheus.yml: no %q to shorten", k+": 15s")
		}
		cfg = strings.ReplaceAll(cfg, k+": 15s", k+": 1s")
	}
	dir := tb.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "prometheus-targets"), 0o755); err != nil {
		tb.Fatal(err)
	}
	files := map[string]string{
		"prometheus.yml":                      cfg,
		"prometheus-targets/ovrun.yml":        fmt.Sprintf("- targets: [%s]\n", strings.Join(servers, ", ")),
		"prometheus-targets/otelcol.yml":      fmt.Sprintf("- targets: [%s]\n", c.spans),
		"prometheus-targets/otelcol-self.yml": fmt.Sprintf("- targets: [%s]\n", c.telemetry),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	addr := loopbackPorts(tb, 1)[0]
	p := prometheusServer{base: "http://" + addr}
	startProcess(tb, "prometheus", bin, nil, func() bool { return httpOK(p.base + "/-/ready") },
		"--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	return p
}

// waitTargetsScraped waits until n targets are up and scraped at least
// twice since they came up.
func (p prometheusServer) waitTargetsScraped(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var r struct {
			Data struct {
				ActiveTargets []struct {
					ScrapeURL string `json:"scrapeUrl"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		var state []string
		up := 0
		resp, err := http.Get(p.base + "/api/v1/targets?state=active")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
		}
		for _, tg := range r.Data.ActiveTargets {
			if tg.Health == "up" {
				up++
			}
			state = append(state, fmt.Sprintf("%s %s %s", tg.ScrapeURL, tg.Health, tg.LastError))
		}
		if up >= n {
			// The next scrape of each is a second sample.
			time.Sleep(2500 * time.Millisecond)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus: %d of %d targets up after 60 s (%v): %s", up, n, err, strings.Join(state, "; "))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitSeries waits until an instant query of expr returns a series.
func (p prometheusServer) waitSeries(t *testing.T, expr string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := p.query(expr)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus: %s after 60 s: %v", expr, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// promSample is one series of an instant query.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s promSample) value() float64 {
	v, _ := s.Value[1].(string)
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return math.NaN()
	}
	return f
}

type promResult []promSample

// finite counts the series whose value is a number (not NaN, not ±Inf):
// what a Grafana panel can draw.
func (r promResult) finite() int {
	n := 0
	for _, s := range r {
		if v := s.value(); !math.IsNaN(v) && !math.IsInf(v, 0) {
			n++
		}
	}
	return n
}

func (r promResult) String() string {
	if len(r) == 0 {
		return "none"
	}
	return fmt.Sprintf("%v = %v", r[0].Metric, r[0].Value[1])
}

// query evaluates a PromQL expression now.
func (p prometheusServer) query(expr string) (promResult, error) {
	resp, err := http.Get(p.base + "/api/v1/query?" + url.Values{"query": {expr}}.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string     `json:"resultType"`
			Result     promResult `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("HTTP %d: %w", resp.StatusCode, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("result type %s, want vector", r.Data.ResultType)
	}
	if len(r.Data.Result) == 0 {
		return nil, errors.New("no series")
	}
	return r.Data.Result, nil
}

// dashExpr is one PromQL target of a dashboard panel, Grafana's variables
// replaced by values.
type dashExpr struct {
	file, panel, expr string
	result            promResult
	err               error
}

// grafanaPanel is the part of a panel (or row) the test reads.
type grafanaPanel struct {
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaVariable struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Query    any    `json:"query"`
	AllValue string `json:"allValue"`
	Include  bool   `json:"includeAll"`
}

// dashboardExprs collects the PromQL expression of every Prometheus
// target of every panel (rows' panels included) of dir/*.json.
func dashboardExprs(t *testing.T, dir string) []dashExpr {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s (%v)", dir, err)
	}
	var out []dashExpr
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels     []grafanaPanel `json:"panels"`
			Templating struct {
				List []grafanaVariable `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		vars := grafanaValues(d.Templating.List)
		var walk func([]grafanaPanel)
		walk = func(ps []grafanaPanel) {
			for _, p := range ps {
				walk(p.Panels)
				for _, tg := range p.Targets {
					ds := tg.Datasource
					if len(ds) == 0 || string(ds) == "null" {
						ds = p.Datasource
					}
					if tg.Expr == "" || datasourceType(ds, d.Templating.List) != "prometheus" {
						continue
					}
					expr, err := substitute(tg.Expr, vars)
					if err != nil {
						t.Errorf("%s: panel %q: %v", filepath.Base(f), p.Title, err)
						continue
					}
					out = append(out, dashExpr{file: filepath.Base(f), panel: p.Title, expr: expr})
				}
			}
		}
		walk(d.Panels)
	}
	return out
}

// datasourceType is a target's data source type: the object's type, or
// the type a datasource variable (${name}) is of.
func datasourceType(raw json.RawMessage, vars []grafanaVariable) string {
	var ds struct{ Type, UID string }
	if json.Unmarshal(raw, &ds) == nil && ds.Type != "" {
		return ds.Type
	}
	var name string
	if json.Unmarshal(raw, &name) == nil {
		name = strings.Trim(name, "${}")
		for _, v := range vars {
			if v.Name == name && v.Type == "datasource" {
				q, _ := v.Query.(string)
				return q
			}
		}
	}
	return ""
}

// grafanaValues gives every variable a value for the test's queries: the
// built-in intervals a window that holds several 1 s scrapes, a custom
// variable its "All" (or first) value, a query variable any value.
func grafanaValues(list []grafanaVariable) map[string]string {
	vals := map[string]string{
		"__rate_interval": "1m", "__interval": "15s", "interval": "15s", "__interval_ms": "15000",
		"__range": "5m", "__range_s": "300", "__range_ms": "300000",
	}
	for _, v := range list {
		q, _ := v.Query.(string)
		switch v.Type {
		case "custom", "interval":
			opts := strings.Split(q, ",")
			switch {
			case v.Include && v.AllValue != "":
				vals[v.Name] = v.AllValue
			case v.Include:
				vals[v.Name] = strings.Join(opts, "|")
			default:
				vals[v.Name] = strings.TrimSpace(opts[0])
			}
		case "constant", "textbox":
			vals[v.Name] = q
		case "query":
			vals[v.Name] = ".*"
		}
	}
	return vals
}

var grafanaVar = regexp.MustCompile(`\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)\]\]|\$(\w+)`)

// substitute replaces Grafana's $name, ${name} and [[name]] in expr.
func substitute(expr string, vals map[string]string) (string, error) {
	var unknown []string
	out := grafanaVar.ReplaceAllStringFunc(expr, func(m string) string {
		sub := grafanaVar.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		v, ok := vals[name]
		if !ok {
			unknown = append(unknown, name)
			return m
		}
		return v
	})
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return "", fmt.Errorf("unknown Grafana variable %v in %s", unknown, expr)
	}
	return out, nil
}
