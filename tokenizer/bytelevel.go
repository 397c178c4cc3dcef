package tokenizer

// GPT-2's byte-level alphabet: every byte maps to one printable rune, so a
// BPE vocabulary of strings can spell any byte sequence. Printable Latin-1
// bytes map to themselves; the rest (controls, space, 0x7F-0xA0, 0xAD) map to
// U+0100 upward in byte order, so ' ' is 'Ġ' and '\n' is 'Ċ'.
var byteRune, runeByte = byteAlphabet()

// alphabetEnd bounds the alphabet's runes: 256 bytes, 68 of them moved to
// U+0100 upward.
const alphabetEnd = 0x200

// byteAlphabet is the rune of every byte, and the byte of every rune below
// alphabetEnd (-1 for a rune outside the alphabet).
func byteAlphabet() ([256]rune, [alphabetEnd]int16) {
	var br [256]rune
	var rb [alphabetEnd]int16
	for i := range rb {
		rb[i] = -1
	}
	printable := func(b int) bool {
		return ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF)
	}
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !printable(b) {
			r = rune(256 + n)
			n++
		}
		br[b] = r
		rb[r] = int16(b)
	}
	return br, rb
}

// appendByteLevelDecoded appends the bytes a vocabulary string spells to
// dst, and whether every rune was in the alphabet (a rune outside it, in
// a malformed vocabulary, is kept as its UTF-8). A table rather than a
// map: it runs for every token of a vocabulary when a tokenizer is built.
func appendByteLevelDecoded(dst []byte, s string) ([]byte, bool) {
	clean := true
	for _, r := range s {
		if r >= 0 && r < alphabetEnd && runeByte[r] >= 0 {
			dst = append(dst, byte(runeByte[r]))
			continue
		}
		clean = false
		dst = append(dst, string(r)...)
	}
	return dst, clean
}

// byteLevelEncode spells bytes in the alphabet.
func byteLevelEncode(s string) string {
	out := make([]rune, 0, len(s))
	for i := 0; i < len(s); i++ {
		out = append(out, byteRune[s[i]])
	}
	return string(out)
}
