package tokenizer

import (
	"errors"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"github.com/dlclark/regexp2/v2/syntax"
)

// re2Patterns are lookaround-free patterns the RE2 route must take (re2
// true) or leave to regexp2 (false), and whose splits must agree.
var re2Patterns = []struct {
	pattern string
	re2     bool
}{
	{`\p{N}{1,3}`, true},
	{`[一-龥぀-ゟ゠-ヿ]+`, true},
	{`\s?[!-/:-~！-／：-～‘-‟　-。]+`, true},
	{`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+`, true},
	{`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+`, true},
	{`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}`, true},
	{`\w+|\s+|[^\w\s]+`, true},
	{`\W+|\d+|\D`, true},
	{`[\S\n]+|\s`, true},
	{`(?m)^\s*\w+$`, true},
	{`\A\s+|\s+\z|x`, true},
	{`a{2,5}?b|a+?`, true},
	{`(?:ab|a)(?:bc|c)|b`, true},
	{`(?i)straße|ǅ|k|ſ|σ`, true},
	{`.+|\n`, true},
	{`(?s:.)`, true},
	{`[^a-z]+|[a-z]`, true},
	{`\d+(?:\.\d+)?`, true},
	{`\p{Han}+|\p{Greek}+|\P{L}`, true},
	{`[\s\p{P}]+|[^\s\p{P}]+`, true},
	{`x*`, true},
	{`(?:\r\n|\n)+`, true},
	{regexp2.Escape(" "), true},
	{regexp2.Escape("<|im_end|>"), true},
	{`\s+(?!\S)|\s+`, false},  // lookahead
	{`\w+\b`, false},          // \b is ASCII in Go
	{`\s+$`, false},           // $ also matches before a final newline
	{`(?>a+)b|a`, false},      // a user's atomic group
	{`(a)\1`, false},          // backreference
	{`[\W\d]+`, false},        // a negated \w inside a class
	{`[\P{L}\p{Lu}]+`, false}, // regexp2 stops at the first negated category
	{`(a|b?)+`, false},        // a loop body that can match nothing
}

// runePool is what the random texts are made of: ASCII, the Unicode
// spaces, letters and digits of several scripts, marks, case-folding
// oddities, and bytes that are not UTF-8.
var runePool = []string{
	"a", "Z", "k", "K", "s", "S", "ſ", "K", "ß", "ẞ", "σ", "ς", "Σ", "ǅ", "ǆ", "Ǆ", "İ", "ı", "é", "e\u0301",
	"0", "7", "٣", "²", "½", "Ⅻ", "१",
	" ", "  ", "\t", "\n", "\r", "\r\n", "\v", "\f", "\u0085", "\u00a0", "\u1680", "\u2000", "\u2028", "\u2029", "\u202f", "\u3000", "\u200b", "\u200c", "\u200d", "\ufeff",
	"'", "'s", "'S", "'ll", "'VE", "ab", "abc", "aab", "a.b", "1.5", ".", ",", "!", "?", "-", "_", "(", ")", "/", "\\", "|", "<|im_end|>",
	"日", "本", "ぁ", "ア", "한", "ا", "ह", "Ω", "α", "Ж", "😀", "👍🏽", "\u0300", "\U0001d400",
	"\xff", "\xc3", "\xe2\x82", "\xf0\x9f\x98", "\x00", "\x7f", "\ufffd",
}

func randomText(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(20) {
		b.WriteString(runePool[r.IntN(len(runePool))])
	}
	return b.String()
}

// sameSplits compares the RE2 form of pattern with regexp2 on text; it
// reports false when regexp2 could not finish within a second.
func sameSplits(t *testing.T, bt *regexp2.Regexp, re2 *regexp.Regexp, pattern, text string) bool {
	t.Helper()
	if bt.MatchTimeout == regexp2.DefaultMatchTimeout {
		want, err := bt.FindAllStringIndex(text, -1)
		if err != nil {
			t.Fatalf("regexp2 on %q: %v", text, err)
		}
		return compareSplits(t, re2.FindAllStringIndex(text, -1), want, pattern, text)
	}
	want, stopped := findAllTimed(bt, text, time.Second)
	if stopped {
		return false
	}
	return compareSplits(t, re2.FindAllStringIndex(text, -1), want, pattern, text)
}

func compareSplits(t *testing.T, got, want [][]int, pattern, text string) bool {
	t.Helper()
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("pattern %q on %q: RE2 route %v, regexp2 %v", pattern, text, got, want)
	}
	return true
}

func TestRE2RouteMatchesRegexp2(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var texts []string
	for _, c := range allCases() {
		texts = append(texts, c.text)
	}
	for range 300 {
		texts = append(texts, randomText(r))
	}
	for _, tc := range re2Patterns {
		t.Run(tc.pattern, func(t *testing.T) {
			sr, err := newSplitRegex(tc.pattern)
			if err != nil {
				t.Fatal(err)
			}
			if (sr.re2 != nil) != tc.re2 {
				t.Fatalf("RE2 route %v, want %v", sr.re2 != nil, tc.re2)
			}
			if sr.re2 == nil {
				return
			}
			bt := regexp2.MustCompile(tc.pattern, regexp2.None)
			for _, text := range texts {
				sameSplits(t, bt, sr.re2, tc.pattern, text)
			}
		})
	}
}

// TestRE2ClassesOverAllRunes: each class means the same rune for rune over
// all of Unicode (the runs of class+ over a text holding every rune once
// are the same exactly when membership is).
func TestRE2ClassesOverAllRunes(t *testing.T) {
	var b strings.Builder
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if r < 0xd800 || r > 0xdfff {
			b.WriteRune(r)
		}
	}
	all := b.String()
	for _, class := range []string{
		`\s`, `\S`, `\w`, `\W`, `\d`, `\D`, `\p{L}`, `\P{L}`, `\p{N}`, `\p{M}`, `\p{Lu}`, `\p{Han}`, `.`,
		`[^\r\n\p{L}\p{N}]`, `[^\s\p{L}\p{N}]`, `[\s\p{P}]`, `[\S\n]`, `[\w\s]`, `(?i:s)`, `(?i:k)`, `(?i:σ)`, `(?i:ǅ)`, `(?i:[a-z])`,
	} {
		pattern := class + "+"
		sr, err := newSplitRegex(pattern)
		if err != nil || sr.re2 == nil {
			t.Errorf("%s: no RE2 route (%v)", class, err)
			continue
		}
		bt := regexp2.MustCompile(pattern, regexp2.None)
		if !sameSplits(t, bt, sr.re2, pattern, all) {
			t.Errorf("%s: regexp2 failed on all runes", class)
		}
	}
}

// FuzzRE2Route: for any pattern the RE2 route takes, it splits any text as
// regexp2 does.
func FuzzRE2Route(f *testing.F) {
	for i, tc := range re2Patterns {
		f.Add(tc.pattern, runePool[i%len(runePool)]+" Hello, wörld 42!\n")
	}
	f.Add(`(?i:'s|'t)|\p{L}+`, "'S 'ſ 'K")
	f.Fuzz(func(t *testing.T, pattern, text string) {
		if len(pattern) > 100 || len(text) > 500 {
			return
		}
		tree, err := syntax.Parse(pattern, syntax.ParseOptions{})
		if err != nil {
			return
		}
		re2, err := compileRE2(pattern, tree.Root, newAlphabet(tree.Root))
		if errors.Is(err, errNotRE2) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		bt, err := regexp2.Compile(pattern, regexp2.None)
		if err != nil {
			t.Fatalf("RE2 route for a pattern regexp2 refuses: %v", err)
		}
		bt.MatchTimeout = 200 * time.Millisecond
		sameSplits(t, bt, re2, pattern, text)
	})
}

// Example of what the RE2 route writes, for the record.
func TestRE2SourceIsExplicit(t *testing.T) {
	tree, _ := syntax.Parse(`\s+`, syntax.ParseOptions{})
	re, err := compileRE2(`\s+`, tree.Root, newAlphabet(tree.Root))
	if err != nil {
		t.Fatal(err)
	}
	src := re.String()
	if strings.Contains(src, `\s`) || !strings.Contains(src, `\x{3000}`) {
		t.Errorf("RE2 source %s: want the White_Space runes spelled out", src)
	}
}
