package tokenizer

import (
	"fmt"
	"testing"
)

// toyBPEVocab is a small byte-level vocabulary: three control tokens, the
// 256 byte tokens, and a few merges, one of which makes a token that is
// only the first three bytes of an emoji.
func toyBPEVocab() GGUFVocab {
	v := NewGGUFVocab("gpt2", "smollm")
	v.Tokens = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
	v.TokenTypes = []int32{TypeControl, TypeControl, TypeControl}
	v.BOS, v.EOS = 1, 2
	for b := range 256 {
		v.Tokens = append(v.Tokens, byteLevelEncode(string([]byte{byte(b)})))
		v.TokenTypes = append(v.TokenTypes, TypeNormal)
	}
	for _, m := range [][2]string{
		{" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"}, {"in", "g"}, {"e", "r"},
		{" ", "a"}, {" ", " "}, {"1", "2"}, {"\xf0", "\x9f"}, {"\xf0\x9f", "\x98"},
	} {
		l, r := byteLevelEncode(m[0]), byteLevelEncode(m[1])
		v.Merges = append(v.Merges, l+" "+r)
		v.Tokens = append(v.Tokens, l+r)
		v.TokenTypes = append(v.TokenTypes, TypeNormal)
	}
	return v
}

// toySPMVocab is a small SentencePiece-style vocabulary with byte fallback.
func toySPMVocab() GGUFVocab {
	v := NewGGUFVocab("llama", "")
	add := func(tok string, score float32, ty int32) {
		v.Tokens = append(v.Tokens, tok)
		v.Scores = append(v.Scores, score)
		v.TokenTypes = append(v.TokenTypes, ty)
	}
	add("<unk>", 0, TypeUnknown)
	add("<s>", 0, TypeControl)
	add("</s>", 0, TypeControl)
	add("<|im_start|>", 0, TypeControl)
	add("<|im_end|>", 0, TypeControl)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), 0, TypeByte)
	}
	for _, c := range []string{"▁", "h", "e", "l", "o", "w", "r", "d"} {
		add(c, -10, TypeNormal)
	}
	for i, p := range []string{"ll", "he", "llo", "hello", "▁hello", "▁w", "or", "ld", "▁wor", "▁world"} {
		add(p, -1-float32(i)/2, TypeNormal)
	}
	return v
}

func mustTokenizer(t testing.TB, v GGUFVocab) *Tokenizer {
	t.Helper()
	tok, err := FromGGUF(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
