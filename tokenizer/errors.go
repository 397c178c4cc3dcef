package tokenizer

import "errors"

var (
	// ErrInvalid reports a malformed vocabulary, merge list or tokenizer.json.
	ErrInvalid = errors.New("invalid tokenizer")
	// ErrUnsupported reports a tokenizer kind, pre-tokenizer or option this
	// package does not implement; it never guesses.
	ErrUnsupported = errors.New("unsupported tokenizer")
	// ErrVocabMismatch reports a tokenizer whose ids do not fit the model.
	ErrVocabMismatch = errors.New("tokenizer does not match the model")
)

// Limits on what a vocabulary may hold; anything larger is refused as absurd
// rather than allocated.
const (
	maxVocab      = 1 << 21  // tokens (the largest real vocabularies are ~262K)
	maxMerges     = 1 << 22  // merge rules
	maxTokenBytes = 64 << 10 // bytes in one token's text
	maxJSONBytes  = 64 << 20 // bytes in a tokenizer.json
)
