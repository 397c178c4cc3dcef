package tokenizer

import (
	"errors"
	"strings"
	"testing"
)

// TestFromGGUFRefusesUnknownTokenTypes: a type outside GGUF's 0..6 is an
// error naming tokenizer.ggml.token_type and the token, whatever the model.
func TestFromGGUFRefusesUnknownTokenTypes(t *testing.T) {
	for _, vocab := range []func() GGUFVocab{toyBPEVocab, toySPMVocab} {
		for _, ty := range []int32{-1, 7, 1 << 30} {
			v := vocab()
			v.TokenTypes[4] = ty
			_, err := FromGGUF(v)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "tokenizer.ggml.token_type: token 4 has type") {
				t.Errorf("%s vocabulary, type %d: error %v", v.Model, ty, err)
			}
		}
		for ty := int32(TypeUndefined); ty <= TypeByte; ty++ {
			v := vocab()
			if ty == TypeByte && v.Model == "llama" {
				continue // a byte token must be spelt <0xNN>
			}
			v.TokenTypes[len(v.TokenTypes)-1] = ty
			if _, err := FromGGUF(v); err != nil {
				t.Errorf("%s vocabulary, type %d: %v", v.Model, ty, err)
			}
		}
	}
}
