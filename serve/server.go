package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ovtoolkit/ovrun/chat"
	"github.com/ovtoolkit/ovrun/engine"
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

	Access Access // who may call
	Limits Limits // what one client may cost; zero fields take DefaultLimits'

	// ControlInContent lets text in chat messages name control tokens
	// (llama.cpp's server does); by default it stays text (see chat.Template.PromptIDs).
	ControlInContent bool

	// Registry receives the server's metrics (and the engine's, when it
	// is a prometheus.Collector); nil makes a private one.
	Registry *prometheus.Registry
}

// Server serves one model.
//
// A request passes, in order: the access checks and the body limit
// (guard), an admission ticket (at most MaxSeqs+MaxQueue requests are read,
// queued or decoding at once; more get 429 before their body is read), the
// body's decoding and checks, a wait for a sequence slot, and only then the
// chat template and the tokenizer. So memory is bounded by the tickets
// times the body limit, whatever the mix of requests.
type Server struct {
	cfg      Config
	access   *accessCheck
	maxPiece int // bytes of the longest token text
	tickets  chan struct{}
	slots    chan struct{}
	encoders chan struct{} // at most MaxSeqs prompts encode at once
	m        *metrics
	handler  http.Handler
	created  int64

	inflight inflight      // requests in handlers
	stopping chan struct{} // closed when Shutdown begins
	stopOnce sync.Once
	base     context.Context // every request's context derives from it; cancel ends them all
	cancel   context.CancelFunc

	mu    sync.Mutex
	hs    *http.Server
	conns *connLimit
}

// New builds a server; Handler serves it, or Serve on a listener.
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
	cfg.Limits.fill()
	access, err := newAccessCheck(cfg.Access)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s := &Server{cfg: cfg, access: access, maxPiece: cfg.Tokenizer.MaxPieceBytes(),
		tickets: make(chan struct{}, cfg.MaxSeqs+cfg.MaxQueue), slots: make(chan struct{}, cfg.MaxSeqs), encoders: make(chan struct{}, cfg.MaxSeqs),
		m: newMetrics(cfg.Registry), created: time.Now().Unix(), stopping: make(chan struct{})}
	s.base, s.cancel = context.WithCancel(context.Background())
	cfg.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ovrun_tokenizer_regex_overruns_total",
		Help: "Pre-tokenizer matches stopped at their time limit (the rest of the piece was encoded as one word)."},
		func() float64 { return float64(cfg.Tokenizer.RegexOverruns()) }))
	if c, ok := cfg.Engine.(prometheus.Collector); ok {
		if err := cfg.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("serve: engine metrics: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /v1/models/{model...}", s.model)
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /health", s.health)
	mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	s.handler = s.guard(mux)
	return s, nil
}

// Handler is the server's HTTP handler, access checks included; Serve
// adds the connection limits.
func (s *Server) Handler() http.Handler { return s.handler }

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

// health is llama-server's readiness check, for clients and load
// balancers written against it: {"status":"ok"}, or 503 with an error
// object (and Retry-After) until the first rung is compiled.
func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	if !s.cfg.Engine.Ready() {
		w.Header().Set("Retry-After", retryAfter)
		s.writeJSON(w, http.StatusServiceUnavailable, newAPIError(http.StatusServiceUnavailable, "loading", "compiling the first rung"))
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) modelInfo() modelInfo {
	return modelInfo{ID: s.cfg.ModelName, Object: "model", Created: s.created, OwnedBy: "ovrun"}
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	s.writeJSON(w, http.StatusOK, modelList{Object: "list", Data: []modelInfo{s.modelInfo()}})
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	if name := r.PathValue("model"); name != s.cfg.ModelName {
		s.unknownModel(w, "models", name)
		return
	}
	s.writeJSON(w, http.StatusOK, s.modelInfo())
}

func (s *Server) unknownModel(w http.ResponseWriter, endpoint, name string) {
	s.failCode(w, endpoint, http.StatusNotFound, "model_not_found",
		fmt.Sprintf("the model %q does not exist: this server serves %q", name, s.cfg.ModelName))
}

// job is one admitted request on its way through the engine.
type job struct {
	endpoint string
	opts     Options
	stream   bool
	isChat   bool
	start    time.Time
	// prompt encodes the request's prompt; it runs once the request holds
	// a sequence slot, so no more than MaxSeqs prompts are encoded at once.
	prompt func(context.Context) ([]int64, error)
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	const ep = "completions"
	start := time.Now()
	var req completionRequest
	leave, ok := s.read(w, r, ep, &req, &req.Model)
	if !ok {
		return
	}
	defer leave()
	opts, err := req.options(s.cfg.DefaultMaxTokens)
	if err != nil {
		s.fail(w, ep, http.StatusBadRequest, err.Error())
		return
	}
	text, ids, err := promptOf(req.Prompt)
	if err == nil && ids == nil {
		err = s.fitsBytes(len(text))
	}
	if err != nil {
		s.fail(w, ep, http.StatusBadRequest, err.Error())
		return
	}
	if bad := s.badID(ids); bad != "" {
		s.fail(w, ep, http.StatusBadRequest, bad)
		return
	}
	s.run(w, r, job{endpoint: ep, opts: opts, stream: req.Stream, start: start, prompt: func(context.Context) ([]int64, error) {
		if ids != nil {
			return ids, nil
		}
		return s.cfg.Tokenizer.Encode(text, false), nil
	}})
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	const ep = "chat"
	start := time.Now()
	var req chatRequest
	leave, ok := s.read(w, r, ep, &req, &req.Model)
	if !ok {
		return
	}
	defer leave()
	opts, err := req.options(s.cfg.DefaultMaxTokens)
	if err != nil {
		s.fail(w, ep, http.StatusBadRequest, err.Error())
		return
	}
	n := 0
	for _, m := range req.Messages {
		n += len(m.Content)
	}
	if err := s.fitsBytes(n); err != nil {
		s.fail(w, ep, http.StatusBadRequest, err.Error())
		return
	}
	s.run(w, r, job{endpoint: ep, opts: opts, stream: req.Stream, isChat: true, start: start, prompt: func(ctx context.Context) ([]int64, error) {
		return s.cfg.Template.PromptIDs(ctx, s.cfg.Tokenizer, req.Messages, s.cfg.ControlInContent)
	}})
}

// read takes an admission ticket, then reads and decodes the JSON body
// into v and checks the model it names (*model); it answers the request
// itself when it cannot. leave returns the ticket.
func (s *Server) read(w http.ResponseWriter, r *http.Request, endpoint string, v any, model *string) (leave func(), ok bool) {
	select {
	case s.tickets <- struct{}{}:
	default:
		s.fail(w, endpoint, http.StatusTooManyRequests, fmt.Sprintf("busy: %d sequences decoding and %d waiting", s.cfg.MaxSeqs, s.cfg.MaxQueue))
		return nil, false
	}
	leave = func() { <-s.tickets }
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.Limits.ReadTimeout))
	body, err := io.ReadAll(r.Body)
	_ = rc.SetReadDeadline(time.Time{})
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		w.Header().Set("Connection", "close")
		s.tooLarge(w, endpoint)
	case err != nil:
		s.fail(w, endpoint, http.StatusBadRequest, "reading the request body: "+err.Error())
	default:
		// Unmarshal, unlike a Decoder, refuses anything after the value.
		if err := json.Unmarshal(body, v); err != nil {
			s.fail(w, endpoint, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		} else if *model != "" && *model != s.cfg.ModelName {
			s.unknownModel(w, endpoint, *model)
		} else {
			return leave, true
		}
	}
	leave()
	return nil, false
}

func (s *Server) badID(ids []int64) string {
	for _, id := range ids {
		if id < 0 || id >= int64(s.cfg.Tokenizer.VocabSize()) {
			return fmt.Sprintf("prompt: token %d is outside the vocabulary [0, %d)", id, s.cfg.Tokenizer.VocabSize())
		}
	}
	return ""
}

// admit waits for a sequence slot (the ticket guarantees the queue has
// room); it answers 503 itself when the request's deadline passes or the
// server shuts down first.
func (s *Server) admit(ctx context.Context, w http.ResponseWriter, endpoint string) (release func(), ok bool) {
	select {
	case s.slots <- struct{}{}:
	default:
		s.m.queued.Inc()
		select {
		case s.slots <- struct{}{}:
			s.m.queued.Dec()
		case <-ctx.Done():
			s.m.queued.Dec()
			s.fail(w, endpoint, http.StatusServiceUnavailable, "gave up waiting for a free sequence: "+context.Cause(ctx).Error())
			return nil, false
		case <-s.stopping:
			s.m.queued.Dec()
			w.Header().Set("Connection", "close")
			s.fail(w, endpoint, http.StatusServiceUnavailable, "the server is shutting down")
			return nil, false
		}
	}
	s.m.active.Inc()
	return func() { <-s.slots; s.m.active.Dec() }, true
}

// lateRung refuses a request whose first graph would be ready only after
// its deadline.
type lateRung struct{ expected, left float64 }

func (e lateRung) Error() string {
	return fmt.Sprintf("the graph this prompt needs is compiling and is expected in %.1f s, after this request's deadline (%.1f s left); retry then", e.expected, e.left)
}

// awaitRung waits, before admission, for the graph the prompt starts on
// when the engine can say it is still compiling (engine.Awaiter): in the
// queue, not in a sequence slot. A request whose deadline comes before the
// predicted ready time gets 503 with that time as its Retry-After. It
// answers the request itself when it cannot go on.
func (s *Server) awaitRung(ctx context.Context, w http.ResponseWriter, endpoint string, n int) (*engine.RungWait, bool) {
	a, ok := s.cfg.Engine.(engine.Awaiter)
	if !ok {
		return nil, true
	}
	rw := &engine.RungWait{Start: time.Now(), ExpectedS: -1}
	waiting := false
	waited, err := a.Await(ctx, n, func(expected float64) error {
		rw.ExpectedS = expected
		if expected >= 0 {
			s.m.rungExpected.Observe(expected)
			if dl, ok := ctx.Deadline(); ok && time.Until(dl).Seconds() < expected {
				return lateRung{expected, time.Until(dl).Seconds()}
			}
		}
		waiting = true
		s.m.rungWaiting.Inc()
		return nil
	})
	if waiting {
		s.m.rungWaiting.Dec()
	}
	if !waited {
		return nil, true
	}
	rw.Wait = time.Since(rw.Start)
	var late lateRung
	switch {
	case errors.As(err, &late):
		s.m.rungRefused.Inc()
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(late.expected))))
		s.fail(w, endpoint, http.StatusServiceUnavailable, late.Error())
		return nil, false
	case err != nil:
		s.fail(w, endpoint, http.StatusServiceUnavailable, "gave up waiting for the graph this prompt needs: "+err.Error())
		return nil, false
	}
	s.m.rungWait.Observe(rw.Wait.Seconds())
	return rw, true
}

// errShutdown ends the sequences still decoding when Shutdown's grace ends.
var errShutdown = errors.New("the server is shutting down")

// run admits the job, generates, and writes the answer whole or streamed.
func (s *Server) run(w http.ResponseWriter, r *http.Request, j job) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(s.base, func() { cancel(errShutdown) })
	defer stop()
	if s.cfg.Timeout > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeoutCause(ctx, s.cfg.Timeout, fmt.Errorf("the request took longer than the server's --timeout %s", s.cfg.Timeout))
		defer c()
	}
	if !s.cfg.Engine.Ready() {
		w.Header().Set("Retry-After", retryAfter)
		s.fail(w, j.endpoint, http.StatusServiceUnavailable, "the model is still compiling its first rung; retry shortly")
		return
	}
	// The prompt is encoded before it takes a slot, so that the engine can
	// say whether the graph it starts on is compiled (awaitRung), but never
	// more than MaxSeqs at once.
	select {
	case s.encoders <- struct{}{}:
	case <-ctx.Done():
		s.fail(w, j.endpoint, http.StatusServiceUnavailable, "gave up waiting to encode the prompt: "+context.Cause(ctx).Error())
		return
	}
	prompt, err := j.prompt(ctx)
	<-s.encoders
	if err != nil {
		s.fail(w, j.endpoint, http.StatusBadRequest, err.Error())
		return
	}
	if len(prompt) >= s.cfg.Engine.MaxContext() {
		s.fail(w, j.endpoint, http.StatusBadRequest, fmt.Sprintf("prompt of %d tokens leaves no room to generate: the largest context is %d tokens", len(prompt), s.cfg.Engine.MaxContext()))
		return
	}
	rw, ok := s.awaitRung(ctx, w, j.endpoint, len(prompt))
	if !ok {
		return
	}
	release, ok := s.admit(ctx, w, j.endpoint)
	if !ok {
		return
	}
	defer release()
	s.m.queueSeconds.Observe(time.Since(j.start).Seconds())

	id := newID(j.isChat)
	out := newTextOut(s.cfg.Tokenizer, j.opts.Stop)
	var sse *sseWriter
	if j.stream {
		sse = s.newSSE(w)
		if j.isChat {
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
			if j.isChat {
				sse.send(chatChunk(id, s.created, s.cfg.ModelName, &chatMessageOut{Content: piece}, nil))
			} else {
				sse.send(completionChunk(id, s.created, s.cfg.ModelName, piece, nil))
			}
		}
		return more && (sse == nil || sse.err == nil)
	}
	isEOG := s.cfg.Tokenizer.IsEOG // the engine ends a generation after one
	if j.opts.IgnoreEOS {
		isEOG = nil // ignore_eos: only max_tokens, the largest context or a stop sequence ends the answer
	}
	fin, err := s.cfg.Engine.Generate(ctx, engine.Request{Prompt: prompt, MaxTokens: j.opts.MaxTokens, Sampling: j.opts.Sampling,
		IsEOG: isEOG, Emit: emit, RungWait: rw})
	s.m.tokens.WithLabelValues("prompt").Add(float64(len(prompt)))
	s.m.tokens.WithLabelValues("completion").Add(float64(fin.Tokens))
	if err != nil {
		code := http.StatusInternalServerError
		switch {
		case errors.Is(err, engine.ErrPromptTooLong):
			code = http.StatusBadRequest
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			code = http.StatusServiceUnavailable
			if r.Context().Err() != nil {
				s.m.requests.WithLabelValues(j.endpoint, "client_closed").Inc()
				return // nobody to answer
			}
			if ctx.Err() != nil {
				err = context.Cause(ctx) // the deadline or the shutdown, in words
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
	use := &usage{PromptTokens: len(prompt), CompletionTokens: fin.Tokens, TotalTokens: len(prompt) + fin.Tokens}
	s.m.requests.WithLabelValues(j.endpoint, "200").Inc()
	if sse != nil {
		if j.isChat {
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
	if j.isChat {
		s.writeJSON(w, http.StatusOK, chatResponse{ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: s.cfg.ModelName,
			Choices: []chatChoice{{Message: &chatMessageOut{Role: "assistant", Content: full}, FinishReason: &reason}}, Usage: use})
		return
	}
	s.writeJSON(w, http.StatusOK, completionResponse{ID: id, Object: "text_completion", Created: time.Now().Unix(), Model: s.cfg.ModelName,
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
	s.failCode(w, endpoint, code, "", msg)
}

// failCode is fail with the error body's code (such as "model_not_found").
func (s *Server) failCode(w http.ResponseWriter, endpoint string, code int, errCode, msg string) {
	s.m.requests.WithLabelValues(endpoint, fmt.Sprint(code)).Inc()
	s.writeJSON(w, code, newAPIError(code, errCode, msg))
}

func newAPIError(code int, errCode, msg string) apiError {
	var e apiError
	e.Error.Message = msg
	e.Error.Type = errorType(code)
	if errCode != "" {
		e.Error.Code = &errCode
	}
	return e
}

func errorType(code int) string {
	switch code {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestEntityTooLarge:
		return "invalid_request_error"
	case http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case http.StatusServiceUnavailable:
		return "service_unavailable"
	}
	return "server_error"
}

// writeJSON writes a whole answer; the client has the write timeout to
// take it.
func (s *Server) writeJSON(w http.ResponseWriter, code int, v any) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.Limits.WriteTimeout))
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
// went away, or took longer than the write timeout to take an event) it
// writes nothing more.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	err     error
}

func (s *Server) newSSE(w http.ResponseWriter) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, rc: http.NewResponseController(w), timeout: s.cfg.Limits.WriteTimeout}
}

func (s *sseWriter) send(v any) {
	b, err := json.Marshal(v)
	if err == nil {
		s.raw("data: " + string(b) + "\n\n")
	}
}

func (s *sseWriter) sendError(code int, msg string) {
	s.send(newAPIError(code, "", msg))
	s.done()
}

func (s *sseWriter) done() { s.raw("data: [DONE]\n\n") }

func (s *sseWriter) raw(line string) {
	if s.err != nil {
		return
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	if _, s.err = io.WriteString(s.w, line); s.err == nil {
		s.err = s.rc.Flush()
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
	if t.tok.IsEOG(id) {
		return "", true // the engine ends the sequence itself
	}
	t.pending += t.dec.Next(id)
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
