package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
)

// GGUF token types (tokenizer.ggml.token_type; llama.cpp's llama_token_type).
const (
	TypeUndefined   = 0
	TypeNormal      = 1
	TypeUnknown     = 2
	TypeControl     = 3
	TypeUserDefined = 4
	TypeUnused      = 5
	TypeByte        = 6
)

// Tokenizer encodes text to token ids and decodes ids to text. Build one with
// FromGGUF or FromHFJSON; it is safe for concurrent use.
type Tokenizer struct {
	tokens []string // vocabulary text by id ("" for an id nothing names)
	pieces []string // the bytes each id decodes to
	ids    map[string]int64

	specials specialMatcher
	split    []bool  // ids Encode cuts out of the text (specials, BOS, EOS)
	prefix   []int64 // ids Encode adds before the text when asked for specials
	suffix   []int64 // and after it
	bos, eos int64
	eog      []bool

	normalize func(string) string // nil: none
	pre       []preStage          // byte-level BPE pre-tokenizer stages, in order
	bpe       *bpeModel
	spm       *spmModel
}

// Encode returns the ids of text. Special and control tokens written in the
// text (such as "<|im_start|>") become their ids. With addSpecial the ids the
// vocabulary asks for (BOS when add_bos is set, EOS when add_eos is) are
// added around the text; without it nothing is added.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int64 {
	return t.encode(text, addSpecial, true)
}

// EncodeOrdinary returns the ids of text with control tokens treated as
// plain text, for input that must not inject them (a user's message inside
// a chat template). User-defined added tokens are still recognised, as in
// llama.cpp with parse_special off. Nothing is added around the text.
func (t *Tokenizer) EncodeOrdinary(text string) []int64 {
	return t.encode(text, false, false)
}

func (t *Tokenizer) encode(text string, addSpecial, parseControl bool) []int64 {
	out := make([]int64, 0, len(text)/3+4)
	if addSpecial {
		out = append(out, t.prefix...)
	}
	start := 0
	for i := 0; i < len(text); {
		if !t.specials.first[text[i]] {
			i++
			continue
		}
		n, sp := t.specials.match(text[i:], parseControl)
		if n == 0 {
			i++
			continue
		}
		seg := text[start:i]
		if sp.lstrip {
			seg = strings.TrimRightFunc(seg, unicode.IsSpace)
		}
		out = t.encodeText(seg, out)
		out = append(out, sp.id)
		i += n
		if sp.rstrip {
			i = len(text) - len(strings.TrimLeftFunc(text[i:], unicode.IsSpace))
		}
		start = i
	}
	out = t.encodeText(text[start:], out)
	if addSpecial {
		out = append(out, t.suffix...)
	}
	return out
}

// encodeText appends the ids of a stretch of text that holds no special token.
func (t *Tokenizer) encodeText(s string, out []int64) []int64 {
	if s == "" {
		return out
	}
	if t.normalize != nil {
		s = t.normalize(s)
	}
	if t.spm != nil {
		return t.spm.encode(s, out)
	}
	t.pretokenize(0, s, func(w string) { out = t.bpe.encodeWord(w, out) })
	return out
}

// pretokenize runs the stages from the given one on s and hands every final
// non-empty piece to emit, in order.
func (t *Tokenizer) pretokenize(stage int, s string, emit func(string)) {
	if s == "" {
		return
	}
	if stage == len(t.pre) {
		emit(s)
		return
	}
	t.pre[stage].split(s, func(p string) { t.pretokenize(stage+1, p, emit) })
}

// Decode returns the text of ids: the exact bytes they spell, special tokens
// as their text. Ids outside the vocabulary are skipped. Byte tokens that do
// not form valid UTF-8 come back as those bytes.
func (t *Tokenizer) Decode(ids []int64) string {
	var b []byte
	runStart := true
	for _, id := range ids {
		b = t.appendPiece(b, id, &runStart)
	}
	return string(b)
}

// appendPiece appends the bytes of one id. For a SentencePiece vocabulary
// with a space prefix it drops the one space the encoder put in front of
// each stretch of text (at the start and after every special token).
func (t *Tokenizer) appendPiece(b []byte, id int64, runStart *bool) []byte {
	if id < 0 || id >= int64(len(t.pieces)) {
		return b
	}
	p := t.pieces[id]
	if t.spm != nil && t.spm.spacePrefix {
		if t.split[id] {
			*runStart = true
			return append(b, p...)
		}
		if *runStart && p != "" {
			*runStart = false
			p = strings.TrimPrefix(p, " ")
		}
	}
	return append(b, p...)
}

// BOS is the beginning-of-sequence id, -1 if the vocabulary has none.
func (t *Tokenizer) BOS() int64 { return t.bos }

// EOS is the end-of-sequence id, -1 if the vocabulary names none.
func (t *Tokenizer) EOS() int64 { return t.eos }

// IsEOG reports whether id ends generation: EOS, EOT, or a control token
// such as <|im_end|>, <|eot_id|> or <|endoftext|>.
func (t *Tokenizer) IsEOG(id int64) bool { return id >= 0 && id < int64(len(t.eog)) && t.eog[id] }

// IsSpecial reports whether id is a special token: one Encode cuts out of the
// text (control, user-defined, added tokens) or BOS/EOS. A program printing
// generated text may want to leave these out.
func (t *Tokenizer) IsSpecial(id int64) bool {
	return id >= 0 && id < int64(len(t.split)) && t.split[id]
}

// TokenID returns the id of a vocabulary entry, written as the vocabulary
// writes it ("<|im_end|>", "Ġthe", "▁the").
func (t *Tokenizer) TokenID(token string) (int64, bool) {
	id, ok := t.ids[token]
	return id, ok
}

// Token returns the vocabulary entry of id as the vocabulary writes it, ""
// for an id outside the vocabulary.
func (t *Tokenizer) Token(id int64) string {
	if id < 0 || id >= int64(len(t.tokens)) {
		return ""
	}
	return t.tokens[id]
}

// VocabSize is the number of ids: one more than the largest id.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// CheckVocabSize returns an error wrapping ErrVocabMismatch unless every id
// of the tokenizer is a row of a model embedding with modelVocab rows. A
// model may have more rows than the tokenizer has ids (Qwen2 pads its
// embedding to a multiple of 128), never fewer.
func (t *Tokenizer) CheckVocabSize(modelVocab int) error {
	if modelVocab <= 0 {
		return fmt.Errorf("%w: model vocabulary size %d", ErrVocabMismatch, modelVocab)
	}
	if len(t.tokens) > modelVocab {
		return fmt.Errorf("%w: tokenizer has %d ids, the model's embedding only %d rows",
			ErrVocabMismatch, len(t.tokens), modelVocab)
	}
	return nil
}
