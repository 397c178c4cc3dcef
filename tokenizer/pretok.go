package tokenizer

import (
	"fmt"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// A preStage splits a piece of text into smaller pieces, in order, without
// dropping or changing a byte (except prefixSpace, which adds one).
type preStage interface {
	split(s string, emit func(string))
}

// The pre-tokenizer regexes, as the published tokenizer.json files write
// them. Go's regexp has no lookahead, which `\s+(?!\S)` needs; regexp2 (a
// port of .NET's backtracking engine) runs them unchanged, on runes, with
// Unicode classes for \s, \p{L} and \p{N} (regex.go says which engine
// runs a pattern from a file, and for how long).
const (
	// GPT-2's, also what a ByteLevel pre-tokenizer with use_regex applies.
	regexGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// Llama 3's (Meta-Llama-3-8B tokenizer.json).
	regexLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Qwen2's: Llama 3's with single digits.
	regexQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// regexSplit cuts s into the matches of re and the stretches between them
// (Hugging Face's Split with behavior Isolated; llama.cpp's regex split).
// When matching stops early (see regex.go) the rest of s is one piece, and
// overruns counts it.
type regexSplit struct {
	re       *splitRegex
	overruns *atomic.Int64
}

func newRegexSplit(re *splitRegex) regexSplit {
	return regexSplit{re: re, overruns: new(atomic.Int64)}
}

func (r regexSplit) split(s string, emit func(string)) {
	idx, stopped := r.re.findAll(s)
	last := 0
	for _, m := range idx {
		if m[0] > last {
			emit(s[last:m[0]])
		}
		if m[1] > m[0] {
			emit(s[m[0]:m[1]])
		}
		last = m[1]
	}
	if stopped {
		r.overruns.Add(1)
	}
	if last < len(s) {
		emit(s[last:])
	}
}

// RegexOverruns is how many times a pre-tokenizer pattern stopped matching
// before the end of a piece of text, because a match ran past its time or
// backtracking bound (only patterns from a tokenizer.json that need the
// backtracking engine have a time bound). The rest of that piece was
// encoded as one word: its bytes are all there, its ids may differ from
// what Hugging Face gives.
func (t *Tokenizer) RegexOverruns() int64 {
	var n int64
	for _, st := range t.pre {
		if r, ok := st.(regexSplit); ok {
			n += r.overruns.Load()
		}
	}
	return n
}

// digitSplit cuts numeric characters (Unicode category N, Rust's
// char::is_numeric) from the rest: each on its own when individual, else
// in runs (Hugging Face's Digits pre-tokenizer).
type digitSplit struct{ individual bool }

func (d digitSplit) split(s string, emit func(string)) {
	start, inDigits := 0, false
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		isDigit := r != utf8.RuneError && unicode.IsNumber(r)
		if isDigit != inDigits || (isDigit && d.individual) {
			if i > start {
				emit(s[start:i])
			}
			start = i
		}
		inDigits = isDigit
		i += n
	}
	if start < len(s) {
		emit(s[start:])
	}
}

// prefixSpace puts a space in front of a piece that does not start with one
// (ByteLevel's add_prefix_space, applied to every piece it is handed).
type prefixSpace struct{}

func (prefixSpace) split(s string, emit func(string)) {
	if s[0] != ' ' {
		s = " " + s
	}
	emit(s)
}

// ggufPre returns the pre-tokenizer of a tokenizer.ggml.pre value and
// whether that family skips the merges of a word that is itself a token.
// The names are llama.cpp's; an unknown one is refused rather than guessed.
func ggufPre(pre string) ([]preStage, bool, error) {
	var patterns []string
	digits, ignoreMerges := false, false
	switch pre {
	case "smollm", "starcoder", "refact", "codeshell", "command-r", "exaone", "minerva-7b":
		digits, patterns = true, []string{regexGPT2}
	case "", "default", "gpt2", "gpt-2", "phi-2", "olmo", "mpt", "jais":
		// llama.cpp's "default" (no pre recorded) is an older regex mix;
		// GPT-2's regex is what the original byte-level BPE tokenizers use.
		patterns = []string{regexGPT2}
	case "llama3", "llama-v3", "llama-bpe", "falcon3":
		patterns, ignoreMerges = []string{regexLlama3}, true
	case "qwen2", "deepseek-r1-qwen", "stablelm2", "megrez":
		patterns = []string{regexQwen2}
	default:
		return nil, false, fmt.Errorf("%w: pre-tokenizer %q", ErrUnsupported, pre)
	}
	var stages []preStage
	if digits {
		stages = append(stages, digitSplit{individual: true})
	}
	for _, p := range patterns {
		re, err := compileRegex(p)
		if err != nil {
			return nil, false, err
		}
		stages = append(stages, newRegexSplit(re))
	}
	return stages, ignoreMerges, nil
}
