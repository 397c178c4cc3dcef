package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ovtoolkit/ovrun/internal/stats"
)

// LoadConfig is a bounded load test against a server on this machine: N
// concurrent clients send Requests streamed chat completions in total, each
// with a prompt and an answer length drawn from the mix.
type LoadConfig struct {
	URL      string // base URL, e.g. http://127.0.0.1:8080
	Clients  int
	Requests int
	Timeout  time.Duration // the whole test
	Prompts  []string      // user messages, drawn at random
	MaxTok   []int         // max_tokens values, drawn at random
	Seed     uint64
	APIKey   string // sent as Authorization: Bearer; "": none
}

// LoadResult is what a load test measured.
type LoadResult struct {
	Clients        int     `json:"clients"`
	Requests       int     `json:"requests"`
	Errors         int     `json:"errors"`
	ErrorSample    string  `json:"error_sample,omitempty"`
	WallS          float64 `json:"wall_s"`
	RequestsPerS   float64 `json:"requests_per_s"`
	TokensPerS     float64 `json:"tokens_per_s"`
	Tokens         int     `json:"tokens"`
	TTFTP50S       float64 `json:"ttft_p50_s"`
	TTFTP99S       float64 `json:"ttft_p99_s"`
	TPOTP50S       float64 `json:"tpot_p50_s"`
	TPOTP99S       float64 `json:"tpot_p99_s"`
	PeakKVReserved float64 `json:"peak_kv_reserved_bytes"`
	PeakKVLive     float64 `json:"peak_kv_live_bytes"`
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

// RunLoad runs the test: it never sends more than cfg.Requests requests and
// stops at cfg.Timeout or when ctx ends.
func RunLoad(ctx context.Context, cfg LoadConfig) (*LoadResult, error) {
	if err := Loopback(cfg.URL); err != nil {
		return nil, err
	}
	switch {
	case cfg.Clients < 1 || cfg.Clients > 256:
		return nil, fmt.Errorf("clients %d: want 1..256", cfg.Clients)
	case cfg.Requests < 1 || cfg.Requests > 100000:
		return nil, fmt.Errorf("requests %d: want 1..100000", cfg.Requests)
	case len(cfg.Prompts) == 0 || len(cfg.MaxTok) == 0:
		return nil, errors.New("load test: no prompts or no max_tokens values")
	}
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	jobs := make(chan int)
	var mu sync.Mutex
	res := &LoadResult{Clients: cfg.Clients}
	var ttft, tpot []float64
	client := &http.Client{}
	defer client.CloseIdleConnections()
	stopKV := pollKV(ctx, client, cfg.URL, cfg.APIKey, res, &mu)
	t0 := time.Now()
	var wg sync.WaitGroup
	for c := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(c)))
			for range jobs {
				p := cfg.Prompts[rng.IntN(len(cfg.Prompts))]
				n := cfg.MaxTok[rng.IntN(len(cfg.MaxTok))]
				first, gaps, toks, err := streamOne(ctx, client, cfg.URL, cfg.APIKey, p, n)
				mu.Lock()
				res.Requests++
				if err != nil {
					res.Errors++
					if res.ErrorSample == "" {
						res.ErrorSample = err.Error()
					}
				} else {
					ttft = append(ttft, first)
					tpot = append(tpot, gaps...)
					res.Tokens += toks
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for i := 0; i < cfg.Requests; i++ {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	stopKV()
	res.WallS = time.Since(t0).Seconds()
	if res.WallS > 0 {
		res.RequestsPerS = float64(res.Requests-res.Errors) / res.WallS
		res.TokensPerS = float64(res.Tokens) / res.WallS
	}
	res.TTFTP50S, res.TTFTP99S = stats.Quantile(ttft, 0.5), stats.Quantile(ttft, 0.99)
	res.TPOTP50S, res.TPOTP99S = stats.Quantile(tpot, 0.5), stats.Quantile(tpot, 0.99)
	return res, ctx.Err()
}

// streamOne sends one streamed chat completion and times its tokens: the
// first content chunk, then the gap before each next one.
func streamOne(ctx context.Context, c *http.Client, base, key, prompt string, maxTokens int) (ttft float64, gaps []float64, tokens int, err error) {
	// include_usage: OpenAI's servers and llama.cpp's send the usage chunk
	// only when asked; ovrun's always does.
	body, _ := json.Marshal(map[string]any{"stream": true, "max_tokens": maxTokens, "temperature": 0,
		"stream_options": map[string]bool{"include_usage": true},
		"messages":       []map[string]string{{"role": "user", "content": prompt}}})
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	// A new connection per request: llama.cpp's server closes one after a
	// streamed answer while announcing keep-alive, and a POST on the dead
	// pooled connection fails with EOF; on loopback the cost is nothing.
	req.Close = true
	authorize(req, key)
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, nil, 0, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	last := t0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ch chatResponse
		if json.Unmarshal([]byte(data), &ch) != nil {
			return 0, nil, 0, fmt.Errorf("bad event %q", data)
		}
		if ch.Usage != nil {
			tokens = ch.Usage.CompletionTokens
		}
		if len(ch.Choices) == 0 || ch.Choices[0].Delta == nil || ch.Choices[0].Delta.Content == "" {
			continue
		}
		now := time.Now()
		if ttft == 0 {
			ttft = now.Sub(t0).Seconds()
		} else {
			gaps = append(gaps, now.Sub(last).Seconds())
		}
		last = now
	}
	return ttft, gaps, tokens, sc.Err()
}

// pollKV samples the server's KV gauges every 100 ms for their peaks.
func pollKV(ctx context.Context, c *http.Client, base, key string, res *LoadResult, mu *sync.Mutex) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			req, _ := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
			authorize(req, key)
			resp, err := c.Do(req)
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				var v float64
				if _, err := fmt.Sscanf(sc.Text(), "ovrun_kv_reserved_bytes %g", &v); err == nil {
					mu.Lock()
					res.PeakKVReserved = max(res.PeakKVReserved, v)
					mu.Unlock()
				}
				if _, err := fmt.Sscanf(sc.Text(), "ovrun_kv_live_bytes %g", &v); err == nil {
					mu.Lock()
					res.PeakKVLive = max(res.PeakKVLive, v)
					mu.Unlock()
				}
			}
			resp.Body.Close()
		}
	}()
	return func() { cancel(); <-done }
}

// authorize adds the API key a server started with --api-key wants.
func authorize(req *http.Request, key string) {
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
}
