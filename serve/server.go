package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ovtoolkit/ovrun/chat"
	"github.com/ovtoolkit/ovrun/tokenizer"
)

// Config is what a Server needs.
type Config struct {
	Engine    Engine
	Tokenizer *tokenizer.Tokenizer
	Template  *chat.Template
	ModelName string // the id /v1/models lists and responses carry

	MaxSeqs          int           // sequences decoding at once (>= 1)
	MaxQueue         int           // requests waiting for a slot beyond MaxSeqs; more get 429
	Timeout          time.Duration // per request, queue included; 0: none
	DefaultMaxTokens int           // when a request names none

	// Registry receives the server's metrics (and the engine's, when it
	// is a prometheus.Collector); nil makes a private one.
	Registry *prometheus.Registry
}

// maxBodyBytes bounds a request body.
const maxBodyBytes = 8 << 20

// Server serves one model.
type Server struct {
	cfg     Config
	slots   chan struct{}
	waiting atomic.Int64
	m       *metrics
	mux     *http.ServeMux
	created int64
}

// New builds a server; Handler serves it.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Engine == nil || cfg.Tokenizer == nil || cfg.Template == nil:
		return nil, errors.New("serve: an engine, a tokenizer and a chat template are required")
	case cfg.MaxSeqs < 1:
		return nil, fmt.Errorf("serve: max sequences %d: want at least 1", cfg.MaxSeqs)
	case cfg.MaxQueue < 0:
		return nil, fmt.Errorf("serve: queue %d: want 0 or more", cfg.MaxQueue)
	}
	if cfg.DefaultMaxTokens < 1 {
		cfg.DefaultMaxTokens = 256
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Server{cfg: cfg, slots: make(chan struct{}, cfg.MaxSeqs), m: newMetrics(cfg.Registry), mux: http.NewServeMux(),
		created: time.Now().Unix()}
	if c, ok := cfg.Engine.(prometheus.Collector); ok {
		if err := cfg.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("serve: engine metrics: %w", err)
		}
	}
	s.mux.HandleFunc("POST /v1/completions", s.completions)
	s.mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	return s, nil
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// retryAfter is the Retry-After of a 503 while the first rung compiles, in
// seconds: the openai clients wait that long between their retries (2 by
// default), so a request sent while SmolLM2's first rung compiles (4 s on
// 2 cores) gets its answer instead of an error.
const retryAfter = "3"

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	if !s.cfg.Engine.Ready() {
		w.Header().Set("Retry-After", retryAfter)
		http.Error(w, "compiling the first rung", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: []modelInfo{{
		ID: s.cfg.ModelName, Object: "model", Created: s.created, OwnedBy: "ovrun"}}})
}

// job is one admitted request on its way through the engine.
type job struct {
	endpoint string
	prompt   []int64
	opts     Options
	start    time.Time
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if !s.decode(w, r, "completions", &req) {
		return
	}
	opts, err := req.options(s.cfg.DefaultMaxTokens)
	if err != nil {
		s.fail(w, "completions", http.StatusBadRequest, err.Error())
		return
	}
	text, ids, err := promptOf(req.Prompt)
	if err != nil {
		s.fail(w, "completions", http.StatusBadRequest, err.Error())
		return
	}
	if ids == nil {
		ids = s.encode(text)
	} else if bad := s.badID(ids); bad != "" {
		s.fail(w, "completions", http.StatusBadRequest, bad)
		return
	}
	s.run(w, r, job{endpoint: "completions", prompt: ids, opts: opts, start: time.Now()}, req.Stream, false)
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if !s.decode(w, r, "chat", &req) {
		return
	}
	opts, err := req.options(s.cfg.DefaultMaxTokens)
	if err != nil {
		s.fail(w, "chat", http.StatusBadRequest, err.Error())
		return
	}
	text, err := s.cfg.Template.Render(req.Messages, true)
	if err != nil {
		s.fail(w, "chat", http.StatusBadRequest, err.Error())
		return
	}
	s.run(w, r, job{endpoint: "chat", prompt: s.encode(text), opts: opts, start: time.Now()}, req.Stream, true)
}

// decode reads a JSON body into v, answering 400 itself when it cannot.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, endpoint string, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBodyBytes))
	if err := dec.Decode(v); err != nil {
		s.fail(w, endpoint, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return false
	}
	return true
}

func (s *Server) encode(text string) []int64 {
	ids := s.cfg.Tokenizer.Encode(text, false)
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

func (s *Server) badID(ids []int64) string {
	for _, id := range ids {
		if id < 0 || id >= int64(s.cfg.Tokenizer.VocabSize()) {
			return fmt.Sprintf("prompt: token %d is outside the vocabulary [0, %d)", id, s.cfg.Tokenizer.VocabSize())
		}
	}
	return ""
}

// admit waits for a sequence slot; it answers 429 when the queue is full.
func (s *Server) admit(ctx context.Context, w http.ResponseWriter, endpoint string) (release func(), ok bool) {
	select {
	case s.slots <- struct{}{}:
	default:
		if s.waiting.Add(1) > int64(s.cfg.MaxQueue) {
			s.waiting.Add(-1)
			s.fail(w, endpoint, http.StatusTooManyRequests, fmt.Sprintf("busy: %d sequences decoding and %d waiting", s.cfg.MaxSeqs, s.cfg.MaxQueue))
			return nil, false
		}
		s.m.queued.Inc()
		select {
		case s.slots <- struct{}{}:
			s.waiting.Add(-1)
			s.m.queued.Dec()
		case <-ctx.Done():
			s.waiting.Add(-1)
			s.m.queued.Dec()
			s.fail(w, endpoint, http.StatusServiceUnavailable, "gave up waiting for a free sequence: "+ctx.Err().Error())
			return nil, false
		}
	}
	s.m.active.Inc()
	return func() { <-s.slots; s.m.active.Dec() }, true
}

// run admits the job, generates, and writes the answer whole or streamed.
func (s *Server) run(w http.ResponseWriter, r *http.Request, j job, stream, isChat bool) {
	ctx := r.Context()
	if s.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
	}
	if !s.cfg.Engine.Ready() {
		w.Header().Set("Retry-After", retryAfter)
		s.fail(w, j.endpoint, http.StatusServiceUnavailable, "the model is still compiling its first rung; retry shortly")
		return
	}
	if len(j.prompt) >= s.cfg.Engine.MaxContext() {
		s.fail(w, j.endpoint, http.StatusBadRequest, fmt.Sprintf("prompt of %d tokens leaves no room to generate: the largest context is %d tokens", len(j.prompt), s.cfg.Engine.MaxContext()))
		return
	}
	release, ok := s.admit(ctx, w, j.endpoint)
	if !ok {
		return
	}
	defer release()
	s.m.queueSeconds.Observe(time.Since(j.start).Seconds())

	id := newID(isChat)
	out := newTextOut(s.cfg.Tokenizer, j.opts.Stop)
	var sse *sseWriter
	if stream {
		sse = newSSE(w)
		if isChat {
			sse.send(chatChunk(id, s.created, s.cfg.ModelName, &chatMessageOut{Role: "assistant"}, nil))
		}
	}
	var first, last time.Time
	emit := func(tok int64) bool {
		now := time.Now()
		if first.IsZero() {
			first = now
			s.m.ttft.Observe(now.Sub(j.start).Seconds())
		} else {
			s.m.tpot.Observe(now.Sub(last).Seconds())
		}
		last = now
		piece, more := out.add(tok)
		if sse != nil && piece != "" {
			if isChat {
				sse.send(chatChunk(id, s.created, s.cfg.ModelName, &chatMessageOut{Content: piece}, nil))
			} else {
				sse.send(completionChunk(id, s.created, s.cfg.ModelName, piece, nil))
			}
		}
		return more && (sse == nil || sse.err == nil)
	}
	fin, err := s.cfg.Engine.Generate(ctx, j.prompt, j.opts, emit)
	s.m.tokens.WithLabelValues("prompt").Add(float64(len(j.prompt)))
	s.m.tokens.WithLabelValues("completion").Add(float64(fin.Tokens))
	if err != nil {
		code := http.StatusInternalServerError
		switch {
		case errors.Is(err, ErrPromptTooLong):
			code = http.StatusBadRequest
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			code = http.StatusServiceUnavailable
			if r.Context().Err() != nil {
				s.m.requests.WithLabelValues(j.endpoint, "client_closed").Inc()
				return // nobody to answer
			}
		}
		if sse != nil {
			sse.sendError(code, err.Error())
			s.m.requests.WithLabelValues(j.endpoint, fmt.Sprint(code)).Inc()
			return
		}
		s.fail(w, j.endpoint, code, err.Error())
		return
	}
	reason := fin.Reason
	if out.stopped {
		reason = "stop"
	}
	text := out.flush()
	use := &usage{PromptTokens: len(j.prompt), CompletionTokens: fin.Tokens, TotalTokens: len(j.prompt) + fin.Tokens}
	s.m.requests.WithLabelValues(j.endpoint, "200").Inc()
	if sse != nil {
		if isChat {
			if text != "" {
				sse.send(chatChunk(id, s.created, s.cfg.ModelName, &chatMessageOut{Content: text}, nil))
			}
			c := chatChunk(id, s.created, s.cfg.ModelName, &chatMessageOut{}, &reason)
			c.Usage = use
			sse.send(c)
		} else {
			c := completionChunk(id, s.created, s.cfg.ModelName, text, &reason)
			c.Usage = use
			sse.send(c)
		}
		sse.done()
		return
	}
	full := out.text.String()
	if isChat {
		writeJSON(w, http.StatusOK, chatResponse{ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: s.cfg.ModelName,
			Choices: []chatChoice{{Message: &chatMessageOut{Role: "assistant", Content: full}, FinishReason: &reason}}, Usage: use})
		return
	}
	writeJSON(w, http.StatusOK, completionResponse{ID: id, Object: "text_completion", Created: time.Now().Unix(), Model: s.cfg.ModelName,
		Choices: []completionChoice{{Text: full, FinishReason: &reason}}, Usage: use})
}

func chatChunk(id string, created int64, model string, delta *chatMessageOut, reason *string) chatResponse {
	return chatResponse{ID: id, Object: "chat.completion.chunk", Created: created, Model: model,
		Choices: []chatChoice{{Delta: delta, FinishReason: reason}}}
}

func completionChunk(id string, created int64, model, text string, reason *string) completionResponse {
	return completionResponse{ID: id, Object: "text_completion", Created: created, Model: model,
		Choices: []completionChoice{{Text: text, FinishReason: reason}}}
}

// fail answers with the OpenAI error body and counts the request.
func (s *Server) fail(w http.ResponseWriter, endpoint string, code int, msg string) {
	s.m.requests.WithLabelValues(endpoint, fmt.Sprint(code)).Inc()
	var e apiError
	e.Error.Message = msg
	e.Error.Type = errorType(code)
	writeJSON(w, code, e)
}

func errorType(code int) string {
	switch code {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case http.StatusServiceUnavailable:
		return "service_unavailable"
	}
	return "server_error"
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func newID(isChat bool) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	if isChat {
		return "chatcmpl-" + hex.EncodeToString(b[:])
	}
	return "cmpl-" + hex.EncodeToString(b[:])
}

// sseWriter writes server-sent events; after a write error (the client
// went away) it writes nothing more.
type sseWriter struct {
	w   http.ResponseWriter
	f   http.Flusher
	err error
}

func newSSE(w http.ResponseWriter) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sseWriter{w: w, f: f}
}

func (s *sseWriter) send(v any) {
	b, err := json.Marshal(v)
	if err == nil {
		s.raw("data: " + string(b) + "\n\n")
	}
}

func (s *sseWriter) sendError(code int, msg string) {
	var e apiError
	e.Error.Message, e.Error.Type = msg, errorType(code)
	s.send(e)
	s.done()
}

func (s *sseWriter) done() { s.raw("data: [DONE]\n\n") }

func (s *sseWriter) raw(line string) {
	if s.err != nil {
		return
	}
	if _, s.err = io.WriteString(s.w, line); s.err == nil && s.f != nil {
		s.f.Flush()
	}
}

// textOut turns tokens into text as they come, finds stop sequences, and
// holds back text that could still become one.
type textOut struct {
	tok     *tokenizer.Tokenizer
	dec     *tokenizer.StreamDecoder
	stops   []string
	text    strings.Builder // everything released
	pending string          // decoded but held back (a possible stop-sequence prefix)
	stopped bool
}

func newTextOut(tok *tokenizer.Tokenizer, stops []string) *textOut {
	return &textOut{tok: tok, dec: tok.NewStreamDecoder(), stops: stops}
}

// add takes one token and returns the text it releases and whether
// generation should go on.
func (t *textOut) add(id int64) (string, bool) {
	if t.stopped {
		return "", false
	}
	if t.tok.IsEOG(int(id)) {
		return "", true // the engine ends the sequence itself
	}
	t.pending += t.dec.Next(int(id))
	for _, s := range t.stops {
		if i := strings.Index(t.pending, s); i >= 0 {
			t.pending = t.pending[:i]
			t.stopped = true
			out := t.pending
			t.pending = ""
			t.text.WriteString(out)
			return out, false
		}
	}
	// Release all but the longest tail that is a prefix of a stop sequence.
	hold := 0
	for _, s := range t.stops {
		for n := min(len(s)-1, len(t.pending)); n > hold; n-- {
			if strings.HasSuffix(t.pending, s[:n]) {
				hold = n
				break
			}
		}
	}
	out := t.pending[:len(t.pending)-hold]
	t.pending = t.pending[len(t.pending)-hold:]
	t.text.WriteString(out)
	return out, true
}

// flush releases what is held back at the end of a generation.
func (t *textOut) flush() string {
	if t.stopped {
		return ""
	}
	out := t.pending + t.dec.Flush()
	t.pending = ""
	t.text.WriteString(out)
	return out
}
