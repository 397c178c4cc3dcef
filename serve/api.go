package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/ovtoolkit/ovrun/chat"
	"github.com/ovtoolkit/ovrun/engine"
)

// The OpenAI API's request and response bodies, as much of them as ovrun
// serves: what the openai Python client and curl send and read.

// completionRequest is POST /v1/completions.
type completionRequest struct {
	Model  string          `json:"model"`
	Prompt json.RawMessage `json:"prompt"` // a string, or an array of one string or of token ids
	samplingParams
}

// chatRequest is POST /v1/chat/completions.
type chatRequest struct {
	Model    string         `json:"model"`
	Messages []chat.Message `json:"messages"`
	samplingParams
}

// samplingParams are the fields both endpoints share.
type samplingParams struct {
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"` // llama.cpp's server's; not in the OpenAI API
	Seed                *uint64         `json:"seed"`
	Stop                json.RawMessage `json:"stop"` // a string or an array of up to 4
	Stream              bool            `json:"stream"`
	N                   *int            `json:"n"`
	// IgnoreEOS (llama.cpp's and vLLM's name) generates max_tokens in full:
	// an end-of-generation token does not end the answer.
	IgnoreEOS bool `json:"ignore_eos"`
}

// maxStops is the OpenAI API's limit on stop sequences; maxStopBytes
// bounds each (the search for them costs up to its square per token).
const (
	maxStops     = 4
	maxStopBytes = 512
)

// options turns the request's sampling fields into generation options,
// checking each. What a request leaves out is the OpenAI API's default
// (temperature 1, top_p 1: no nucleus cut) or, for top_k, the engine's
// (engine.DefaultTopK); a top_k of 0 or less keeps every token, as in
// llama.cpp's server.
func (p *samplingParams) options(defaultMax int) (Options, error) {
	o := Options{MaxTokens: defaultMax, Sampling: engine.Sampling{Temperature: 1, TopP: 1}, IgnoreEOS: p.IgnoreEOS}
	if p.N != nil && *p.N != 1 {
		return o, errors.New("n: only 1 is supported")
	}
	for _, m := range []*int{p.MaxTokens, p.MaxCompletionTokens} {
		if m != nil {
			if *m < 1 {
				return o, fmt.Errorf("max_tokens %d: want at least 1", *m)
			}
			o.MaxTokens = *m
		}
	}
	if p.Temperature != nil {
		if t := *p.Temperature; math.IsNaN(t) || t < 0 || t > 2 {
			return o, fmt.Errorf("temperature %v: want 0 to 2", t)
		}
		o.Temperature = *p.Temperature
	}
	if p.TopP != nil {
		if v := *p.TopP; math.IsNaN(v) || v <= 0 || v > 1 {
			return o, fmt.Errorf("top_p %v: want more than 0, at most 1", v)
		}
		o.TopP = *p.TopP
	}
	if p.TopK != nil {
		o.TopK = *p.TopK
		if o.TopK <= 0 {
			o.TopK = -1 // all: engine.Sampling's 0 is its default
		}
	}
	if p.Seed != nil {
		o.Seed, o.Seeded = *p.Seed, true
	}
	if len(p.Stop) > 0 && string(p.Stop) != "null" {
		var one string
		if err := json.Unmarshal(p.Stop, &one); err == nil {
			o.Stop = []string{one}
		} else if err := json.Unmarshal(p.Stop, &o.Stop); err != nil {
			return o, errors.New("stop: want a string or an array of strings")
		}
		if len(o.Stop) > maxStops {
			return o, fmt.Errorf("stop: %d sequences, at most %d", len(o.Stop), maxStops)
		}
		for _, s := range o.Stop {
			if s == "" {
				return o, errors.New("stop: empty sequence")
			}
			if len(s) > maxStopBytes {
				return o, fmt.Errorf("stop: a sequence of %d bytes, at most %d", len(s), maxStopBytes)
			}
		}
	}
	return o, nil
}

// promptOf reads a completion prompt: text, or token ids.
func promptOf(raw json.RawMessage) (text string, ids []int64, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, errors.New("prompt: missing")
	}
	if json.Unmarshal(raw, &text) == nil {
		if text == "" {
			return "", nil, errors.New("prompt: empty")
		}
		return text, nil, nil
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil {
		if len(texts) != 1 || texts[0] == "" {
			return "", nil, errors.New("prompt: want one non-empty string (batches are not supported)")
		}
		return texts[0], nil, nil
	}
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return "", ids, nil
	}
	return "", nil, errors.New("prompt: want a string or an array of token ids")
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type completionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	FinishReason *string `json:"finish_reason"`
	Logprobs     any     `json:"logprobs"`
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type chatMessageOut struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      *chatMessageOut `json:"message,omitempty"`
	Delta        *chatMessageOut `json:"delta,omitempty"`
	FinishReason *string         `json:"finish_reason"`
	Logprobs     any             `json:"logprobs"`
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelInfo `json:"data"`
}

type modelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// apiError is the OpenAI error body.
type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}
