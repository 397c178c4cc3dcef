package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/tokenizer"
)

// The files next to a safetensors checkpoint that describe its tokenizer.
const (
	TokenizerName       = "tokenizer.json"
	TokenizerConfigName = "tokenizer_config.json"
)

// maxTokenizerConfigBytes bounds tokenizer_config.json.
const maxTokenizerConfigBytes = 16 << 20

// ErrNoTokenizer is returned when a checkpoint carries no tokenizer (the
// synthetic ones): such models take token ids only.
var ErrNoTokenizer = errors.New("no tokenizer")

// Tokenizer builds the checkpoint's own tokenizer: from the GGUF
// metadata (tokenizer.ggml.*) or from tokenizer.json next to config.json,
// checked against the model's vocabulary size. It is built once: later
// calls, from any goroutine, return the same (a Tokenizer is safe for
// concurrent use), so a caller may start building it early.
func (c *Checkpoint) Tokenizer() (*tokenizer.Tokenizer, error) {
	c.tokOnce.Do(func() { c.tok, c.tokErr = c.buildTokenizer() })
	return c.tok, c.tokErr
}

func (c *Checkpoint) buildTokenizer() (*tokenizer.Tokenizer, error) {
	var tok *tokenizer.Tokenizer
	var err error
	if c.GGUF != nil {
		tok, err = ggufTokenizer(c.GGUF)
	} else {
		p := filepath.Join(c.Dir, TokenizerName)
		if _, serr := os.Stat(p); serr != nil {
			return nil, fmt.Errorf("checkpoint %s: %w (no %s): give token ids with --prompt-ids or --prompt-tokens", c.Dir, ErrNoTokenizer, TokenizerName)
		}
		tok, err = tokenizer.FromHFJSON(p)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: tokenizer: %w", c.Dir, err)
	}
	if err := tok.CheckVocabSize(c.Config.VocabSize); err != nil {
		return nil, fmt.Errorf("%s: tokenizer: %w", c.Dir, err)
	}
	return tok, nil
}

func ggufTokenizer(g *GGUFFile) (*tokenizer.Tokenizer, error) {
	if !g.Has("tokenizer.ggml.model") {
		return nil, fmt.Errorf("%w: gguf: %w %q", ErrNoTokenizer, ErrMissingKey, "tokenizer.ggml.model")
	}
	v, err := ggufVocab(g)
	if err != nil {
		return nil, err
	}
	return tokenizer.FromGGUF(v)
}

// ggufVocab reads the tokenizer.ggml.* keys a file has, each checked for
// its type and meaning (ids inside the vocabulary, token types of GGUF's
// set, finite scores); an error wraps ErrCorrupt and names the key, and the
// token for per-token values. Keys the file lacks keep NewGGUFVocab's
// defaults. Load runs it on every GGUF file, tokenizer or not, so that a
// bad value fails the load rather than the first text prompt.
func ggufVocab(g *GGUFFile) (tokenizer.GGUFVocab, error) {
	bad := func(err error) (tokenizer.GGUFVocab, error) {
		return tokenizer.GGUFVocab{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	var mdl, pre string
	for _, k := range []struct {
		key string
		dst *string
	}{{"tokenizer.ggml.model", &mdl}, {"tokenizer.ggml.pre", &pre}} {
		if g.Has(k.key) {
			s, err := g.String(k.key)
			if err != nil {
				return bad(err)
			}
			*k.dst = s
		}
	}
	v := tokenizer.NewGGUFVocab(mdl, pre)
	for _, k := range []struct {
		key string
		dst *[]string
	}{{"tokenizer.ggml.tokens", &v.Tokens}, {"tokenizer.ggml.merges", &v.Merges}} {
		if g.Has(k.key) {
			s, err := g.Strings(k.key)
			if err != nil {
				return bad(err)
			}
			*k.dst = s
		}
	}
	if g.Has("tokenizer.ggml.scores") {
		f, err := g.Floats("tokenizer.ggml.scores")
		if err != nil {
			return bad(err)
		}
		v.Scores = make([]float32, len(f))
		for i, x := range f {
			v.Scores[i] = float32(x)
			if f32 := float64(v.Scores[i]); math.IsNaN(f32) || math.IsInf(f32, 0) {
				return bad(fmt.Errorf("tokenizer.ggml.scores[%d] is %g, not a finite float32", i, x))
			}
		}
	}
	if g.Has("tokenizer.ggml.token_type") {
		n, err := g.Ints("tokenizer.ggml.token_type")
		if err != nil {
			return bad(err)
		}
		v.TokenTypes = make([]int32, len(n))
		for i, x := range n {
			// llama.cpp's llama_token_type, undefined (0) to byte (6).
			if x < tokenizer.TypeUndefined || x > tokenizer.TypeByte {
				return bad(fmt.Errorf("tokenizer.ggml.token_type[%d] is %d, not a GGUF token type (%d..%d)", i, x, tokenizer.TypeUndefined, tokenizer.TypeByte))
			}
			v.TokenTypes[i] = int32(x)
		}
	}
	for _, k := range []struct {
		key string
		dst *int
	}{
		{"tokenizer.ggml.bos_token_id", &v.BOS}, {"tokenizer.ggml.eos_token_id", &v.EOS},
		{"tokenizer.ggml.eot_token_id", &v.EOT}, {"tokenizer.ggml.padding_token_id", &v.PAD},
		{"tokenizer.ggml.unknown_token_id", &v.UNK},
	} {
		if !g.Has(k.key) {
			continue
		}
		n, err := g.Int(k.key)
		if err != nil {
			return bad(err)
		}
		if n < 0 || (v.Tokens != nil && n >= int64(len(v.Tokens))) {
			return bad(fmt.Errorf("%s %d is outside the vocabulary of %d tokens (tokenizer.ggml.tokens)", k.key, n, len(v.Tokens)))
		}
		*k.dst = int(n)
	}
	for _, k := range []struct {
		key string
		dst *bool
	}{
		{"tokenizer.ggml.add_bos_token", &v.AddBOS}, {"tokenizer.ggml.add_eos_token", &v.AddEOS},
		{"tokenizer.ggml.add_space_prefix", &v.AddSpacePrefix},
	} {
		if g.Has(k.key) {
			b, err := g.Bool(k.key)
			if err != nil {
				return bad(err)
			}
			*k.dst = b
		}
	}
	return v, nil
}

// ggufChatTemplate is tokenizer.chat_template, "" when absent; a value that
// is not a string is an error, not a reason to fall back to ChatML.
func ggufChatTemplate(g *GGUFFile) (string, error) {
	if !g.Has("tokenizer.chat_template") {
		return "", nil
	}
	s, err := g.String("tokenizer.chat_template")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return s, nil
}

// ReadChatTemplate returns the model's chat template and the texts of its
// BOS and EOS tokens ("" each when the model has none): the GGUF's
// tokenizer.chat_template, or chat_template in tokenizer_config.json. A
// model that has none gets its family's (Family.ChatTemplate: Gemma's
// turns), or "" (chat.Compile then uses ChatML); one of the wrong type, or
// an unreadable tokenizer_config.json, is an error naming the key or the
// file.
func (c *Checkpoint) ReadChatTemplate() (src, bos, eos string, err error) {
	if tok, err := c.Tokenizer(); err == nil {
		if id := tok.BOS(); id >= 0 {
			bos = tok.Token(id)
		}
		if id := tok.EOS(); id >= 0 {
			eos = tok.Token(id)
		}
	}
	if c.GGUF != nil {
		src, err = ggufChatTemplate(c.GGUF)
	} else {
		src, err = hfChatTemplate(filepath.Join(c.Dir, TokenizerConfigName))
	}
	if err != nil {
		return "", "", "", fmt.Errorf("%s: %w", c.Dir, err)
	}
	if f := c.Config.Family(); src == "" && f != nil {
		src = f.ChatTemplate
	}
	return src, bos, eos, nil
}

// hfChatTemplate reads chat_template from tokenizer_config.json as
// transformers does: a string, or a list of {"name", "template"} objects of
// which the one named "default" is used. No file, or no (or a null)
// chat_template, is "". Anything else is an error naming the file.
func hfChatTemplate(path string) (string, error) {
	b, err := safefile.ReadFile(path, maxTokenizerConfigBytes)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return "", fmt.Errorf("%s: %w: %v", path, ErrCorrupt, err)
	}
	raw := cfg.ChatTemplate
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var src string
	if json.Unmarshal(raw, &src) == nil {
		return src, nil
	}
	var named []struct {
		Name     *string `json:"name"`
		Template *string `json:"template"`
	}
	if json.Unmarshal(raw, &named) != nil {
		return "", fmt.Errorf("%s: %w: chat_template is %s, neither a string nor a list of {\"name\", \"template\"} objects", path, ErrCorrupt, jsonKind(raw))
	}
	var names []string
	for i, n := range named {
		if n.Name == nil || n.Template == nil {
			return "", fmt.Errorf("%s: %w: chat_template[%d] lacks a string name or template", path, ErrCorrupt, i)
		}
		if *n.Name == "default" {
			return *n.Template, nil
		}
		names = append(names, *n.Name)
	}
	return "", fmt.Errorf("%s: %w: chat_template lists templates %q but none named \"default\"", path, ErrCorrupt, names)
}

// jsonKind names the kind of a JSON value, for errors.
func jsonKind(raw json.RawMessage) string {
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "a list"
	case 't', 'f':
		return "a bool"
	case '"':
		return "a string"
	}
	return "a number"
}
