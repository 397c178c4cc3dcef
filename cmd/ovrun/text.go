package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/chat"
	"github.com/ovtoolkit/ovrun/engine"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/tokenizer"
)

// Flags for text in, text out.
var (
	promptFlag      = &cli.StringFlag{Name: "prompt", Usage: "prompt `TEXT`, tokenized with the model's own tokenizer (special tokens such as <|im_start|> map to their ids; no BOS is added)"}
	promptFileFlag  = &cli.StringFlag{Name: "prompt-file", Usage: "read the prompt text from `FILE` (- for standard input)"}
	ignoreEOSFlag   = &cli.BoolFlag{Name: "ignore-eos", Usage: "keep generating past end-of-generation tokens (a text prompt stops at the first one otherwise)"}
	temperatureFlag = &cli.Float64Flag{Name: "temperature", Usage: "sampling temperature `T`; 0 is greedy (the default)"}
	topKFlag        = &cli.IntFlag{Name: "top-k", Value: engine.DefaultTopK, Usage: "with --temperature > 0, sample from the `K` most likely tokens (0: all)"}
	topPFlag        = &cli.Float64Flag{Name: "top-p", Value: engine.DefaultTopP, Usage: "with --temperature > 0, sample from the smallest set of tokens whose probability reaches `P`"}
)

// samplingFlags go on every command that generates tokens from a model's
// own predictions.
var samplingFlags = []cli.Flag{temperatureFlag, topKFlag, topPFlag, ignoreEOSFlag}

// maxPromptBytes bounds a prompt read from a file or standard input.
const maxPromptBytes = 16 << 20

// promptInput is the resolved prompt of a command.
type promptInput struct {
	ids  []int64
	text string // the prompt as text (--prompt, --prompt-file); "" for token ids
	tok  *tokenizer.Tokenizer
}

// isText reports whether the prompt was given as text: such runs stop at
// the model's end-of-generation tokens unless --ignore-eos.
func (p promptInput) isText() bool { return p.text != "" }

// readPrompt resolves exactly one of --prompt, --prompt-file, --prompt-ids
// and --prompt-tokens. The tokenizer is loaded only for text.
func readPrompt(c *cli.Context, ck *model.Checkpoint) (promptInput, error) {
	given := 0
	for _, set := range []bool{promptFlag.Get(c) != "", promptFileFlag.Get(c) != "", promptIDsFlag.Get(c) != "", promptTokensFlag.Get(c) > 0} {
		if set {
			given++
		}
	}
	if given > 1 {
		return promptInput{}, errors.New("give one of --prompt, --prompt-file, --prompt-ids and --prompt-tokens")
	}
	text := promptFlag.Get(c)
	if p := promptFileFlag.Get(c); p != "" {
		b, err := readPromptFile(p)
		if err != nil {
			return promptInput{}, err
		}
		text = string(b)
		if text == "" {
			return promptInput{}, fmt.Errorf("--prompt-file %s is empty", p)
		}
	}
	if text == "" {
		ids, err := prompt(c, ck.Config.VocabSize)
		return promptInput{ids: ids}, err
	}
	tok, err := ck.Tokenizer()
	if err != nil {
		return promptInput{}, err
	}
	in := promptInput{text: text, tok: tok, ids: tok.Encode(text, false)}
	if len(in.ids) == 0 {
		return promptInput{}, errors.New("the prompt has no tokens")
	}
	return in, nil
}

func readPromptFile(p string) ([]byte, error) {
	var r io.Reader
	if p == "-" {
		r = os.Stdin
	} else {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("--prompt-file: %w", err)
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			return nil, fmt.Errorf("--prompt-file %s: not a regular file", p)
		}
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxPromptBytes+1))
	if err != nil {
		return nil, fmt.Errorf("--prompt-file: %w", err)
	}
	if len(b) > maxPromptBytes {
		return nil, fmt.Errorf("--prompt-file %s: longer than %d MiB", p, maxPromptBytes>>20)
	}
	return b, nil
}

// sampling is the token choice of --temperature, --top-k, --top-p and
// --seed. The flags' 0 keeps every token, where engine.Sampling's 0 is
// its default (the flags' own defaults are those).
func sampling(c *cli.Context) (engine.Sampling, error) {
	s := engine.Sampling{Temperature: temperatureFlag.Get(c), TopK: topKFlag.Get(c), TopP: topPFlag.Get(c),
		Seed: seedFlag.Get(c), Seeded: true}
	if s.Temperature == 0 {
		return s, nil // greedy: top-k and top-p are not used
	}
	bad := func(format string, a ...any) (engine.Sampling, error) {
		return s, fmt.Errorf("--temperature/--top-k/--top-p: "+format, a...)
	}
	switch p := s.TopP; {
	case s.TopK < 0:
		return bad("top-k %d: want 0 (all) or more", s.TopK)
	case math.IsNaN(p) || p < 0 || p > 1:
		return bad("top-p %v: want 0 to 1", p)
	}
	if s.TopK == 0 {
		s.TopK = -1
	}
	if s.TopP == 0 {
		s.TopP = 1
	}
	if _, err := s.Sampler(); err != nil {
		return bad("%w", err)
	}
	return s, nil
}

// request is a generating command's request of maxTokens tokens: the
// sampling of the flags and, for text prompts without --ignore-eos, a
// stop at the model's end-of-generation tokens. engine.Decoding turns it
// into the runtime's token choice.
func request(c *cli.Context, in promptInput, maxTokens int) (engine.Request, error) {
	s, err := sampling(c)
	r := engine.Request{Prompt: in.ids, MaxTokens: maxTokens, Sampling: s}
	if in.tok != nil && !ignoreEOSFlag.Get(c) {
		r.IsEOG = in.tok.IsEOG
	}
	return r, err
}

// generatedText decodes generated ids, leaving out a final
// end-of-generation token.
func generatedText(tok *tokenizer.Tokenizer, ids []int64) string {
	if tok == nil {
		return ""
	}
	if n := len(ids); n > 0 && tok.IsEOG(ids[n-1]) {
		ids = ids[:n-1]
	}
	return tok.Decode(ids)
}

// textStream prints tokens as text as they are generated, holding back
// incomplete UTF-8 and end-of-generation tokens.
type textStream struct {
	w   io.Writer
	tok *tokenizer.Tokenizer
	dec *tokenizer.StreamDecoder
}

func newTextStream(w io.Writer, tok *tokenizer.Tokenizer) *textStream {
	return &textStream{w: w, tok: tok, dec: tok.NewStreamDecoder()}
}

// emit prints a token, as an engine.Request's Emit: it never stops the
// generation.
func (s *textStream) emit(id int64) bool {
	if !s.tok.IsEOG(id) {
		fmt.Fprint(s.w, s.dec.Next(id))
	}
	return true
}

func (s *textStream) flush() { fmt.Fprint(s.w, s.dec.Flush()) }

// textModel is the checkpoint's tokenizer and chat template, for the
// commands that talk (chat, serve). The template is compiled and probed
// in chat's sandbox: a hostile one is refused here, at load.
func textModel(ctx context.Context, ck *model.Checkpoint) (*tokenizer.Tokenizer, *chat.Template, error) {
	tok, err := ck.Tokenizer()
	if err != nil {
		return nil, nil, err
	}
	src, bos, eos, err := ck.ReadChatTemplate()
	if err != nil {
		return nil, nil, err
	}
	tmpl, err := chat.CompileContext(ctx, src, bos, eos)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", ck.Dir, err)
	}
	return tok, tmpl, nil
}
