package tokenizer

import "slices"

// MaxPieceBytes is the length in bytes of the longest text one token
// decodes to: a text of n bytes needs at least n/MaxPieceBytes tokens
// (before normalization), which lets a server refuse a text too long for
// its context without encoding it.
func (t *Tokenizer) MaxPieceBytes() int {
	n := 1
	for _, p := range t.pieces {
		n = max(n, len(p))
	}
	return n
}

// ControlTexts are the texts that Encode turns into control tokens and
// EncodeOrdinary leaves as text (such as "<|im_start|>"), longest first.
func (t *Tokenizer) ControlTexts() []string {
	var out []string
	for _, sp := range t.specials.toks {
		if sp.control {
			out = append(out, sp.text)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}
