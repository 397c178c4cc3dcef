package tokenizer

import (
	"strings"
	"testing"
)

// FuzzEncodeDecode: on the toy byte-level and SentencePiece vocabularies,
// any input (invalid UTF-8 included) encodes to ids inside the vocabulary
// and decodes back to itself, whole or streamed. SentencePiece reads "▁" in
// the input as a space marker, so such input is not expected to round-trip.
func FuzzEncodeDecode(f *testing.F) {
	for _, c := range namedCases {
		f.Add(c.text)
	}
	f.Add("\xf0\x9f\x98")
	f.Add("\xff\xfe<|im_start|>\x80")
	bpe := mustTokenizer(f, toyBPEVocab())
	spm := mustTokenizer(f, toySPMVocab())
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range []*Tokenizer{bpe, spm} {
			for _, ids := range [][]int64{tok.Encode(s, false), tok.EncodeOrdinary(s)} {
				for _, id := range ids {
					if id < 0 || id >= int64(tok.VocabSize()) {
						t.Fatalf("Encode(%q) gave id %d outside the vocabulary", s, id)
					}
				}
				if tok.spm != nil && strings.Contains(s, spaceMarker) {
					continue
				}
				if got := tok.Decode(ids); got != s {
					t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
				}
				d := tok.NewStreamDecoder()
				var b strings.Builder
				for _, id := range ids {
					b.WriteString(d.Next(id))
				}
				b.WriteString(d.Flush())
				if b.String() != s {
					t.Fatalf("stream decoded %q, want %q", b.String(), s)
				}
			}
		}
	})
}
