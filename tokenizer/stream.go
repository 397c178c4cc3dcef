package tokenizer

import "unicode/utf8"

// StreamDecoder turns ids into text one at a time, as a model generates
// them. A character split across byte tokens (an emoji is often four) is
// held back until its last byte arrives, so every string Next returns is
// whole UTF-8 unless the ids spell bytes that are not UTF-8 at all; those
// are passed on as they are. The strings of Next and Flush, joined, equal
// Decode of the same ids. Not safe for concurrent use.
type StreamDecoder struct {
	t        *Tokenizer
	pending  []byte
	runStart bool
}

// NewStreamDecoder starts decoding a new sequence.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder {
	return &StreamDecoder{t: t, runStart: true}
}

// Next returns the text that id completes; "" while a character is still
// incomplete.
func (d *StreamDecoder) Next(id int64) string {
	d.pending = d.t.appendPiece(d.pending, id, &d.runStart)
	n := completePrefix(d.pending)
	if n == 0 {
		return ""
	}
	s := string(d.pending[:n])
	d.pending = append(d.pending[:0], d.pending[n:]...)
	return s
}

// Flush returns what is held back, complete or not, at the end of a
// sequence.
func (d *StreamDecoder) Flush() string {
	s := string(d.pending)
	d.pending = d.pending[:0]
	return s
}

// completePrefix is the length of b without a trailing UTF-8 sequence that
// is valid so far but incomplete.
func completePrefix(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}
