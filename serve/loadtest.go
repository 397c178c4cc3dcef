package serve

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ovtoolkit/ovrun/internal/stats"
	"github.com/ovtoolkit/ovrun/internal/traffic"
)

// LoadConfig is a bounded load test against a server on this machine.
//
// Closed loop (Rate 0): Clients clients send Requests requests in all, each
// client its next as soon as its last is answered. Open loop (Rate > 0):
// the requests arrive at Rate per second, a Poisson process, whatever the
// server's answers (ovrun plan --serve's load, drawn from the same Seed).
// Request i's answer length (max_tokens) is drawn from MaxTok; its prompt
// is a chat message drawn from Prompts, or with PromptTokens a completion
// prompt of exactly that many token ids drawn from the mix
// (traffic.PromptIDs).
type LoadConfig struct {
	URL      string // base URL, e.g. http://127.0.0.1:8080
	Clients  int
	Requests int
	Rate     float64       // requests per second, open loop; 0: closed loop of Clients
	Timeout  time.Duration // the whole test
	Prompts  []string      // user messages, drawn at random
	// PromptTokens, when set, replaces Prompts: prompt lengths in tokens.
	PromptTokens []int
	MaxTok       []int // max_tokens values, drawn at random
	// IgnoreEOS asks for every answer in full (ignore_eos): exactly
	// max_tokens tokens, unless the largest context ends it first.
	IgnoreEOS bool
	Seed      uint64
	APIKey    string // sent as Authorization: Bearer; "": none
}

// LoadResultSchema is a LoadResult's schema field (docs/outputs.md).
const LoadResultSchema = "ovrun.loadtest/1"

// LoadResult is what a load test measured (ovrun loadtest --json,
// docs/outputs.md). The fields from /metrics are the server's counters'
// change over the test (ovrun serve's; a server without them leaves them
// zero and Metrics false); each is named as the field of ovrun plan
// --serve that predicts it (docs/planning-a-server.md).
type LoadResult struct {
	Schema   string  `json:"schema"`
	Clients  int     `json:"clients"`
	Rate     float64 `json:"rate"`
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	// Refused counts the errors that were 429: the server's queue was full.
	Refused     int     `json:"refused"`
	ErrorSample string  `json:"error_sample,omitempty"`
	WallS       float64 `json:"wall_s"`
	// RequestsPerS is the answered requests over WallS.
	RequestsPerS float64 `json:"requests_per_s"`
	TokensPerS   float64 `json:"tokens_per_s"`
	Tokens       int     `json:"tokens"`
	// ShortAnswers counts answers with fewer tokens than their max_tokens
	// (with IgnoreEOS: the largest context, or a server that ignored it).
	ShortAnswers   int     `json:"short_answers"`
	TTFTP50S       float64 `json:"ttft_p50_s"`
	TTFTP99S       float64 `json:"ttft_p99_s"`
	TPOTP50S       float64 `json:"tpot_p50_s"`
	TPOTP99S       float64 `json:"tpot_p99_s"`
	PeakKVReserved float64 `json:"peak_kv_reserved_bytes"`
	PeakKVLive     float64 `json:"peak_kv_live_bytes"`

	// Metrics reports that /metrics was read before and after the test.
	Metrics bool `json:"metrics"`
	// ServerTTFTMeanS is the server's own mean time to first token
	// (ovrun_time_to_first_token_seconds): arrival to the first token,
	// whether or not it had text to stream.
	ServerTTFTMeanS float64 `json:"server_ttft_mean_s"`
	// BoundaryWaits and BoundaryWaitS: ovrun_boundary_wait_seconds.
	BoundaryWaits int     `json:"boundary_waits"`
	BoundaryWaitS float64 `json:"boundary_wait_s"`
	// AdmissionWaits and AdmissionWaitS: ovrun_rung_wait_seconds.
	AdmissionWaits int     `json:"admission_waits"`
	AdmissionWaitS float64 `json:"admission_wait_s"`
	// Compiles (ovrun_compiles_total) and CompileS
	// (ovrun_compile_seconds_total), all kinds; CompileSByKind by kind.
	Compiles       int                `json:"compiles"`
	CompileS       float64            `json:"compile_s"`
	CompileSByKind map[string]float64 `json:"compile_s_by_kind,omitempty"`
	// Launches is ovrun_compile_launches_total by reason.
	Launches map[string]int `json:"launches,omitempty"`
}

// Loopback reports whether base names this machine: load tests send
// traffic only there.
func Loopback(base string) error {
	u, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("--url %q: %w", base, err)
	}
	switch h := u.Hostname(); {
	case h == "localhost", h == "::1", strings.HasPrefix(h, "127."):
		return nil
	}
	return fmt.Errorf("--url %s: load tests only target this machine (127.0.0.0/8, ::1, localhost)", base)
}

// check refuses a config that cannot run.
func (cfg LoadConfig) check() error {
	if err := Loopback(cfg.URL); err != nil {
		return err
	}
	switch {
	case cfg.Rate == 0 && (cfg.Clients < 1 || cfg.Clients > 256):
		return fmt.Errorf("clients %d: want 1..256", cfg.Clients)
	case cfg.Requests < 1 || cfg.Requests > 100000:
		return fmt.Errorf("requests %d: want 1..100000", cfg.Requests)
	case len(cfg.MaxTok) == 0:
		return errors.New("load test: no max_tokens values")
	case len(cfg.Prompts) == 0 && len(cfg.PromptTokens) == 0:
		return errors.New("load test: no prompts and no prompt lengths")
	}
	_, err := cfg.draw()
	return err
}

// draw is the test's requests: arrival offsets and lengths.
func (cfg LoadConfig) draw() ([]traffic.Request, error) {
	prompts := cfg.PromptTokens
	if len(prompts) == 0 {
		prompts = []int{1} // chat messages from Prompts instead
	}
	reqs, err := traffic.Draw(traffic.Mix{Rate: cfg.Rate, Requests: cfg.Requests, Prompt: prompts, Answer: cfg.MaxTok, Seed: cfg.Seed})
	if err != nil {
		return nil, fmt.Errorf("load test: %w", err)
	}
	return reqs, nil
}

// RunLoad runs the test: it never sends more than cfg.Requests requests and
// stops at cfg.Timeout or when ctx ends.
func RunLoad(ctx context.Context, cfg LoadConfig) (*LoadResult, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	reqs, err := cfg.draw()
	if err != nil {
		return nil, err
	}
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	res := &LoadResult{Schema: LoadResultSchema, Clients: cfg.Clients, Rate: cfg.Rate}
	if cfg.Rate > 0 {
		res.Clients = 0
	}
	client := &http.Client{}
	defer client.CloseIdleConnections()
	before, beforeErr := scrape(ctx, client, cfg.URL, cfg.APIKey)
	var mu sync.Mutex
	var ttft, tpot []float64
	send := func(i int) {
		r := reqs[i]
		body := map[string]any{"stream": true, "max_tokens": r.Answer, "temperature": 0,
			"stream_options": map[string]bool{"include_usage": true}}
		if cfg.IgnoreEOS {
			body["ignore_eos"] = true
		}
		path := "/v1/chat/completions"
		if len(cfg.PromptTokens) > 0 {
			path, body["prompt"] = "/v1/completions", traffic.PromptIDs(cfg.Seed, i, r.Prompt)
		} else {
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
			body["messages"] = []map[string]string{{"role": "user", "content": cfg.Prompts[rng.IntN(len(cfg.Prompts))]}}
		}
		first, gaps, toks, err := streamOne(ctx, client, cfg.URL+path, cfg.APIKey, body)
		mu.Lock()
		defer mu.Unlock()
		res.Requests++
		if err != nil {
			res.Errors++
			if se := (statusError{}); errors.As(err, &se) && se.code == http.StatusTooManyRequests {
				res.Refused++
			}
			if res.ErrorSample == "" {
				res.ErrorSample = err.Error()
			}
			return
		}
		ttft = append(ttft, first)
		tpot = append(tpot, gaps...)
		res.Tokens += toks
		if toks < r.Answer {
			res.ShortAnswers++
		}
	}
	stopKV := pollKV(ctx, client, cfg.URL, cfg.APIKey, res, &mu)
	t0 := time.Now()
	if cfg.Rate > 0 {
		openLoop(ctx, reqs, t0, send)
	} else {
		closedLoop(ctx, cfg.Clients, len(reqs), send)
	}
	stopKV()
	res.WallS = time.Since(t0).Seconds()
	if res.WallS > 0 {
		res.RequestsPerS = float64(res.Requests-res.Errors) / res.WallS
		res.TokensPerS = float64(res.Tokens) / res.WallS
	}
	res.TTFTP50S, res.TTFTP99S = stats.Quantile(ttft, 0.5), stats.Quantile(ttft, 0.99)
	res.TPOTP50S, res.TPOTP99S = stats.Quantile(tpot, 0.5), stats.Quantile(tpot, 0.99)
	if beforeErr == nil {
		// After the test's context: a test cut short still reports what
		// the server did meanwhile.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if after, err := scrape(sctx, client, cfg.URL, cfg.APIKey); err == nil {
			res.fromMetrics(before, after)
		}
	}
	return res, ctx.Err()
}

// openLoop sends request i at t0 + its arrival offset, each on its own,
// and returns once all are answered or ctx ends.
func openLoop(ctx context.Context, reqs []traffic.Request, t0 time.Time, send func(int)) {
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i, r := range reqs {
		if d := time.Until(t0.Add(time.Duration(r.AtS * float64(time.Second)))); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		} else if ctx.Err() != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(i)
		}()
	}
}

// closedLoop has clients send n requests in all, each its next once its
// last is answered.
func closedLoop(ctx context.Context, clients, n int, send func(int)) {
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				send(i)
			}
		}()
	}
feed:
	for i := range n {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
}
