package chat

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"

	"github.com/ovtoolkit/ovrun/tokenizer"
)

// PromptIDs renders a conversation with the chat template and encodes it.
// Unless controlInContent, text in a message's content that names a control
// token (such as "<|im_end|>") stays text: it is encoded as the ordinary
// tokens of its characters, so a user cannot end their turn or write one
// for the assistant or the system. The template's own control tokens are
// control tokens either way.
func (t *Template) PromptIDs(ctx context.Context, tok *tokenizer.Tokenizer, msgs []Message, controlInContent bool) ([]int64, error) {
	controls := tok.ControlTexts()
	if controlInContent || !mentionsAny(msgs, controls) {
		text, err := t.Render(ctx, msgs, true)
		if err != nil {
			return nil, err
		}
		return tok.Encode(text, false), nil
	}
	// Each control text in the contents becomes a marker no template or
	// user can write (private-use characters around a random nonce), the
	// conversation is rendered, and the markers are encoded as text.
	var nb [8]byte
	_, _ = rand.Read(nb[:])
	nonce := hex.EncodeToString(nb[:])
	pairs := make([]string, 0, 2*len(controls))
	for i, c := range controls {
		pairs = append(pairs, c, "\uE000"+nonce+strconv.Itoa(i)+"\uE001")
	}
	hide := strings.NewReplacer(pairs...)
	hidden := make([]Message, len(msgs))
	for i, m := range msgs {
		hidden[i] = Message{Role: m.Role, Content: hide.Replace(m.Content)}
	}
	text, err := t.Render(ctx, hidden, true)
	if err != nil {
		return nil, err
	}
	marker := regexp.MustCompile("\uE000" + nonce + "([0-9]+)\uE001")
	var ids []int64
	last := 0
	for _, m := range marker.FindAllStringSubmatchIndex(text, -1) {
		ids = append(ids, tok.Encode(text[last:m[0]], false)...)
		k, _ := strconv.Atoi(text[m[2]:m[3]])
		ids = append(ids, tok.EncodeOrdinary(controls[k])...)
		last = m[1]
	}
	return append(ids, tok.Encode(text[last:], false)...), nil
}

func mentionsAny(msgs []Message, texts []string) bool {
	for _, m := range msgs {
		for _, x := range texts {
			if strings.Contains(m.Content, x) {
				return true
			}
		}
	}
	return false
}
