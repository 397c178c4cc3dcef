package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

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
// checked against the model's vocabulary size.
func (c *Checkpoint) Tokenizer() (*tokenizer.Tokenizer, error) {
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
	mdl, err := g.String("tokenizer.ggml.model")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoTokenizer, err)
	}
	pre, _ := g.String("tokenizer.ggml.pre")
	v := tokenizer.NewGGUFVocab(mdl, pre)
	if v.Tokens, err = g.Strings("tokenizer.ggml.tokens"); err != nil {
		return nil, err
	}
	if g.Has("tokenizer.ggml.merges") {
		if v.Merges, err = g.Strings("tokenizer.ggml.merges"); err != nil {
			return nil, err
		}
	}
	if g.Has("tokenizer.ggml.scores") {
		f, err := g.Floats("tokenizer.ggml.scores")
		if err != nil {
			return nil, err
		}
		v.Scores = make([]float32, len(f))
		for i, x := range f {
			v.Scores[i] = float32(x)
		}
	}
	if g.Has("tokenizer.ggml.token_type") {
		n, err := g.Ints("tokenizer.ggml.token_type")
		if err != nil {
			return nil, err
		}
		v.TokenTypes = make([]int32, len(n))
		for i, x := range n {
			v.TokenTypes[i] = int32(x)
		}
	}
	for key, dst := range map[string]*int{
		"tokenizer.ggml.bos_token_id": &v.BOS, "tokenizer.ggml.eos_token_id": &v.EOS,
		"tokenizer.ggml.eot_token_id": &v.EOT, "tokenizer.ggml.padding_token_id": &v.PAD,
		"tokenizer.ggml.unknown_token_id": &v.UNK,
	} {
		if g.Has(key) {
			n, err := g.Int(key)
			if err != nil {
				return nil, err
			}
			if n < 0 || n >= int64(len(v.Tokens)) {
				return nil, fmt.Errorf("gguf: %s = %d is outside the vocabulary of %d tokens", key, n, len(v.Tokens))
			}
			*dst = int(n)
		}
	}
	for key, dst := range map[string]*bool{
		"tokenizer.ggml.add_bos_token": &v.AddBOS, "tokenizer.ggml.add_eos_token": &v.AddEOS,
		"tokenizer.ggml.add_space_prefix": &v.AddSpacePrefix,
	} {
		if g.Has(key) {
			if *dst, err = g.Bool(key); err != nil {
				return nil, err
			}
		}
	}
	return tokenizer.FromGGUF(v)
}

// ChatTemplate returns the model's chat template and the texts of its BOS
// and EOS tokens ("" each when the model has none): the GGUF's
// tokenizer.chat_template, or chat_template in tokenizer_config.json.
func (c *Checkpoint) ChatTemplate() (src, bos, eos string) {
	tok, err := c.Tokenizer()
	if err == nil {
		if id := tok.BOS(); id >= 0 {
			bos = tok.Token(id)
		}
		if id := tok.EOS(); id >= 0 {
			eos = tok.Token(id)
		}
	}
	if c.GGUF != nil {
		src, _ = c.GGUF.String("tokenizer.chat_template")
		return src, bos, eos
	}
	b, err := os.ReadFile(filepath.Join(c.Dir, TokenizerConfigName))
	if err != nil || len(b) > maxTokenizerConfigBytes {
		return "", bos, eos
	}
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if json.Unmarshal(b, &cfg) != nil {
		return "", bos, eos
	}
	// A string, or a list of {name, template} of which "default" is used.
	if json.Unmarshal(cfg.ChatTemplate, &src) == nil {
		return src, bos, eos
	}
	var named []struct{ Name, Template string }
	if json.Unmarshal(cfg.ChatTemplate, &named) == nil {
		for _, n := range named {
			if n.Name == "default" {
				return n.Template, bos, eos
			}
		}
	}
	return "", bos, eos
}
