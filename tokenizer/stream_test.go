package tokenizer

import (
	"slices"
	"testing"
)

// TestStreamDecoderHoldsPartialCharacters: an emoji split across tokens
// appears only with its last byte, and the pieces join to Decode's text.
func TestStreamDecoderHoldsPartialCharacters(t *testing.T) {
	tests := []struct {
		name  string
		vocab GGUFVocab
		text  string
		want  []string // what Next returns for each id of Encode(text)
	}{
		// "\xf0\x9f\x98" is one merged token, "\x80" a byte token.
		{name: "bpe merged prefix", vocab: toyBPEVocab(), text: "😀", want: []string{"", "😀"}},
		{name: "bpe text around", vocab: toyBPEVocab(), text: "the 😀!", want: []string{"t", "he", " ", "", "😀", "!"}},
		// Byte fallback: "▁" then four <0xNN> tokens.
		{name: "spm byte fallback", vocab: toySPMVocab(), text: "😀", want: []string{"", "", "", "", "😀"}},
		{name: "spm words", vocab: toySPMVocab(), text: "hello 😀 world", want: []string{"hello", " ", "", "", "", "😀", " world"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := mustTokenizer(t, tt.vocab)
			ids := tok.Encode(tt.text, false)
			d := tok.NewStreamDecoder()
			var got []string
			joined := ""
			for _, id := range ids {
				s := d.Next(id)
				got = append(got, s)
				joined += s
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Next for ids %v returned %q, want %q", ids, got, tt.want)
			}
			if rest := d.Flush(); rest != "" || joined != tok.Decode(ids) {
				t.Errorf("joined %q (flush %q), Decode %q", joined, rest, tok.Decode(ids))
			}
		})
	}
}

// TestStreamDecoderInvalidAndTruncated: bytes that cannot start or continue
// UTF-8 pass straight through; an unfinished character comes out of Flush.
func TestStreamDecoderInvalidAndTruncated(t *testing.T) {
	tok := mustTokenizer(t, toySPMVocab())
	byteID := func(b byte) int64 { return tok.spm.byteID[b] }
	d := tok.NewStreamDecoder()
	if s := d.Next(byteID(0xff)); s != "\xff" {
		t.Errorf("Next(<0xFF>) = %q, want the byte at once", s)
	}
	if s := d.Next(byteID(0x80)); s != "\x80" {
		t.Errorf("Next(<0x80>) = %q, want the stray continuation byte at once", s)
	}
	if s := d.Next(byteID(0xe2)) + d.Next(byteID(0x82)); s != "" {
		t.Errorf("two bytes of a three-byte character gave %q", s)
	}
	if s := d.Flush(); s != "\xe2\x82" {
		t.Errorf("Flush = %q, want the held bytes", s)
	}
	if s := d.Next(byteID('a')); s != "a" {
		t.Errorf("after Flush, Next = %q", s)
	}
	// A held prefix followed by a byte that breaks it is passed on whole.
	if s := d.Next(byteID(0xe2)) + d.Next(byteID('b')); s != "\xe2b" {
		t.Errorf("broken sequence gave %q", s)
	}
	if s := d.Next(-1) + d.Next(1<<30); s != "" {
		t.Errorf("ids outside the vocabulary gave %q", s)
	}
}
