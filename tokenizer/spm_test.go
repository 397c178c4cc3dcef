package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// TestSPMMatchesSentencePiece feeds the pieces, scores and types of a
// SentencePiece BPE model trained by the reference (byte_fallback, identity
// normalization, dummy prefix) to FromGGUF as model "llama", and compares
// with sentencepiece's own encode.
func TestSPMMatchesSentencePiece(t *testing.T) {
	ref := spmReference(t)
	tok, err := FromGGUF(ref.vocab)
	if err != nil {
		t.Fatal(err)
	}
	byteTokens := 0
	for i, c := range ref.cases {
		// sentencepiece does not parse control symbols out of text:
		// EncodeOrdinary is the same contract.
		ids := tok.EncodeOrdinary(c.text)
		compareIDs(t, tok, c, ids, ref.expected[i])
		for _, id := range ids {
			if strings.HasPrefix(tok.Token(id), "<0x") {
				byteTokens++
			}
		}
		// "▁" in the input reads as a space marker in both; it cannot round-trip.
		if !strings.Contains(c.text, spaceMarker) {
			checkRoundTrip(t, tok, c, ids)
			checkRoundTrip(t, tok, c, tok.Encode(c.text, false))
		}
	}
	if byteTokens == 0 {
		t.Error("no case used byte fallback; the test does not cover it")
	}
}

// TestSPMSpecials checks Encode with control tokens on the SentencePiece
// model the way llama.cpp tokenizes them: each stretch of text between
// control tokens is encoded on its own, with its own space prefix, which is
// sentencepiece's encoding of that stretch; BOS comes first with specials.
func TestSPMSpecials(t *testing.T) {
	ref := spmReference(t)
	tok, err := FromGGUF(ref.vocab)
	if err != nil {
		t.Fatal(err)
	}
	refIDs := map[string][]int64{}
	for i, c := range ref.cases {
		refIDs[c.text] = ref.expected[i]
	}
	checked := 0
	for _, c := range allCases() {
		parts, controls := splitControls(c.text)
		if len(controls) == 0 {
			continue
		}
		want := []int64{tok.BOS()}
		for i, part := range parts {
			want = append(want, refIDs[part]...)
			if i < len(controls) {
				id, ok := tok.TokenID(controls[i])
				if !ok {
					t.Fatalf("control token %q missing from the trained model", controls[i])
				}
				want = append(want, id)
			}
		}
		compareIDs(t, tok, c, tok.Encode(c.text, true), want)
		if !strings.Contains(c.text, spaceMarker) {
			checkRoundTrip(t, tok, c, tok.Encode(c.text, false))
		}
		checked++
	}
	if checked < 5 {
		t.Fatalf("only %d cases with control tokens", checked)
	}
	if tok.BOS() != 1 || tok.EOS() != 2 || !tok.IsEOG(2) || tok.IsEOG(1) {
		t.Errorf("BOS %d EOS %d IsEOG(2) %v IsEOG(1) %v", tok.BOS(), tok.EOS(), tok.IsEOG(2), tok.IsEOG(1))
	}
	if got := tok.Encode("", true); !slices.Equal(got, []int64{1}) {
		t.Errorf("Encode(\"\", true) = %v, want [1]", got)
	}
}
