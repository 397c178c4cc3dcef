package tokenizer

import "fmt"

// index builds the text -> id map, refusing over-long or duplicate tokens
// (llama.cpp asserts the same). Empty entries are unassigned ids.
func (t *Tokenizer) index() error {
	t.ids = make(map[string]int64, len(t.tokens))
	for id, tok := range t.tokens {
		if len(tok) > maxTokenBytes {
			return fmt.Errorf("%w: token %d is %d bytes long (limit %d)", ErrInvalid, id, len(tok), maxTokenBytes)
		}
		if tok == "" {
			continue
		}
		if prev, dup := t.ids[tok]; dup {
			return fmt.Errorf("%w: token %q is both id %d and id %d", ErrInvalid, tok, prev, id)
		}
		t.ids[tok] = int64(id)
	}
	return nil
}

// eogNames are the control tokens that end a turn in the chat formats of
// the families this package serves (llama.cpp keeps a similar list).
var eogNames = map[string]bool{
	"<|endoftext|>": true, "<|im_end|>": true, "<|eot_id|>": true, "<|eom_id|>": true,
	"<|end_of_text|>": true, "<|end|>": true, "<end_of_turn>": true, "<EOT>": true,
}

// finish sets up special-token matching, the split and end-of-generation
// sets. Both constructors end here.
func (t *Tokenizer) finish(specials []special, eot int64) {
	t.specials = newSpecialMatcher(specials)
	n := len(t.tokens)
	t.split = make([]bool, n)
	t.eog = make([]bool, n)
	for _, sp := range specials {
		t.split[sp.id] = true
		if sp.control && eogNames[sp.text] {
			t.eog[sp.id] = true
		}
	}
	for _, id := range append(append([]int64{t.bos, t.eos}, t.prefix...), t.suffix...) {
		if id >= 0 {
			t.split[id] = true
		}
	}
	for _, id := range []int64{t.eos, eot} {
		if id >= 0 {
			t.eog[id] = true
		}
	}
}
