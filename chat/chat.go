// Package chat turns a conversation into the prompt text a model was trained
// on, by rendering the model's own Jinja chat template (the one a GGUF file
// carries as tokenizer.chat_template, or tokenizer_config.json's
// chat_template) with github.com/ardanlabs/jinja.
//
// A template is code from the model file, and the library has no limits:
// a macro that calls itself overflows the Go stack and a string product
// allocates without bound, both fatal to the whole process. So templates
// are compiled and rendered in a worker process of this same binary under
// limits on recursion, memory, time, output and range() (limits.go), and
// Compile renders a probe conversation to refuse a hostile template when
// the model is loaded.
package chat

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Message is one turn of a conversation, as the OpenAI API and Hugging Face
// templates name them: role "system", "user" or "assistant".
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatML is the template used when a model carries none (llama.cpp's
// fallback too).
const ChatML = `{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`

// Template is a compiled chat template; safe for concurrent use.
type Template struct {
	src, key string // key: the source's SHA-256, what workers cache it under
	bos, eos string
}

// probes are the conversations Compile renders: with a system turn, and
// without for templates that refuse one (raise_exception is the
// template's own answer, not a reason to refuse it).
var probes = [][]Message{
	{{"system", "You are a helpful assistant."}, {"user", "Hello!"}, {"assistant", "Hi! How can I help?"}, {"user", "What is 2 + 2?"}},
	{{"user", "Hello!"}, {"assistant", "Hi! How can I help?"}, {"user", "What is 2 + 2?"}},
}

// Compile is CompileContext without a context.
func Compile(src, bos, eos string) (*Template, error) {
	return CompileContext(context.Background(), src, bos, eos)
}

// CompileContext compiles a chat template and renders the probe
// conversations with it, within the limits. bos and eos are the texts of
// the model's begin- and end-of-sequence tokens, which templates may use
// as bos_token and eos_token. An empty src compiles ChatML. A template
// that passes a limit on a probe is refused with a *LimitError.
func CompileContext(ctx context.Context, src, bos, eos string) (*Template, error) {
	if src == "" {
		src = ChatML
	}
	if len(src) > MaxTemplateBytes {
		return nil, fmt.Errorf("chat template of %d bytes: longer than %d", len(src), MaxTemplateBytes)
	}
	sum := sha256.Sum256([]byte(src))
	t := &Template{src: src, key: hex.EncodeToString(sum[:]), bos: bos, eos: eos}
	if _, err := t.run(ctx, &request{}); err != nil {
		return nil, wrap("compile failed", err)
	}
	for _, msgs := range probes {
		_, err := t.run(ctx, &request{Render: true, Messages: msgs, AddGenerationPrompt: true})
		var te *templateError
		if !errors.As(err, &te) {
			if err != nil {
				return nil, wrap("render failed on a probe conversation", err)
			}
			break
		}
	}
	return t, nil
}

// Source is the template's text.
func (t *Template) Source() string { return t.src }

// Render formats msgs; with addGenerationPrompt the text ends with the
// opening of the assistant's turn, ready for generation. A cancelled ctx
// stops the render at once.
func (t *Template) Render(ctx context.Context, msgs []Message, addGenerationPrompt bool) (string, error) {
	if len(msgs) == 0 {
		return "", errors.New("chat: no messages")
	}
	for i, m := range msgs {
		switch m.Role {
		case "system", "user", "assistant", "tool":
		default:
			return "", fmt.Errorf("chat: message %d has role %q; want system, user, assistant or tool", i, m.Role)
		}
	}
	out, err := t.run(ctx, &request{Render: true, Messages: msgs, AddGenerationPrompt: addGenerationPrompt})
	if err != nil {
		return "", wrap("render failed", err)
	}
	return out, nil
}

// IsChatML reports whether the template speaks ChatML (<|im_start|> turns).
func (t *Template) IsChatML() bool { return strings.Contains(t.src, "<|im_start|>") }

// templateError is the template's own error: it does not parse, it
// raised an exception, it used a value wrongly.
type templateError struct{ msg string }

func (e *templateError) Error() string { return e.msg }

// run has a worker compile the template (when it has not yet) and do req.
func (t *Template) run(ctx context.Context, req *request) (string, error) {
	req.BOS, req.EOS = t.bos, t.eos
	resp, err := workers.do(ctx, t.key, t.src, req)
	switch {
	case err != nil:
		return "", err
	case resp.Limit != "":
		if l := limitKinds[resp.Limit]; l != nil {
			return "", l
		}
		return "", fmt.Errorf("template worker: unknown limit %q", resp.Limit)
	case resp.Err != "":
		return "", &templateError{oneLine(resp.Err)}
	}
	return resp.Text, nil
}

// wrap names the template in an error; the template's own errors read as
// before ("chat template: jinja parse: ..."), the sandbox's say what
// failed.
func wrap(what string, err error) error {
	var te *templateError
	if errors.As(err, &te) {
		return fmt.Errorf("chat template: %w", err)
	}
	return fmt.Errorf("chat template: %s: %w", what, err)
}
