package tokenizer

// GPT-2's byte-level alphabet: every byte maps to one printable rune, so a
// BPE vocabulary of strings can spell any byte sequence. Printable Latin-1
// bytes map to themselves; the rest (controls, space, 0x7F-0xA0, 0xAD) map to
// U+0100 upward in byte order, so ' ' is 'Ġ' and '\n' is 'Ċ'.
var byteRune, runeByte = byteAlphabet()

func byteAlphabet() ([256]rune, map[rune]byte) {
	var br [256]rune
	rb := make(map[rune]byte, 256)
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
		rb[r] = byte(b)
	}
	return br, rb
}

// byteLevelDecode maps a vocabulary string back to the bytes it spells. A
// rune outside the alphabet (a malformed vocabulary) is kept as its UTF-8.
func byteLevelDecode(s string) (string, bool) {
	out := make([]byte, 0, len(s))
	clean := true
	for _, r := range s {
		if b, ok := runeByte[r]; ok {
			out = append(out, b)
			continue
		}
		clean = false
		out = append(out, string(r)...)
	}
	return string(out), clean
}

// byteLevelEncode spells bytes in the alphabet.
func byteLevelEncode(s string) string {
	out := make([]rune, 0, len(s))
	for i := 0; i < len(s); i++ {
		out = append(out, byteRune[s[i]])
	}
	return string(out)
}
