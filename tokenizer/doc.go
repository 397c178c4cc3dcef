// Package tokenizer turns text into token ids and back for the model
// families ovrun runs, in pure Go.
//
// Two vocabularies are supported:
//
//   - byte-level BPE with ranked merges (GGUF tokenizer.ggml.model "gpt2";
//     Hugging Face tokenizer.json with a ByteLevel pre-tokenizer): GPT-2,
//     SmolLM2, Llama 3, Qwen2. Text is split by the family's pre-tokenizer
//     regex (GGUF pre types "smollm", "gpt2"/"default", "llama-bpe",
//     "qwen2"), each piece is mapped to GPT-2's printable byte alphabet and
//     merged by rank.
//   - SentencePiece-style BPE (GGUF model "llama"): pieces merged by score
//     over the vocabulary, "▁" as the space marker, an optional space prefix
//     and <0xNN> byte fallback, as llama.cpp does for Llama 2 and Mistral.
//
// Build a Tokenizer with FromGGUF (metadata handed over as a plain struct, so
// this package does not depend on a GGUF reader) or FromHFJSON. A Tokenizer is
// safe for concurrent use.
//
// Special tokens (GGUF control and user-defined tokens, tokenizer.json
// added_tokens) written in the text are recognised by Encode and map to
// their ids; EncodeOrdinary leaves control tokens as plain text, for
// untrusted input. BOS/EOS are added only when asked and the vocabulary says
// so. Decode is lossless: byte tokens that do not form valid UTF-8 come back
// as those bytes; a StreamDecoder holds back an incomplete UTF-8 sequence
// until its last byte arrives, for printing tokens as they are generated.
//
// A pre-tokenizer pattern from a tokenizer.json is checked before use: one
// that would backtrack catastrophically is refused, one without lookaround
// runs on Go's linear-time regexp, and the others run under a time bound
// per match (RegexOverruns counts the pieces that ran out).
package tokenizer
