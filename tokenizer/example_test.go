package tokenizer_test

import (
	"fmt"
	"log"

	"github.com/ovtoolkit/ovrun/tokenizer"
)

// A GGUF loader fills a GGUFVocab from the file's tokenizer.ggml.* keys,
// starting from NewGGUFVocab's defaults for keys the file leaves out. This
// one is built by hand: a tiny SentencePiece-style vocabulary with byte
// fallback.
func Example() {
	v := tokenizer.NewGGUFVocab("llama", "") // BOS 1, EOS 2, UNK 0, add_bos, space prefix
	add := func(tok string, score float32, typ int32) {
		v.Tokens = append(v.Tokens, tok)
		v.Scores = append(v.Scores, score)
		v.TokenTypes = append(v.TokenTypes, typ)
	}
	add("<unk>", 0, tokenizer.TypeUnknown)
	add("<s>", 0, tokenizer.TypeControl)
	add("</s>", 0, tokenizer.TypeControl)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), 0, tokenizer.TypeByte)
	}
	for _, c := range []string{"▁", "h", "e", "l", "o", "w", "r", "d"} {
		add(c, -10, tokenizer.TypeNormal)
	}
	for i, p := range []string{"ll", "he", "llo", "hello", "▁hello", "▁w", "or", "ld", "▁wor", "▁world"} {
		add(p, -1-float32(i)/2, tokenizer.TypeNormal) // higher scores merge first
	}

	tok, err := tokenizer.FromGGUF(v)
	if err != nil {
		log.Fatal(err)
	}
	ids := tok.Encode("hello world!</s>", true)
	for _, id := range ids {
		fmt.Printf("%d %q\n", id, tok.Token(id))
	}
	fmt.Printf("%q, ends generation: %v\n", tok.Decode(ids), tok.IsEOG(ids[len(ids)-1]))

	// Output:
	// 1 "<s>"
	// 271 "▁hello"
	// 276 "▁world"
	// 36 "<0x21>"
	// 2 "</s>"
	// "<s>hello world!</s>", ends generation: true
}

// A StreamDecoder prints generated tokens as they come, holding back the
// bytes of a character until it is whole.
func ExampleStreamDecoder() {
	v := tokenizer.NewGGUFVocab("llama", "")
	v.AddSpacePrefix = false
	v.Tokens = []string{"<unk>", "<s>", "</s>"}
	v.TokenTypes = []int32{tokenizer.TypeUnknown, tokenizer.TypeControl, tokenizer.TypeControl}
	for b := range 256 {
		v.Tokens = append(v.Tokens, fmt.Sprintf("<0x%02X>", b))
		v.TokenTypes = append(v.TokenTypes, tokenizer.TypeByte)
	}
	tok, err := tokenizer.FromGGUF(v)
	if err != nil {
		log.Fatal(err)
	}
	d := tok.NewStreamDecoder()
	for _, id := range tok.Encode("ok👍", false) { // six byte tokens
		fmt.Printf("%q ", d.Next(id))
	}
	fmt.Printf("%q\n", d.Flush())
	// Output:
	// "o" "k" "" "" "" "👍" ""
}
