// Package chat turns a conversation into the prompt text a model was trained
// on, by rendering the model's own Jinja chat template (the one a GGUF file
// carries as tokenizer.chat_template, or tokenizer_config.json's
// chat_template) with github.com/ardanlabs/jinja.
package chat

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"
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

// MaxTemplateBytes bounds the template source a model may carry.
const MaxTemplateBytes = 1 << 20

// Template is a compiled chat template; safe for concurrent use.
type Template struct {
	src      string
	t        *jinja.Template
	bos, eos string
}

// Compile compiles a chat template. bos and eos are the texts of the
// model's begin- and end-of-sequence tokens, which templates may use as
// bos_token and eos_token. An empty src compiles ChatML.
func Compile(src, bos, eos string) (*Template, error) {
	if src == "" {
		src = ChatML
	}
	if len(src) > MaxTemplateBytes {
		return nil, fmt.Errorf("chat template of %d bytes: longer than %d", len(src), MaxTemplateBytes)
	}
	t, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return &Template{src: src, t: t, bos: bos, eos: eos}, nil
}

// Source is the template's text.
func (t *Template) Source() string { return t.src }

// Render formats msgs; with addGenerationPrompt the text ends with the
// opening of the assistant's turn, ready for generation.
func (t *Template) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	if len(msgs) == 0 {
		return "", errors.New("chat: no messages")
	}
	list := make([]any, len(msgs))
	for i, m := range msgs {
		switch m.Role {
		case "system", "user", "assistant", "tool":
		default:
			return "", fmt.Errorf("chat: message %d has role %q; want system, user, assistant or tool", i, m.Role)
		}
		list[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	out, err := t.t.Render(map[string]any{
		"messages":              list,
		"add_generation_prompt": addGenerationPrompt,
		"bos_token":             t.bos,
		"eos_token":             t.eos,
	})
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}

// IsChatML reports whether the template speaks ChatML (<|im_start|> turns).
func (t *Template) IsChatML() bool { return strings.Contains(t.src, "<|im_start|>") }
