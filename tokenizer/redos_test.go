package tokenizer

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlclark/regexp2/v2"
	"github.com/dlclark/regexp2/v2/syntax"
)

// publishedPatterns are pre-tokenizer patterns of real tokenizer.json files
// (and the ones this package uses for GGUF): none may be refused.
var publishedPatterns = []struct{ name, pattern string }{
	{"gpt2", regexGPT2},
	{"llama3", regexLlama3},
	{"qwen2", regexQwen2},
	{"gpt-4o", `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`},
	{"tekken", `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`},
	{"deepseek digits", `\p{N}{1,3}`},
	{"deepseek cjk", `[一-龥぀-ゟ゠-ヿ]+`},
	{"deepseek words", "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
	{"deepseek-coder letters (abridged)", `\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕℂℇℊ-ℓＡ-Ｚａ-ｚ𐐀-𐑏𞤀-𞥃]+`},
	{"deepseek-coder punct", `\s?[!-/:-~！-／：-～‘-‟　-。]+`},
	{"deepseek-coder space", `\s+$`},
	{"deepseek-coder hangul", `[一-龥ࠀ-一가-퟿]+`},
	{"digit triplets", `\d{1,3}(?=(?:\d{3})*\b)`},
	{"thousands", `\B(?=(\d{3})+(?!\d))`},
	{"string space", regexp2.Escape(" ")},
	{"string punctuation", regexp2.Escape("(.*+?)")},
	{"words and spaces", `\w+|\s+|[^\w\s]+`},
	{"digits", `\p{N}`},
	// These look hostile, but regexp2 merges their branches into one
	// class, so what it runs has one way to match.
	{"merged alternation", `(?:\s|\p{Zs})+x`},
	{"merged letters", `(\p{L}|é)+!`},
	{"merged case", `(?i:(a|A)+)$`},
}

// hostilePatterns backtrack exponentially in a backtracking engine; each
// must be refused with the reason given.
var hostilePatterns = []struct{ pattern, input, reason string }{
	{`(a+)+$`, strings.Repeat("a", 99) + "!", "nested quantifiers"},
	{`(a|aa)+b`, strings.Repeat("a", 99) + "c", "alternation"},
	{`(\w+\s?)*$`, strings.Repeat("a", 99) + "!", "nested quantifiers"},
	{`(a*)*b`, strings.Repeat("a", 99), "nested quantifiers"},
	{`(x+x+)+y`, strings.Repeat("x", 99), "nested quantifiers"},
	{`^(\d|\d\d)+$`, strings.Repeat("1", 99) + "x", "alternation"},
	{`(\s|\p{Zs}x?)+y`, strings.Repeat(" ", 99), "alternation"},
	{`(?:a|ab|b)+c`, strings.Repeat("ab", 50), "alternation"},
	{`((ab)*)+c`, strings.Repeat("ab", 50), "nested quantifiers"},
	{`(?=(a+)+$)a`, strings.Repeat("a", 99) + "!", "nested quantifiers"},
	{`(\p{L}|é+)+!`, strings.Repeat("é", 50), "nested quantifiers"},
}

func TestPublishedPatternsAreAccepted(t *testing.T) {
	for _, tc := range publishedPatterns {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := newSplitRegex(tc.pattern); err != nil {
				t.Errorf("refused: %v", err)
			}
			tree, err := syntax.Parse(tc.pattern, syntax.ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if why := ambiguity(tree.Root, newAlphabet(tree.Root)); why != "" {
				t.Errorf("ambiguity says %q", why)
			}
			bt := regexp2.MustCompile(tc.pattern, regexp2.None)
			if why := probe(bt, tree.Root, newAlphabet(tree.Root)); why != "" {
				t.Errorf("probe says %q", why)
			}
		})
	}
}

func TestHostilePatternsAreRefused(t *testing.T) {
	for _, tc := range hostilePatterns {
		t.Run(tc.pattern, func(t *testing.T) {
			_, err := newSplitRegex(tc.pattern)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(msg, "backtracks catastrophically") ||
				!strings.Contains(msg, strconv.Quote(tc.pattern)) || !strings.Contains(msg, tc.reason) || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want ErrUnsupported naming the pattern and %q", msg, tc.reason)
			}
			// The static check alone finds each of these.
			tree, _ := syntax.Parse(tc.pattern, syntax.ParseOptions{})
			if why := ambiguity(tree.Root, newAlphabet(tree.Root)); why == "" {
				t.Error("ambiguity misses it")
			}
		})
	}
}

// The probe refuses, on its own, a pattern that blows up.
func TestProbeRefusesWhatAmbiguityMisses(t *testing.T) {
	for _, p := range []string{`(a+)+$`, `(a|aa)+b`, `(\w+\s?)*$`} {
		tree, _ := syntax.Parse(p, syntax.ParseOptions{})
		bt := regexp2.MustCompile(p, regexp2.None)
		if why := probe(bt, tree.Root, newAlphabet(tree.Root)); !strings.Contains(why, "ran past") {
			t.Errorf("probe(%q) = %q, want a timeout", p, why)
		}
	}
}

// A hostile pattern that got past the checks (built here by hand) still
// ends: on a 100-byte text the match runs out of time, and every byte
// reaches the model, the rest of the piece as one word.
func TestForcedHostilePatternIsBounded(t *testing.T) {
	for _, tc := range hostilePatterns[:3] {
		t.Run(tc.pattern, func(t *testing.T) {
			bt := regexp2.MustCompile(tc.pattern, regexp2.None, regexp2.OptionMaxBacktrackingStackSize(regexBacktrackSlots))
			bt.MatchTimeout = 50 * time.Millisecond
			st := newRegexSplit(&splitRegex{pattern: tc.pattern, bt: bt, timed: true})
			text := "ok " + tc.input
			done := make(chan []string)
			go func() {
				var pieces []string
				st.split(text, func(p string) { pieces = append(pieces, p) })
				done <- pieces
			}()
			select {
			case pieces := <-done:
				if got := strings.Join(pieces, ""); got != text {
					t.Errorf("pieces %q do not spell the text", pieces)
				}
				if st.overruns.Load() != 1 {
					t.Errorf("%d overruns counted, want 1", st.overruns.Load())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("split did not finish within 30 s")
			}
		})
	}
}

// Through FromHFJSON: a tokenizer.json with a hostile Split is refused,
// naming the file and the pattern.
func TestHFJSONWithHostileSplit(t *testing.T) {
	dir := t.TempDir()
	path := writeSplitTokenizer(t, dir, `(a+)+$`)
	_, err := FromHFJSON(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `"(a+)+$" backtracks catastrophically`) {
		t.Fatalf("FromHFJSON: %v", err)
	}
	// A timed pattern from a file (lookahead, so regexp2) works and counts
	// no overrun on ordinary text.
	path = writeSplitTokenizer(t, t.TempDir(), `\w+(?=\s|$)|\s+|[^\w\s]+`)
	tok, err := FromHFJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	text := "Hello, world: ümlaut 42\n"
	if got := tok.Decode(tok.Encode(text, false)); got != text {
		t.Errorf("round trip %q", got)
	}
	if n := tok.RegexOverruns(); n != 0 {
		t.Errorf("%d overruns", n)
	}
}

// writeSplitTokenizer writes the toy tokenizer.json with a Split on
// pattern before ByteLevel.
func writeSplitTokenizer(t *testing.T, dir, pattern string) string {
	t.Helper()
	m := toyHFJSON()
	m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": pattern}, "behavior": "Isolated"},
		map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
	}}
	return writeJSON(t, dir, "tokenizer.json", m)
}

// FuzzSplitPattern: loading any pattern ends in a pattern or an error,
// never a panic or a hang, and an accepted pattern splits any text into
// pieces that spell it.
func FuzzSplitPattern(f *testing.F) {
	for _, tc := range publishedPatterns {
		f.Add(tc.pattern, "Hello, wörld 42!\n  x")
	}
	for _, tc := range hostilePatterns {
		f.Add(tc.pattern, tc.input)
	}
	f.Fuzz(func(t *testing.T, pattern, text string) {
		if len(pattern) > 200 || len(text) > 300 {
			return
		}
		re, err := newSplitRegex(pattern)
		if err != nil {
			return
		}
		var b strings.Builder
		newRegexSplit(re).split(text, func(p string) { b.WriteString(p) })
		if b.String() != text {
			t.Fatalf("pattern %q split %q into pieces that spell %q", pattern, text, b.String())
		}
	})
}

// The match-by-match loop of timed patterns finds what FindAllStringIndex
// finds, and the built-in patterns run untimed on regexp2.
func TestTimedSplitMatchesFindAll(t *testing.T) {
	for _, p := range []string{regexGPT2, regexLlama3, `\s+(?!\S)|\s+|x*`, `\w+(?=\s|$)|\s+|[^\w\s]+|\w+`, `(?<=a)b|\b`} {
		sr, err := newSplitRegex(p)
		if err != nil {
			t.Fatal(err)
		}
		if sr.bt == nil || sr.timed == vetted[p] {
			t.Errorf("%q: regexp2 %v, timed %v", p, sr.bt != nil, sr.timed)
			continue
		}
		bt := regexp2.MustCompile(p, regexp2.None)
		for _, c := range allCases() {
			want, err := bt.FindAllStringIndex(c.text, -1)
			if err != nil {
				t.Fatal(err)
			}
			got, stopped := findAllTimed(bt, c.text, time.Minute)
			if stopped || !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("%q on %s: match by match %v (stopped %v), FindAll %v", p, c.name, got, stopped, want)
			}
		}
	}
}
