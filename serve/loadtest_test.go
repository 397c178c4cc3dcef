package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ovtoolkit/ovrun/engine"
	"github.com/ovtoolkit/ovrun/internal/traffic"
)

// meteredEngine is a fakeEngine that also reports the series a kept
// ladder does: a prompt longer than 5 tokens costs a 0.25 s boundary wait
// and a 1.5 s compile launched by deadline. Before any request it shows a
// 3 s compile, the first rung's, which a load test must not count.
type meteredEngine struct {
	*fakeEngine
	boundary prometheus.Histogram
	compileS *prometheus.CounterVec
	compiles *prometheus.CounterVec
	launches *prometheus.CounterVec

	mu      sync.Mutex
	prompts [][]int64
}

func newMeteredEngine(delay time.Duration) *meteredEngine {
	m := &meteredEngine{fakeEngine: &fakeEngine{tok: smolTok, delay: delay, maxCtx: 256},
		boundary: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ovrun_boundary_wait_seconds", Help: "h"}),
		compileS: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovrun_compile_seconds_total", Help: "h"}, []string{"kind"}),
		compiles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovrun_compiles_total", Help: "h"}, []string{"kind", "capacity", "outcome"}),
		launches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovrun_compile_launches_total", Help: "h"}, []string{"reason"})}
	m.ready.Store(true)
	m.compileS.WithLabelValues("decode").Add(3)
	m.compiles.WithLabelValues("decode", "16", "ok").Inc()
	m.launches.WithLabelValues("admission").Add(0)
	return m
}

func (m *meteredEngine) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.boundary, m.compileS, m.compiles, m.launches}
}

func (m *meteredEngine) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

func (m *meteredEngine) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

func (m *meteredEngine) Generate(ctx context.Context, r engine.Request) (engine.Finish, error) {
	m.mu.Lock()
	m.prompts = append(m.prompts, slices.Clone(r.Prompt))
	m.mu.Unlock()
	if len(r.Prompt) > 5 {
		m.boundary.Observe(0.25)
		m.compileS.WithLabelValues("decode").Add(1.5)
		m.compiles.WithLabelValues("decode", "32", "ok").Inc()
		m.launches.WithLabelValues("deadline").Inc()
	}
	return m.fakeEngine.Generate(ctx, r)
}

// bodies records the JSON bodies of the requests a handler is sent.
type bodies struct {
	mu   sync.Mutex
	seen []map[string]any
}

func (b *bodies) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			raw, _ := io.ReadAll(r.Body)
			var v map[string]any
			json.Unmarshal(raw, &v)
			b.mu.Lock()
			b.seen = append(b.seen, v)
			b.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(raw))
		}
		h.ServeHTTP(w, r)
	})
}

// TestLoadTestOpenLoop sends a planned load: the requests traffic.Draw
// draws from the seed, at their times, with prompts of exactly the drawn
// lengths as token ids, asking for ignore_eos; the result counts the
// server's waits and compiles over the test, not the compile before it.
func TestLoadTestOpenLoop(t *testing.T) {
	loadSmol(t)
	eng := newMeteredEngine(time.Millisecond)
	s, err := New(Config{Engine: eng, Tokenizer: smolTok, Template: smolTpl, ModelName: "smollm2", MaxSeqs: 2, MaxQueue: 16, DefaultMaxTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	var seen bodies
	ts := httptest.NewServer(seen.wrap(s.Handler()))
	t.Cleanup(func() {
		ts.Close()
		http.DefaultClient.CloseIdleConnections()
	})
	cfg := LoadConfig{URL: ts.URL, Requests: 12, Rate: 100, PromptTokens: []int{3, 7}, MaxTok: []int{2, 4}, IgnoreEOS: true, Seed: 5, Timeout: time.Minute}
	res, err := RunLoad(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := traffic.Draw(traffic.Mix{Rate: 100, Requests: 12, Prompt: []int{3, 7}, Answer: []int{2, 4}, Seed: 5})
	var long, tokens int
	var lengths, sent []int
	for _, r := range want {
		lengths = append(lengths, r.Prompt)
		tokens += r.Answer
		if r.Prompt > 5 {
			long++
		}
	}
	for _, p := range eng.prompts {
		sent = append(sent, len(p))
		for _, id := range p {
			if id < traffic.MinID || id >= traffic.MaxID {
				t.Fatalf("prompt id %d outside [%d, %d)", id, traffic.MinID, traffic.MaxID)
			}
		}
	}
	slices.Sort(lengths)
	slices.Sort(sent)
	if !slices.Equal(lengths, sent) {
		t.Errorf("prompt lengths sent %v, drawn %v", sent, lengths)
	}
	if res.Requests != 12 || res.Errors != 0 || res.Tokens != tokens || res.ShortAnswers != 0 || res.Clients != 0 || res.Rate != 100 {
		t.Errorf("result %+v; want 12 requests answered in full, %d tokens", res, tokens)
	}
	if last := want[len(want)-1].AtS; res.WallS < last {
		t.Errorf("the test took %.3f s; its last request was due at %.3f s", res.WallS, last)
	}
	if !res.Metrics || res.BoundaryWaits != long || !near(res.BoundaryWaitS, 0.25*float64(long)) || res.Compiles != long ||
		!near(res.CompileS, 1.5*float64(long)) || res.Launches["deadline"] != long || res.Launches["admission"] != 0 || res.ServerTTFTMeanS <= 0 {
		t.Errorf("server figures %+v; want %d boundary waits of 0.25 s and compiles of 1.5 s", res, long)
	}
	for _, b := range seen.seen {
		if b["ignore_eos"] != true || b["stream"] != true {
			t.Fatalf("a request without ignore_eos or stream: %v", b)
		}
		if _, ok := b["prompt"].([]any); !ok {
			t.Fatalf("a request whose prompt is not token ids: %v", b)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// TestLoadTestRefused: requests the server's queue turns away are errors
// counted as refused.
func TestLoadTestRefused(t *testing.T) {
	ts, _ := newServer(t, 1, 0, 20*time.Millisecond)
	res, err := RunLoad(context.Background(), LoadConfig{URL: ts.URL, Clients: 3, Requests: 3, Prompts: []string{"hi"}, MaxTok: []int{8}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Refused == 0 || res.Errors != res.Refused || !strings.Contains(res.ErrorSample, "429") {
		t.Errorf("3 requests at once on one slot and no queue: %+v", res)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  LoadConfig
		want string
	}{
		{"negative rate", LoadConfig{Rate: -1, Requests: 1, Prompts: []string{"x"}, MaxTok: []int{1}}, "rate -1"},
		{"zero prompt length", LoadConfig{Clients: 1, Requests: 1, PromptTokens: []int{0}, MaxTok: []int{1}}, "prompt length 0"},
		{"no clients", LoadConfig{Requests: 1, Prompts: []string{"x"}, MaxTok: []int{1}}, "clients 0"},
		{"no prompts", LoadConfig{Clients: 1, Requests: 1, MaxTok: []int{1}}, "no prompts"},
		{"not loopback", LoadConfig{URL: "http://10.0.0.1:8080", Clients: 1, Requests: 1, Prompts: []string{"x"}, MaxTok: []int{1}}, "only target this machine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.URL == "" {
				tc.cfg.URL = "http://127.0.0.1:1"
			}
			if _, err := RunLoad(context.Background(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestIgnoreEOSParsed: ignore_eos reaches the request's options.
func TestIgnoreEOSParsed(t *testing.T) {
	for _, tc := range []struct {
		body string
		want bool
	}{{`{"prompt":"x"}`, false}, {`{"prompt":"x","ignore_eos":true}`, true}, {`{"prompt":"x","ignore_eos":false}`, false}} {
		var req completionRequest
		if err := json.Unmarshal([]byte(tc.body), &req); err != nil {
			t.Fatal(err)
		}
		o, err := req.options(16)
		if err != nil || o.IgnoreEOS != tc.want {
			t.Errorf("%s: IgnoreEOS %v (%v), want %v", tc.body, o.IgnoreEOS, err, tc.want)
		}
	}
	var bad completionRequest
	if err := json.Unmarshal([]byte(`{"prompt":"x","ignore_eos":"yes"}`), &bad); err == nil {
		t.Error(`ignore_eos "yes" was accepted`)
	}
}
