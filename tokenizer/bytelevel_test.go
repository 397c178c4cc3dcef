package tokenizer

import (
	"bytes"
	"testing"
)

// TestByteLevelRoundTrip: every byte spelt in GPT-2's alphabet decodes back
// to itself ("Ġ" to a space, "Ċ" to a newline), and a rune outside the
// alphabet is kept as its UTF-8 and reported.
func TestByteLevelRoundTrip(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	got, clean := appendByteLevelDecoded([]byte("x"), byteLevelEncode(string(all)))
	if !clean || !bytes.Equal(got, append([]byte("x"), all...)) {
		t.Fatalf("the 256 bytes decoded to %q (clean %v)", got, clean)
	}
	if got, clean := appendByteLevelDecoded(nil, "ĠaĊ"); !clean || string(got) != " a\n" {
		t.Errorf(`"ĠaĊ" decoded to %q (clean %v), want " a\n"`, got, clean)
	}
	if got, clean := appendByteLevelDecoded(nil, "a€"); clean || string(got) != "a€" {
		t.Errorf(`"a€" decoded to %q (clean %v), want it kept and not clean`, got, clean)
	}
}
