package tokenizer

import "testing"

// BenchmarkEncode encodes about 6,000 characters of mixed text with the
// SmolLM2 vocabulary: warm (words cached after the first pass), cold (the
// word cache emptied before every pass), and the SentencePiece toy.
func BenchmarkEncode(b *testing.B) {
	ref := bpeReference(b)
	tok := mustTokenizer(b, ref.vocab)
	text := longText()
	b.Run("smollm2 warm", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			tok.Encode(text, false)
		}
	})
	b.Run("smollm2 cold", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			tok.bpe.cache = wordCache{}
			tok.Encode(text, false)
		}
	})
	spm := mustTokenizer(b, toySPMVocab())
	b.Run("spm toy", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			spm.Encode(text, false)
		}
	})
}

// BenchmarkFromGGUF builds the SmolLM2 tokenizer (49,152 tokens, 48,900
// merges) from its metadata.
func BenchmarkFromGGUF(b *testing.B) {
	ref := bpeReference(b)
	for b.Loop() {
		mustTokenizer(b, ref.vocab)
	}
}
