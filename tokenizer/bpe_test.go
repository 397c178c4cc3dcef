package tokenizer

import (
	"path/filepath"
	"testing"
)

// TestGGUFMatchesHuggingFace compares FromGGUF over the real SmolLM2
// vocabulary and merges with Hugging Face tokenizers built from the same
// vocabulary, for each pre-tokenizer family: ids equal on every case, with
// and without specials, and a lossless round trip.
func TestGGUFMatchesHuggingFace(t *testing.T) {
	ref := bpeReference(t)
	tests := []struct {
		name   string // reference tokenizer
		pre    string // tokenizer.ggml.pre
		addBOS int    // BOS id the reference's template adds, -1 for none
	}{
		{name: "smollm", pre: "smollm", addBOS: -1}, // the file's own pre type
		{name: "gpt2", pre: "gpt2", addBOS: -1},
		{name: "llama3", pre: "llama-bpe", addBOS: 0},
		{name: "qwen2", pre: "qwen2", addBOS: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := ref.vocab
			v.Pre = tt.pre
			v.AddBOS, v.BOS = tt.addBOS >= 0, tt.addBOS
			tok, err := FromGGUF(v)
			if err != nil {
				t.Fatal(err)
			}
			exp := ref.expected[tt.name]
			for i, c := range allCases() {
				plain := tok.Encode(c.text, false)
				compareIDs(t, tok, c, plain, exp.Plain[i])
				compareIDs(t, tok, c, tok.Encode(c.text, true), exp.Special[i])
				checkRoundTrip(t, tok, c, plain)
			}
		})
	}
}

// TestHFJSONMatchesHuggingFace loads the tokenizer.json files the reference
// wrote (SmolLM2's own layout with "a b" merges; Llama 3's Split regex with
// ignore_merges and a BOS template; Qwen2's Split regex with and without an
// NFC normalizer; digit runs with add_prefix_space) and compares with
// tokenizers loading the same files.
func TestHFJSONMatchesHuggingFace(t *testing.T) {
	ref := bpeReference(t)
	for _, name := range []string{"smollm", "gpt2", "llama3", "qwen2", "qwen2-nfc", "runs-prefix"} {
		t.Run(name, func(t *testing.T) {
			tok, err := FromHFJSON(filepath.Join(ref.dir, name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := tok.VocabSize(), len(ref.vocab.Tokens); got != want {
				t.Errorf("VocabSize = %d, want %d", got, want)
			}
			exp := ref.expected[name]
			for i, c := range allCases() {
				plain := tok.Encode(c.text, false)
				compareIDs(t, tok, c, plain, exp.Plain[i])
				compareIDs(t, tok, c, tok.Encode(c.text, true), exp.Special[i])
				if name != "qwen2-nfc" && name != "runs-prefix" { // both change the text on purpose
					checkRoundTrip(t, tok, c, plain)
				}
			}
		})
	}
}

// TestSmolLM2Specials checks the accessors on the real vocabulary against
// the GGUF's own metadata (bos 1, eos 2, ChatML control tokens).
func TestSmolLM2Specials(t *testing.T) {
	ref := bpeReference(t)
	tok, err := FromGGUF(ref.vocab)
	if err != nil {
		t.Fatal(err)
	}
	if tok.BOS() != 1 || tok.EOS() != 2 || tok.VocabSize() != 49152 {
		t.Errorf("BOS %d EOS %d VocabSize %d, want 1 2 49152", tok.BOS(), tok.EOS(), tok.VocabSize())
	}
	for _, tc := range []struct {
		token string
		id    int64
		eog   bool
	}{
		{"<|endoftext|>", 0, true},
		{"<|im_start|>", 1, false},
		{"<|im_end|>", 2, true},
		{"<repo_name>", 3, false},
		{"Ġthe", 260, false},
	} {
		id, ok := tok.TokenID(tc.token)
		if !ok || id != tc.id || tok.IsEOG(id) != tc.eog {
			t.Errorf("TokenID(%q) = %d, %v, IsEOG %v; want %d, true, %v", tc.token, id, ok, tok.IsEOG(id), tc.id, tc.eog)
		}
	}
	if _, ok := tok.TokenID("no such token"); ok {
		t.Error("TokenID found a token that is not in the vocabulary")
	}
	// add_bos_token is false in the file: nothing is added.
	if ids := tok.Encode("hi", true); len(ids) != 1 {
		t.Errorf("Encode(hi, true) = %v, want one id", ids)
	}
	// EncodeOrdinary leaves control tokens as text.
	ids := tok.EncodeOrdinary("<|im_end|>")
	if len(ids) < 2 || tok.Decode(ids) != "<|im_end|>" {
		t.Errorf("EncodeOrdinary(<|im_end|>) = %v", ids)
	}
	if err := tok.CheckVocabSize(49152); err != nil {
		t.Error(err)
	}
}
