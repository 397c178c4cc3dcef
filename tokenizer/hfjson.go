package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/dlclark/regexp2/v2"
	"golang.org/x/text/unicode/norm"
)

// FromHFJSON builds a tokenizer from a Hugging Face tokenizer.json with a
// byte-level BPE model (GPT-2, SmolLM2, Llama 3, Qwen2 families). Supported:
// model BPE (merges as "a b" strings or pairs, ignore_merges); normalizer
// none, NFC, NFD, NFKC, NFKD or a Sequence of them; pre-tokenizer ByteLevel,
// Split (Regex or String pattern, behavior Isolated), Digits, or a Sequence
// of those ending in ByteLevel; post-processor none, ByteLevel,
// TemplateProcessing (its single template gives the ids Encode adds) or a
// Sequence of those. added_tokens become special tokens.
//
// The BOS and EOS ids come from a tokenizer_config.json next to the file
// when there is one (bos_token, eos_token), else BOS from the template;
// Encode with addSpecial adds what the template says, nothing else.
//
// Only a regular file of at most 64 MiB is read. Bad JSON, an inconsistent
// vocabulary or merges wrap ErrInvalid; other models (WordPiece, Unigram,
// SentencePiece-style BPE with byte_fallback) wrap ErrUnsupported, as does
// a Split pattern that backtracks catastrophically (see regex.go).
func FromHFJSON(path string) (*Tokenizer, error) {
	data, err := readRegular(path, maxJSONBytes)
	if err != nil {
		return nil, err
	}
	t, err := parseHFJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	cfgPath := filepath.Join(filepath.Dir(path), "tokenizer_config.json")
	if cfg, err := readRegular(cfgPath, maxJSONBytes); err == nil {
		if err := t.applyHFConfig(cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", cfgPath, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return t, nil
}

// readRegular reads a whole file that must be a regular file (not a FIFO,
// device or directory, which could block or never end) of at most limit
// bytes.
func readRegular(path string, limit int64) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w: not a regular file", path, ErrInvalid)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w: not a regular file", path, ErrInvalid)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %w: %d bytes (limit %d)", path, ErrInvalid, st.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w: more than %d bytes", path, ErrInvalid, limit)
	}
	return data, nil
}

type hfFile struct {
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         *hfModel        `json:"model"`
}

type hfAddedToken struct {
	ID         *int   `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Special    bool   `json:"special"`
}

type hfModel struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

// hfNode is any normalizer, pre-tokenizer or post-processor object; each
// kind reads the fields it has.
type hfNode struct {
	Type             string            `json:"type"`
	Normalizers      []json.RawMessage `json:"normalizers"`
	Pretokenizers    []json.RawMessage `json:"pretokenizers"`
	Processors       []json.RawMessage `json:"processors"`
	Pattern          *hfPattern        `json:"pattern"`
	Behavior         string            `json:"behavior"`
	Invert           bool              `json:"invert"`
	IndividualDigits bool              `json:"individual_digits"`
	AddPrefixSpace   bool              `json:"add_prefix_space"`
	UseRegex         *bool             `json:"use_regex"`
	Single           []hfTemplatePiece `json:"single"`
	SpecialTokens    map[string]struct {
		IDs []int64 `json:"ids"`
	} `json:"special_tokens"`
}

type hfPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type hfTemplatePiece struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

const maxNesting = 8 // Sequence in Sequence; real files use one level

func parseHFJSON(data []byte) (*Tokenizer, error) {
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%w: tokenizer.json: %v", ErrInvalid, err)
	}
	if f.Model == nil {
		return nil, fmt.Errorf("%w: tokenizer.json has no model", ErrInvalid)
	}
	m := f.Model
	if m.Type == "" && m.Merges != nil {
		m.Type = "BPE" // older files leave the type out
	}
	switch {
	case m.Type != "BPE":
		return nil, fmt.Errorf("%w: model type %q (want BPE)", ErrUnsupported, m.Type)
	case m.ByteFallback:
		return nil, fmt.Errorf("%w: BPE with byte_fallback (SentencePiece-style; load the GGUF instead)", ErrUnsupported)
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, fmt.Errorf("%w: BPE dropout", ErrUnsupported)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "",
		m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, fmt.Errorf("%w: BPE with subword prefix or suffix", ErrUnsupported)
	}

	// Ids: the model's vocab and the added tokens, one text per id.
	if len(m.Vocab) == 0 || len(m.Vocab)+len(f.AddedTokens) > maxVocab {
		return nil, fmt.Errorf("%w: %d vocabulary entries and %d added tokens (want 1..%d)",
			ErrInvalid, len(m.Vocab), len(f.AddedTokens), maxVocab)
	}
	size := 0
	for tok, id := range m.Vocab {
		if id < 0 || id >= maxVocab {
			return nil, fmt.Errorf("%w: token %q has id %d", ErrInvalid, tok, id)
		}
		size = max(size, id+1)
	}
	for _, at := range f.AddedTokens {
		if at.ID == nil || *at.ID < 0 || *at.ID >= maxVocab || at.Content == "" {
			return nil, fmt.Errorf("%w: added token %q without a valid id", ErrInvalid, at.Content)
		}
		size = max(size, *at.ID+1)
	}
	tokens := make([]string, size)
	for tok, id := range m.Vocab {
		if tokens[id] != "" {
			return nil, fmt.Errorf("%w: id %d is both %q and %q", ErrInvalid, id, tokens[id], tok)
		}
		tokens[id] = tok
	}
	raw := make([]bool, size)
	var specials []special
	for _, at := range f.AddedTokens {
		id := *at.ID
		if tokens[id] != "" && tokens[id] != at.Content {
			return nil, fmt.Errorf("%w: added token %q has id %d, which the vocabulary gives %q",
				ErrInvalid, at.Content, id, tokens[id])
		}
		if at.SingleWord {
			return nil, fmt.Errorf("%w: added token %q with single_word", ErrUnsupported, at.Content)
		}
		if raw[id] {
			return nil, fmt.Errorf("%w: added token id %d listed twice", ErrInvalid, id)
		}
		tokens[id], raw[id] = at.Content, true
		specials = append(specials, special{id: int64(id), text: at.Content, control: at.Special, lstrip: at.LStrip, rstrip: at.RStrip})
	}
	t := &Tokenizer{tokens: tokens, bos: -1, eos: -1}
	if err := t.index(); err != nil {
		return nil, err
	}

	pairs, err := parseHFMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	merges, err := rankMerges(pairs, t.ids)
	if err != nil {
		return nil, err
	}
	t.bpe, t.pieces = newBPEModel(tokens, raw, merges, m.IgnoreMerges)

	if t.normalize, err = hfNormalizer(f.Normalizer, 0); err != nil {
		return nil, err
	}
	if t.pre, err = hfPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := t.hfPostProcessor(f.PostProcessor, 0); err != nil {
		return nil, err
	}
	if len(t.prefix) > 0 {
		t.bos = t.prefix[0]
	}
	t.finish(specials, -1)
	return t, nil
}

// parseHFMerges reads merges written as "a b" strings or as [a, b] pairs.
func parseHFMerges(raw json.RawMessage) ([][2]string, error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err == nil {
		pairs := make([][2]string, len(lines))
		for i, l := range lines {
			a, b, ok := cutSpace(l)
			if !ok {
				return nil, fmt.Errorf("%w: merge %d %q is not two tokens separated by a space", ErrInvalid, i, l)
			}
			pairs[i] = [2]string{a, b}
		}
		return pairs, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("%w: merges are neither strings nor pairs: %v", ErrInvalid, err)
	}
	out := make([][2]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("%w: merge %d has %d parts", ErrInvalid, i, len(p))
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}

// cutSpace splits "a b" at its only space, as Hugging Face does.
func cutSpace(s string) (string, string, bool) {
	a, b, ok := strings.Cut(s, " ")
	if !ok || a == "" || b == "" || strings.Contains(b, " ") {
		return "", "", false
	}
	return a, b, true
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

func decodeNode(raw json.RawMessage, depth int) (*hfNode, error) {
	if depth > maxNesting {
		return nil, fmt.Errorf("%w: sequences nested deeper than %d", ErrInvalid, maxNesting)
	}
	var n hfNode
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return &n, nil
}

func hfNormalizer(raw json.RawMessage, depth int) (func(string) string, error) {
	if isNull(raw) {
		return nil, nil
	}
	n, err := decodeNode(raw, depth)
	if err != nil {
		return nil, err
	}
	switch n.Type {
	case "NFC":
		return norm.NFC.String, nil
	case "NFD":
		return norm.NFD.String, nil
	case "NFKC":
		return norm.NFKC.String, nil
	case "NFKD":
		return norm.NFKD.String, nil
	case "Sequence":
		var fs []func(string) string
		for _, sub := range n.Normalizers {
			f, err := hfNormalizer(sub, depth+1)
			if err != nil {
				return nil, err
			}
			if f != nil {
				fs = append(fs, f)
			}
		}
		if len(fs) == 0 {
			return nil, nil
		}
		return func(s string) string {
			for _, f := range fs {
				s = f(s)
			}
			return s
		}, nil
	}
	return nil, fmt.Errorf("%w: normalizer %q", ErrUnsupported, n.Type)
}

// hfPreTokenizer flattens the pre-tokenizer into stages and checks that it
// ends in ByteLevel, which the byte-level model needs.
func hfPreTokenizer(raw json.RawMessage) ([]preStage, error) {
	if isNull(raw) {
		return nil, fmt.Errorf("%w: no pre-tokenizer (want ByteLevel for byte-level BPE)", ErrUnsupported)
	}
	var stages []preStage
	byteLevel := false
	var walk func(raw json.RawMessage, depth int) error
	walk = func(raw json.RawMessage, depth int) error {
		n, err := decodeNode(raw, depth)
		if err != nil {
			return err
		}
		if byteLevel {
			return fmt.Errorf("%w: pre-tokenizer %q after ByteLevel", ErrUnsupported, n.Type)
		}
		switch n.Type {
		case "Sequence":
			for _, sub := range n.Pretokenizers {
				if err := walk(sub, depth+1); err != nil {
					return err
				}
			}
		case "Split":
			if n.Behavior != "Isolated" || n.Invert {
				return fmt.Errorf("%w: Split with behavior %q invert %v (want Isolated)", ErrUnsupported, n.Behavior, n.Invert)
			}
			var pattern string
			switch {
			case n.Pattern != nil && n.Pattern.Regex != nil:
				pattern = *n.Pattern.Regex
			case n.Pattern != nil && n.Pattern.String != nil && *n.Pattern.String != "":
				pattern = regexp2.Escape(*n.Pattern.String)
			default:
				return fmt.Errorf("%w: Split without a pattern", ErrInvalid)
			}
			re, err := compileRegex(pattern)
			if err != nil {
				return err
			}
			stages = append(stages, newRegexSplit(re))
		case "Digits":
			stages = append(stages, digitSplit{individual: n.IndividualDigits})
		case "ByteLevel":
			if n.AddPrefixSpace {
				stages = append(stages, prefixSpace{})
			}
			if n.UseRegex == nil || *n.UseRegex { // older files leave use_regex out; it defaults on
				re, err := compileRegex(regexGPT2)
				if err != nil {
					return err
				}
				stages = append(stages, newRegexSplit(re))
			}
			byteLevel = true
		default:
			return fmt.Errorf("%w: pre-tokenizer %q", ErrUnsupported, n.Type)
		}
		return nil
	}
	if err := walk(raw, 0); err != nil {
		return nil, err
	}
	if !byteLevel {
		return nil, fmt.Errorf("%w: pre-tokenizer without ByteLevel", ErrUnsupported)
	}
	return stages, nil
}

// hfPostProcessor reads the ids a TemplateProcessing puts around a single
// sequence into t.prefix and t.suffix.
func (t *Tokenizer) hfPostProcessor(raw json.RawMessage, depth int) error {
	if isNull(raw) {
		return nil
	}
	n, err := decodeNode(raw, depth)
	if err != nil {
		return err
	}
	switch n.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		for _, sub := range n.Processors {
			if err := t.hfPostProcessor(sub, depth+1); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
		seen := false
		for _, p := range n.Single {
			switch {
			case p.Sequence != nil:
				if p.Sequence.ID != "A" || seen {
					return fmt.Errorf("%w: single template names sequence %q", ErrInvalid, p.Sequence.ID)
				}
				seen = true
			case p.SpecialToken != nil:
				st, ok := n.SpecialTokens[p.SpecialToken.ID]
				if !ok || len(st.IDs) == 0 {
					return fmt.Errorf("%w: template token %q has no ids", ErrInvalid, p.SpecialToken.ID)
				}
				for _, id := range st.IDs {
					if id < 0 || id >= int64(len(t.tokens)) {
						return fmt.Errorf("%w: template token %q id %d outside the vocabulary", ErrInvalid, p.SpecialToken.ID, id)
					}
				}
				if seen {
					t.suffix = append(t.suffix, st.IDs...)
				} else {
					t.prefix = append(t.prefix, st.IDs...)
				}
			}
		}
		return nil
	}
	return fmt.Errorf("%w: post-processor %q", ErrUnsupported, n.Type)
}

// applyHFConfig takes bos_token and eos_token from a tokenizer_config.json.
// Each is a string, an object with "content", or null.
func (t *Tokenizer) applyHFConfig(data []byte) error {
	var cfg struct {
		BOS json.RawMessage `json:"bos_token"`
		EOS json.RawMessage `json:"eos_token"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	for _, f := range []struct {
		raw json.RawMessage
		id  *int64
	}{{cfg.BOS, &t.bos}, {cfg.EOS, &t.eos}} {
		if isNull(f.raw) {
			continue
		}
		var text string
		if err := json.Unmarshal(f.raw, &text); err != nil {
			var obj struct {
				Content string `json:"content"`
			}
			if err := json.Unmarshal(f.raw, &obj); err != nil {
				return fmt.Errorf("%w: special token %s", ErrInvalid, f.raw)
			}
			text = obj.Content
		}
		id, ok := t.ids[text]
		if !ok {
			return fmt.Errorf("%w: special token %q is not in the vocabulary", ErrInvalid, text)
		}
		*f.id = id
	}
	if t.eos >= 0 {
		t.eog[t.eos], t.split[t.eos] = true, true
	}
	if t.bos >= 0 {
		t.split[t.bos] = true
	}
	return nil
}
