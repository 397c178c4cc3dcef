package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ovtoolkit/ovrun/chat"
	"github.com/ovtoolkit/ovrun/engine"
	"github.com/ovtoolkit/ovrun/internal/testpy"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/tokenizer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const answer = "The capital of France is Paris."

// fakeEngine answers every prompt with answer and an end-of-generation
// token, one token every delay.
type fakeEngine struct {
	tok       *tokenizer.Tokenizer
	delay     time.Duration
	maxCtx    int
	ready     atomic.Bool
	active    atomic.Int64
	peak      atomic.Int64
	cancelled atomic.Int64
	last      atomic.Pointer[engine.Request] // the latest request
}

func (f *fakeEngine) MaxContext() int { return f.maxCtx }
func (f *fakeEngine) Ready() bool     { return f.ready.Load() }

func (f *fakeEngine) Generate(ctx context.Context, r engine.Request) (engine.Finish, error) {
	f.last.Store(&r)
	n := f.active.Add(1)
	defer f.active.Add(-1)
	for p := f.peak.Load(); n > p && !f.peak.CompareAndSwap(p, n); p = f.peak.Load() {
	}
	ids := f.tok.Encode(answer, false)
	ids = append(ids, f.tok.EOS())
	fin := engine.Finish{Prompt: len(r.Prompt)}
	for _, id := range ids {
		if fin.Tokens == r.MaxTokens {
			fin.Reason = "length"
			return fin, nil
		}
		select {
		case <-ctx.Done():
			f.cancelled.Add(1)
			return fin, ctx.Err()
		case <-time.After(f.delay):
		}
		fin.Tokens++
		if !r.Emit(id) {
			fin.Reason = "stop"
			return fin, nil
		}
	}
	fin.Reason = "stop"
	return fin, nil
}

var (
	tokOnce sync.Once
	smolTok *tokenizer.Tokenizer
	smolTpl *chat.Template
)

// loadSmol loads SmolLM2's tokenizer and chat template once.
func loadSmol(t testing.TB) {
	t.Helper()
	g := testpy.SmolLM2(t)
	tokOnce.Do(func() {
		ck, err := model.Load(g)
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Close()
		if smolTok, err = ck.Tokenizer(); err != nil {
			t.Fatal(err)
		}
		src, bos, eos, err := ck.ReadChatTemplate()
		if err != nil {
			t.Fatal(err)
		}
		if smolTpl, err = chat.Compile(src, bos, eos); err != nil {
			t.Fatal(err)
		}
	})
}

func newServer(t *testing.T, maxSeqs, maxQueue int, delay time.Duration) (*httptest.Server, *fakeEngine) {
	t.Helper()
	loadSmol(t)
	eng := &fakeEngine{tok: smolTok, delay: delay, maxCtx: 256}
	eng.ready.Store(true)
	s, err := New(Config{Engine: eng, Tokenizer: smolTok, Template: smolTpl, ModelName: "smollm2",
		MaxSeqs: maxSeqs, MaxQueue: maxQueue, DefaultMaxTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.Close()
		http.DefaultClient.CloseIdleConnections()
	})
	return ts, eng
}

func post(t *testing.T, url string, body any) (*http.Response, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

func TestCompletionAndChat(t *testing.T) {
	ts, _ := newServer(t, 2, 2, 0)
	resp, body := post(t, ts.URL+"/v1/completions", map[string]any{"model": "smollm2", "prompt": "Q: capital of France?\nA:"})
	var c completionResponse
	if resp.StatusCode != 200 || json.Unmarshal(body, &c) != nil || c.Choices[0].Text != answer || *c.Choices[0].FinishReason != "stop" {
		t.Fatalf("completions: %d %s", resp.StatusCode, body)
	}
	if c.Usage.CompletionTokens != len(smolTok.Encode(answer, false))+1 || c.Usage.PromptTokens == 0 {
		t.Errorf("usage %+v", c.Usage)
	}
	resp, body = post(t, ts.URL+"/v1/chat/completions", map[string]any{"model": "smollm2",
		"messages": []map[string]string{{"role": "user", "content": "What is the capital of France?"}}})
	var ch chatResponse
	if resp.StatusCode != 200 || json.Unmarshal(body, &ch) != nil || ch.Choices[0].Message.Content != answer || ch.Choices[0].Message.Role != "assistant" {
		t.Fatalf("chat: %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "x", "max_tokens": 3})
	if json.Unmarshal(body, &c) != nil || *c.Choices[0].FinishReason != "length" || c.Usage.CompletionTokens != 3 {
		t.Errorf("max_tokens 3: %d %s", resp.StatusCode, body)
	}
}

// TestRequestSampling checks the engine.Request the server builds from
// a request's fields: the OpenAI API's defaults for temperature and
// top_p, the engine's for top_k (0 in Sampling), llama.cpp's meaning of
// a top_k of 0 or less (all tokens), and the tokenizer's
// end-of-generation tokens as IsEOG.
func TestRequestSampling(t *testing.T) {
	ts, eng := newServer(t, 1, 0, 0)
	for _, tc := range []struct {
		name      string
		fields    map[string]any
		want      engine.Sampling
		maxTokens int
	}{
		{"defaults", nil, engine.Sampling{Temperature: 1, TopP: 1}, 64},
		{"greedy", map[string]any{"temperature": 0, "max_tokens": 7}, engine.Sampling{TopP: 1}, 7},
		{"top_k", map[string]any{"top_k": 5, "top_p": 0.5}, engine.Sampling{Temperature: 1, TopK: 5, TopP: 0.5}, 64},
		{"top_k 0 keeps all", map[string]any{"top_k": 0}, engine.Sampling{Temperature: 1, TopK: -1, TopP: 1}, 64},
		{"negative top_k keeps all", map[string]any{"top_k": -7}, engine.Sampling{Temperature: 1, TopK: -1, TopP: 1}, 64},
		{"seed", map[string]any{"seed": 9, "temperature": 0.5}, engine.Sampling{Temperature: 0.5, TopP: 1, Seed: 9, Seeded: true}, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"prompt": "x"}
			for k, v := range tc.fields {
				body[k] = v
			}
			if resp, b := post(t, ts.URL+"/v1/completions", body); resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			r := eng.last.Load()
			if r.Sampling != tc.want || r.MaxTokens != tc.maxTokens {
				t.Errorf("sampling %+v, max tokens %d; want %+v, %d", r.Sampling, r.MaxTokens, tc.want, tc.maxTokens)
			}
			if r.IsEOG == nil || !r.IsEOG(smolTok.EOS()) || r.IsEOG(smolTok.Encode("Paris", false)[0]) {
				t.Error("IsEOG does not say the tokenizer's end-of-generation tokens")
			}
		})
	}
}

// sse reads a streamed response into its data payloads.
func sse(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func TestStreamingAndStopSequences(t *testing.T) {
	ts, _ := newServer(t, 1, 0, 0)
	for _, tc := range []struct {
		name, path string
		body       map[string]any
		want       string
	}{
		{"chat", "/v1/chat/completions", map[string]any{"stream": true, "messages": []map[string]string{{"role": "user", "content": "hi"}}}, answer},
		{"completion", "/v1/completions", map[string]any{"stream": true, "prompt": "hi"}, answer},
		{"chat stop", "/v1/chat/completions", map[string]any{"stream": true, "stop": []string{" Paris", "zzz"}, "messages": []map[string]string{{"role": "user", "content": "hi"}}}, "The capital of France is"},
		{"completion stop string", "/v1/completions", map[string]any{"stream": true, "stop": "France", "prompt": "hi"}, "The capital of "},
	} {
		b, _ := json.Marshal(tc.body)
		resp, err := http.Post(ts.URL+tc.path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		events := sse(t, resp.Body)
		resp.Body.Close()
		if len(events) < 3 || events[len(events)-1] != "[DONE]" {
			t.Fatalf("%s: events %q", tc.name, events)
		}
		var text strings.Builder
		var reason string
		for _, e := range events[:len(events)-1] {
			var c struct {
				Choices []struct {
					Text         string                    `json:"text"`
					Delta        *struct{ Content string } `json:"delta"`
					FinishReason *string                   `json:"finish_reason"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(e), &c); err != nil {
				t.Fatalf("%s: %q: %v", tc.name, e, err)
			}
			ch := c.Choices[0]
			text.WriteString(ch.Text)
			if ch.Delta != nil {
				text.WriteString(ch.Delta.Content)
			}
			if ch.FinishReason != nil {
				reason = *ch.FinishReason
			}
		}
		if text.String() != tc.want || reason != "stop" {
			t.Errorf("%s: streamed %q (finish %q), want %q (stop)", tc.name, text.String(), reason, tc.want)
		}
	}
}

func TestAdmissionAndBadRequests(t *testing.T) {
	ts, eng := newServer(t, 1, 0, 50*time.Millisecond)
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "first"})
	}()
	for eng.active.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if resp, body := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "second"}); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("second request while one decodes and the queue is 0: %d %s", resp.StatusCode, body)
	}
	<-done
	for _, tc := range []struct {
		name string
		body any
		want string
	}{
		{"bad JSON", "{", "invalid JSON"},
		{"temperature", map[string]any{"prompt": "x", "temperature": 5}, "temperature"},
		{"n", map[string]any{"prompt": "x", "n": 2}, "n: only 1"},
		{"token outside vocabulary", map[string]any{"prompt": []int{1, 999999}}, "outside the vocabulary"},
		{"prompt too long", map[string]any{"prompt": strings.Repeat("word ", 300)}, "no room to generate"},
		{"five stops", map[string]any{"prompt": "x", "stop": []string{"a", "b", "c", "d", "e"}}, "at most 4"},
	} {
		var resp *http.Response
		var body []byte
		if s, ok := tc.body.(string); ok {
			r, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(s))
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(r.Body)
			r.Body.Close()
			resp = r
		} else {
			resp, body = post(t, ts.URL+"/v1/completions", tc.body)
		}
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s: %d %s, want 400 mentioning %q", tc.name, resp.StatusCode, body, tc.want)
		}
	}
}

// A client that goes away cancels its sequence at once.
func TestDisconnectCancelsTheSequence(t *testing.T) {
	ts, eng := newServer(t, 1, 0, 200*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"x","stream":true}`))
	go func() {
		for eng.active.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if resp, err := http.DefaultClient.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for eng.cancelled.Load() == 0 || eng.active.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the sequence was not cancelled: active %d, cancelled %d", eng.active.Load(), eng.cancelled.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestHealthModelsMetrics(t *testing.T) {
	ts, eng := newServer(t, 1, 0, 0)
	eng.ready.Store(false)
	if code := get(t, ts.URL+"/healthz"); code != http.StatusServiceUnavailable {
		t.Errorf("healthz before the first rung: %d", code)
	}
	if code := get(t, ts.URL+"/health"); code != http.StatusServiceUnavailable {
		t.Errorf("health (llama-server's) before the first rung: %d", code)
	}
	if resp, _ := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "x"}); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != retryAfter {
		t.Errorf("a request before the first rung: %d, Retry-After %q; want 503 and %s", resp.StatusCode, resp.Header.Get("Retry-After"), retryAfter)
	}
	eng.ready.Store(true)
	if code := get(t, ts.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("healthz when ready: %d", code)
	}
	if r, err := http.Get(ts.URL + "/health"); err != nil {
		t.Fatal(err)
	} else {
		var h map[string]string
		err := json.NewDecoder(r.Body).Decode(&h)
		r.Body.Close()
		if r.StatusCode != http.StatusOK || err != nil || h["status"] != "ok" {
			t.Errorf("health when ready: %d %v %v, want 200 {\"status\":\"ok\"}", r.StatusCode, h, err)
		}
	}
	r, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var ml modelList
	json.NewDecoder(r.Body).Decode(&ml)
	r.Body.Close()
	if len(ml.Data) != 1 || ml.Data[0].ID != "smollm2" {
		t.Errorf("models %+v", ml)
	}
	post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "x"})
	r, err = http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	for _, want := range []string{`ovrun_requests_total{code="200",endpoint="completions"} 1`, `ovrun_requests_total{code="503",endpoint="completions"} 1`,
		"ovrun_time_to_first_token_seconds_count 1", `ovrun_tokens_total{kind="completion"}`, "ovrun_active_sequences 0"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return r.StatusCode
}

func TestLoadTest(t *testing.T) {
	ts, eng := newServer(t, 2, 8, 2*time.Millisecond)
	res, err := RunLoad(context.Background(), LoadConfig{URL: ts.URL, Clients: 3, Requests: 9, Timeout: time.Minute,
		Prompts: []string{"a", "b c"}, MaxTok: []int{4, 64}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 9 || res.Errors != 0 || res.Tokens == 0 || res.TTFTP50S <= 0 || res.TPOTP50S <= 0 {
		t.Errorf("result %+v", res)
	}
	if p := eng.peak.Load(); p > 2 {
		t.Errorf("%d sequences decoded at once, --max-seqs is 2", p)
	}
	for _, u := range []string{"http://10.0.0.1:8080", "http://example.com", "http://192.168.1.1"} {
		if _, err := RunLoad(context.Background(), LoadConfig{URL: u, Clients: 1, Requests: 1, Prompts: []string{"x"}, MaxTok: []int{1}}); err == nil {
			t.Errorf("a load test against %s was allowed", u)
		}
	}
}

// awaitingEngine is a fakeEngine whose long prompts (20 tokens or more)
// start on a graph that compiles for compile at the first such request.
type awaitingEngine struct {
	*fakeEngine
	compile time.Duration
	once    sync.Once
	ready   chan struct{}
}

func (a *awaitingEngine) Await(ctx context.Context, n int, expect func(float64) error) (bool, error) {
	select {
	case <-a.ready:
		return false, nil
	default:
	}
	if n < 20 {
		return false, nil
	}
	a.once.Do(func() { time.AfterFunc(a.compile, func() { close(a.ready) }) })
	if err := expect(a.compile.Seconds()); err != nil {
		return true, err
	}
	select {
	case <-a.ready:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

// A request whose prompt needs a graph still compiling waits for it in the
// queue, not in a sequence slot: a short request sent meanwhile is answered
// first through the one slot. One whose deadline comes before the expected
// ready time gets 503 with that time as Retry-After.
func TestAdmissionWaitsForThePromptsGraph(t *testing.T) {
	loadSmol(t)
	long := strings.Repeat("tell me more about the capital of France ", 4)
	start := func(timeout time.Duration) (*httptest.Server, *awaitingEngine) {
		eng := &awaitingEngine{fakeEngine: &fakeEngine{tok: smolTok, maxCtx: 256}, compile: 400 * time.Millisecond, ready: make(chan struct{})}
		eng.fakeEngine.ready.Store(true)
		s, err := New(Config{Engine: eng, Tokenizer: smolTok, Template: smolTpl, ModelName: "smollm2",
			MaxSeqs: 1, MaxQueue: 4, DefaultMaxTokens: 64, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(s.Handler())
		t.Cleanup(func() {
			ts.Close()
			http.DefaultClient.CloseIdleConnections()
			<-eng.ready
		})
		return ts, eng
	}

	ts, eng := start(0)
	longDone := make(chan time.Time, 1)
	go func() {
		resp, body := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": long})
		if resp.StatusCode != 200 {
			t.Errorf("long prompt: %d %s", resp.StatusCode, body)
		}
		longDone <- time.Now()
	}()
	time.Sleep(50 * time.Millisecond)
	if resp, body := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "hi"}); resp.StatusCode != 200 {
		t.Fatalf("short prompt: %d %s", resp.StatusCode, body)
	}
	shortDone := time.Now()
	if d := <-longDone; d.Before(shortDone) {
		t.Error("the long prompt was answered before the short one: it held the slot while its graph compiled")
	}
	if w := eng.last.Load().RungWait; w == nil || w.ExpectedS != 0.4 || w.Wait < 300*time.Millisecond {
		t.Errorf("the long request, generated last, carries the rung wait %+v", w)
	}
	r, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	metrics := string(b)
	for _, want := range []string{"ovrun_rung_wait_seconds_count 1", "ovrun_rung_wait_expected_seconds_count 1", "ovrun_rung_waiting_requests 0"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	ts, _ = start(100 * time.Millisecond)
	resp, body := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": long})
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "expected in 0.4 s") {
		t.Errorf("past its deadline: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

// ignore_eos (llama.cpp's and vLLM's name) hands the engine no
// end-of-generation test: the answer runs to max_tokens.
func TestIgnoreEOS(t *testing.T) {
	ts, eng := newServer(t, 1, 0, 0)
	if resp, b := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "x", "ignore_eos": true}); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if eng.last.Load().IsEOG != nil {
		t.Error("ignore_eos: the engine was given IsEOG")
	}
	post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "x"})
	if eng.last.Load().IsEOG == nil {
		t.Error("without ignore_eos the engine has no IsEOG")
	}
}
