package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// statusError is an answer other than 200.
type statusError struct{ code int }

func (e statusError) Error() string { return fmt.Sprintf("HTTP %d", e.code) }

// streamEvent is one server-sent event of a streamed completion or chat
// completion, or an error a stream ends with.
type streamEvent struct {
	Choices []struct {
		Text  string          `json:"text"`
		Delta *chatMessageOut `json:"delta"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// streamOne posts one streamed request to url and times its tokens: the
// first chunk with text, then the gap before each next one. tokens is the
// usage's completion tokens.
func streamOne(ctx context.Context, c *http.Client, url, key string, body map[string]any) (ttft float64, gaps []float64, tokens int, err error) {
	// include_usage: OpenAI's servers and llama.cpp's send the usage chunk
	// only when asked; ovrun's always does.
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(b))
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
		return 0, nil, 0, statusError{resp.StatusCode}
	}
	last := t0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev streamEvent
		if json.Unmarshal([]byte(data), &ev) != nil {
			return 0, nil, 0, fmt.Errorf("bad event %q", data)
		}
		if ev.Error != nil {
			return 0, nil, 0, fmt.Errorf("the stream ended with an error: %s", ev.Error.Message)
		}
		if ev.Usage != nil {
			tokens = ev.Usage.CompletionTokens
		}
		if len(ev.Choices) == 0 {
			continue
		}
		text := ev.Choices[0].Text
		if d := ev.Choices[0].Delta; d != nil {
			text = d.Content
		}
		if text == "" {
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

// authorize adds the API key a server started with --api-key wants.
func authorize(req *http.Request, key string) {
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
}
