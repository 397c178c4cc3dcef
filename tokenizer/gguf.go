package tokenizer

import (
	"fmt"
	"strings"
	"unsafe"
)

// GGUFVocab is the tokenizer metadata of a GGUF file, as its keys hold it.
// FromGGUF takes every field literally; start from NewGGUFVocab to get
// llama.cpp's defaults for keys a file leaves out.
type GGUFVocab struct {
	Model      string    // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece BPE)
	Pre        string    // tokenizer.ggml.pre: "smollm", "gpt2", "llama-bpe", "qwen2", ... (gpt2 only)
	Tokens     []string  // tokenizer.ggml.tokens
	Scores     []float32 // tokenizer.ggml.scores: merge priority of each piece (llama); nil: all 0
	TokenTypes []int32   // tokenizer.ggml.token_type (TypeNormal, TypeControl, ...); nil: all normal
	Merges     []string  // tokenizer.ggml.merges: "left right", best first (gpt2)

	// Ids from tokenizer.ggml.{bos,eos,eot,padding,unknown}_token_id; -1 if absent.
	BOS, EOS, EOT, PAD, UNK int

	AddBOS         bool // tokenizer.ggml.add_bos_token
	AddEOS         bool // tokenizer.ggml.add_eos_token
	AddSpacePrefix bool // tokenizer.ggml.add_space_prefix (llama)
}

// NewGGUFVocab returns the values llama.cpp assumes for a model and pre
// type when the file does not say: for "llama" BOS 1, EOS 2, UNK 0, add_bos
// and a space prefix; for "gpt2" no ids, and add_bos for the Llama 3 family.
// A loader fills in the keys it finds over these.
func NewGGUFVocab(model, pre string) GGUFVocab {
	v := GGUFVocab{Model: model, Pre: pre, BOS: -1, EOS: -1, EOT: -1, PAD: -1, UNK: -1}
	switch model {
	case "llama":
		v.BOS, v.EOS, v.UNK = 1, 2, 0
		v.AddBOS, v.AddSpacePrefix = true, true
	case "gpt2":
		switch pre {
		case "llama3", "llama-v3", "llama-bpe", "falcon3":
			v.AddBOS = true
		}
	}
	return v
}

// FromGGUF builds a tokenizer from GGUF metadata. A vocabulary that does
// not hold together (a merge naming a token the vocabulary lacks, an id out
// of range, mismatched array lengths, duplicate tokens, absurd sizes) is an
// error wrapping ErrInvalid; a model or pre type this package does not
// implement wraps ErrUnsupported.
func FromGGUF(v GGUFVocab) (*Tokenizer, error) {
	n := len(v.Tokens)
	if n == 0 || n > maxVocab {
		return nil, fmt.Errorf("%w: %d tokens (want 1..%d)", ErrInvalid, n, maxVocab)
	}
	if v.Scores != nil && len(v.Scores) != n {
		return nil, fmt.Errorf("%w: %d scores for %d tokens", ErrInvalid, len(v.Scores), n)
	}
	if v.TokenTypes != nil && len(v.TokenTypes) != n {
		return nil, fmt.Errorf("%w: %d token types for %d tokens", ErrInvalid, len(v.TokenTypes), n)
	}
	for _, id := range []struct {
		name string
		id   int
	}{{"bos", v.BOS}, {"eos", v.EOS}, {"eot", v.EOT}, {"padding", v.PAD}, {"unknown", v.UNK}} {
		if id.id < -1 || id.id >= n {
			return nil, fmt.Errorf("%w: %s token id %d outside the vocabulary of %d", ErrInvalid, id.name, id.id, n)
		}
	}
	if v.AddBOS && v.BOS < 0 {
		return nil, fmt.Errorf("%w: add_bos_token set without a bos token", ErrInvalid)
	}
	if v.AddEOS && v.EOS < 0 {
		return nil, fmt.Errorf("%w: add_eos_token set without an eos token", ErrInvalid)
	}
	types := make([]int8, n)
	for i := range types {
		ty := int32(TypeNormal)
		if v.TokenTypes != nil {
			ty = v.TokenTypes[i]
		}
		if ty < TypeUndefined || ty > TypeByte {
			return nil, fmt.Errorf("%w: tokenizer.ggml.token_type: token %d has type %d, not a GGUF token type (%d..%d)", ErrInvalid, i, ty, TypeUndefined, TypeByte)
		}
		types[i] = int8(ty)
	}

	t := &Tokenizer{tokens: v.Tokens, bos: int64(v.BOS), eos: int64(v.EOS)}
	if err := t.index(); err != nil {
		return nil, err
	}
	var specials []special
	for id, tok := range v.Tokens {
		switch types[id] {
		case TypeControl, TypeUnknown, TypeUserDefined:
			if tok != "" {
				specials = append(specials, special{id: int64(id), text: tok, control: types[id] != TypeUserDefined})
			}
		}
	}
	if v.AddBOS {
		t.prefix = []int64{t.bos}
	}
	if v.AddEOS {
		t.suffix = []int64{t.eos}
	}

	var err error
	switch v.Model {
	case "gpt2":
		err = t.ggufBPE(v, types)
	case "llama":
		err = t.ggufSPM(v, types)
	default:
		err = fmt.Errorf("%w: tokenizer model %q (want gpt2 or llama)", ErrUnsupported, v.Model)
	}
	if err != nil {
		return nil, err
	}
	t.finish(specials, int64(v.EOT))
	return t, nil
}

// ggufBPE sets up byte-level BPE: the pre-tokenizer of v.Pre, byte tokens,
// merge ranks, and what each id decodes to.
func (t *Tokenizer) ggufBPE(v GGUFVocab, types []int8) error {
	pre, ignoreMerges, err := ggufPre(v.Pre)
	if err != nil {
		return err
	}
	t.pre = pre
	raw := make([]bool, len(types)) // control and user-defined tokens are stored as their text
	for id, ty := range types {
		raw[id] = ty == TypeControl || ty == TypeUserDefined || ty == TypeUnknown
	}
	merges, err := parseMerges(v.Merges, t.ids)
	if err != nil {
		return err
	}
	t.bpe, t.pieces = newBPEModel(t.tokens, raw, merges, ignoreMerges)
	return nil
}

// parseMerges turns "left right" lines into ranked merges. A line without
// the separating space, or naming a token (or a concatenation) the
// vocabulary lacks, is an error; a repeated pair keeps its first rank.
func parseMerges(lines []string, ids map[string]int64) (map[uint64]merge, error) {
	if len(lines) > maxMerges {
		return nil, fmt.Errorf("%w: %d merges (limit %d)", ErrInvalid, len(lines), maxMerges)
	}
	pairs := make([][2]string, len(lines))
	for i, line := range lines {
		// The separator is the first space after the first byte, as in
		// llama.cpp; byte-level tokens spell a space as "Ġ".
		k := -1
		if len(line) > 1 {
			k = strings.IndexByte(line[1:], ' ')
		}
		if k < 0 {
			return nil, fmt.Errorf("%w: merge %d %q is not two tokens separated by a space", ErrInvalid, i, line)
		}
		pairs[i] = [2]string{line[:k+1], line[k+2:]}
	}
	return rankMerges(pairs, ids)
}

func rankMerges(pairs [][2]string, ids map[string]int64) (map[uint64]merge, error) {
	if len(pairs) > maxMerges {
		return nil, fmt.Errorf("%w: %d merges (limit %d)", ErrInvalid, len(pairs), maxMerges)
	}
	merges := make(map[uint64]merge, len(pairs))
	var both []byte // the merged token's text, looked up without a string of its own
	for i, p := range pairs {
		l, ok1 := ids[p[0]]
		r, ok2 := ids[p[1]]
		both = append(append(both[:0], p[0]...), p[1]...)
		m, ok3 := ids[string(both)]
		if !ok1 || !ok2 || !ok3 {
			missing := p[0]
			switch {
			case !ok1:
			case !ok2:
				missing = p[1]
			default:
				missing = p[0] + p[1]
			}
			return nil, fmt.Errorf("%w: merge %d %q %q names %q, which is not in the vocabulary",
				ErrInvalid, i, p[0], p[1], missing)
		}
		k := pairKey(l, r)
		if _, dup := merges[k]; !dup {
			merges[k] = merge{rank: int32(i), id: int32(m)}
		}
	}
	return merges, nil
}

// newBPEModel builds the byte-level model and the decoded bytes of every
// id. raw marks ids whose text is literal (special tokens) rather than
// spelt in the byte alphabet.
func newBPEModel(tokens []string, raw []bool, merges map[uint64]merge, ignoreMerges bool) (*bpeModel, []string) {
	m := &bpeModel{merges: merges, ignoreMerges: ignoreMerges}
	if ignoreMerges {
		m.whole = map[string]int64{} // the only vocabulary that looks tokens up whole
	}
	pieces := make([]string, len(tokens))
	for i := range m.byteID {
		m.byteID[i] = -1
	}
	// The decoded pieces share one buffer (no token decodes to more bytes
	// than its text has), and it is never written again once sliced.
	total := 0
	for _, tok := range tokens {
		total += len(tok)
	}
	buf := make([]byte, 0, total)
	for id, tok := range tokens {
		if raw[id] {
			pieces[id] = tok
			continue
		}
		start := len(buf)
		var clean bool
		buf, clean = appendByteLevelDecoded(buf, tok)
		b := unsafe.String(unsafe.SliceData(buf[start:]), len(buf)-start)
		pieces[id] = b
		if !clean || b == "" {
			continue
		}
		if _, seen := m.whole[b]; m.whole != nil && !seen {
			m.whole[b] = int64(id)
		}
		if len(b) == 1 && m.byteID[b[0]] < 0 {
			m.byteID[b[0]] = int64(id)
		}
	}
	return m, pieces
}

// ggufSPM sets up SentencePiece-style BPE: mergeable pieces with scores,
// <0xNN> byte tokens, and what each id decodes to.
func (t *Tokenizer) ggufSPM(v GGUFVocab, types []int8) error {
	scores := v.Scores
	if scores == nil {
		scores = make([]float32, len(v.Tokens))
	}
	m := &spmModel{pieces: map[string]int64{}, scores: scores, unk: int64(v.UNK), spacePrefix: v.AddSpacePrefix}
	for i := range m.byteID {
		m.byteID[i] = -1
	}
	t.pieces = make([]string, len(v.Tokens))
	for id, tok := range v.Tokens {
		switch types[id] {
		case TypeByte:
			b, ok := parseByteToken(tok)
			if !ok {
				return fmt.Errorf("%w: byte token %d is %q, not <0xNN>", ErrInvalid, id, tok)
			}
			if m.byteID[b] < 0 {
				m.byteID[b] = int64(id)
			}
			t.pieces[id] = string([]byte{b})
		case TypeControl, TypeUnknown:
			t.pieces[id] = tok
		default: // normal, user-defined, unused, undefined
			t.pieces[id] = strings.ReplaceAll(tok, spaceMarker, " ")
			if tok != "" {
				if _, seen := m.pieces[tok]; !seen {
					m.pieces[tok] = int64(id)
				}
			}
		}
	}
	t.spm = m
	return nil
}

// parseByteToken reads "<0xNN>" (either case of hex digit).
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	var b byte
	for _, c := range s[3:5] {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = byte(c - '0')
		case 'a' <= c && c <= 'f':
			d = byte(c-'a') + 10
		case 'A' <= c && c <= 'F':
			d = byte(c-'A') + 10
		default:
			return 0, false
		}
		b = b<<4 | d
	}
	return b, true
}
