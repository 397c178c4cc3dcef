package tokenizer

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"github.com/dlclark/regexp2/v2/syntax"
)

// A pre-tokenizer pattern comes from the tokenizer.json, so from whoever
// wrote the file. compileRegex puts three defences between such a
// pattern and a hang:
//
//  1. At load, a pattern in which a repeated group can match the same text
//     in two ways (see ambiguity) is refused, as is one that runs past
//     probeTimeout on short texts made of its own characters (see probe):
//     such a pattern backtracks exponentially in any backtracking engine
//     (Hugging Face's Oniguruma too), and no published tokenizer has one.
//  2. A pattern Go's regexp can run with the same meaning runs there (see
//     compileRE2), in time linear in the text.
//  3. Any other match runs on regexp2 under matchTimeout, and a whole
//     split under splitBudget; past either, the rest of the piece goes on
//     whole (no byte is lost, the ids are those of a longer piece) and
//     Tokenizer.RegexOverruns counts it. The built-in patterns (vetted)
//     only read each character a bounded number of times and keep
//     regexp2 without a clock, whose goroutine outlives a match.
const (
	matchTimeout = time.Second
	splitBudget  = 5 * time.Second
	probeTimeout = 100 * time.Millisecond
	// regexBacktrackSlots bounds regexp2's backtracking stack. The
	// patterns here backtrack at most a few slots per rune of one match,
	// so a whitespace run of a million runes still fits.
	regexBacktrackSlots = 1 << 24
)

// vetted are the patterns this package writes itself (pretok.go): each of
// their alternatives is a run of one class, with a lookahead only after
// \s+, so each match reads every character a bounded number of times.
var vetted = map[string]bool{regexGPT2: true, regexLlama3: true, regexQwen2: true}

// splitRegex is a compiled pre-tokenizer pattern on one of the engines.
type splitRegex struct {
	pattern string
	re2     *regexp.Regexp  // the pattern has an exact RE2 form
	bt      *regexp2.Regexp // else regexp2
	timed   bool            // bt runs under matchTimeout
}

var (
	regexMu    sync.Mutex
	regexCache = map[string]regexEntry{}
)

type regexEntry struct {
	re  *splitRegex
	err error
}

// compileRegex compiles and checks a pattern once per process; the result
// is safe for concurrent use.
func compileRegex(pattern string) (*splitRegex, error) {
	regexMu.Lock()
	defer regexMu.Unlock()
	if e, ok := regexCache[pattern]; ok {
		return e.re, e.err
	}
	re, err := newSplitRegex(pattern)
	regexCache[pattern] = regexEntry{re, err}
	return re, err
}

func newSplitRegex(pattern string) (*splitRegex, error) {
	bt, err := regexp2.Compile(pattern, regexp2.None, regexp2.OptionMaxBacktrackingStackSize(regexBacktrackSlots))
	if err != nil {
		return nil, fmt.Errorf("%w: pre-tokenizer regex %q: %v", ErrInvalid, shortPattern(pattern), err)
	}
	tree, err := syntax.Parse(pattern, syntax.ParseOptions{})
	if err != nil { // regexp2.Compile parsed it the same way a moment ago
		return nil, fmt.Errorf("%w: pre-tokenizer regex %q: %v", ErrInvalid, shortPattern(pattern), err)
	}
	a := newAlphabet(tree.Root)
	if why := ambiguity(tree.Root, a); why != "" {
		return nil, catastrophic(pattern, why)
	}
	if re2, err := compileRE2(pattern, tree.Root, a); err == nil {
		return &splitRegex{pattern: pattern, re2: re2}, nil
	}
	if !vetted[pattern] {
		if why := probe(bt, tree.Root, a); why != "" {
			return nil, catastrophic(pattern, why)
		}
	}
	r := &splitRegex{pattern: pattern, bt: bt, timed: !vetted[pattern]}
	if r.timed {
		bt.MatchTimeout = matchTimeout // before anyone else sees bt
	}
	return r, nil
}

func catastrophic(pattern, why string) error {
	return fmt.Errorf("%w: pre-tokenizer pattern %q backtracks catastrophically (%s)", ErrUnsupported, shortPattern(pattern), why)
}

// shortPattern cuts a pattern for an error line.
func shortPattern(p string) string {
	const max = 120
	if len(p) <= max {
		return p
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(p[cut]) {
		cut--
	}
	return p[:cut] + "…"
}

// probe runs the pattern on short texts meant to make a backtracking
// engine try every way: a run of 64 of a character the pattern reads (or
// of two that follow each other in it), then one that breaks the match.
// It returns why the pattern is too slow, or "". A probe that runs out is
// tried once more, so that a machine busy for a moment refuses nothing.
func probe(bt *regexp2.Regexp, root *syntax.RegexNode, a alphabet) string {
	bt.MatchTimeout = probeTimeout
	defer func() { bt.MatchTimeout = regexp2.DefaultMatchTimeout }()
	var runs []string
	seen := map[string]bool{}
	addRun := func(unit string) {
		if unit != "" && !seen[unit] && len(runs) < 32 {
			seen[unit] = true
			runs = append(runs, strings.Repeat(unit, 64/utf8.RuneCountInString(unit)))
		}
	}
	g := &glushkov{alpha: a}
	member := func(n *syntax.RegexNode) (rune, bool) {
		if n.T == syntax.NtMulti && len(n.Str) > 0 {
			return n.Str[0], true
		}
		if !(n.IsOneFamily() || n.IsNotoneFamily() || n.IsSetFamily()) {
			return 0, false
		}
		l := g.leafLabel(n)
		return a.common(l, l)
	}
	var walk func(n *syntax.RegexNode)
	walk = func(n *syntax.RegexNode) {
		if r, ok := member(n); ok {
			addRun(string(r))
		}
		if n.T == syntax.NtConcatenate {
			for i := 0; i+1 < len(n.Children); i++ {
				r1, ok1 := member(n.Children[i])
				r2, ok2 := member(n.Children[i+1])
				if ok1 && ok2 {
					addRun(string(r1) + string(r2))
				}
			}
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(root)
	ends := []string{"\x00", "!", "\n"}
	all := g.anyLabel(root)
	for i, r := range a {
		if all[i/64]&(1<<(i%64)) == 0 && r != utf8.RuneError && (r < 0xd800 || r > 0xdfff) {
			ends = append([]string{string(r)}, ends...) // a rune no part of the pattern reads
			break
		}
	}
	for _, run := range runs {
		for _, end := range ends {
			text := run + end
			for try := 0; ; try++ {
				_, err := bt.FindAllStringIndex(text, -1)
				if err == nil {
					break
				}
				if try == 1 {
					if errors.Is(err, regexp2.ErrBacktrackingStackLimit) {
						return fmt.Sprintf("its backtracking overflowed on the %d-character text %q", utf8.RuneCountInString(text), text)
					}
					return fmt.Sprintf("a match ran past %v on the %d-character text %q", probeTimeout, utf8.RuneCountInString(text), text)
				}
			}
		}
	}
	return ""
}

// findAll returns the byte ranges of successive matches in s, as
// FindAllStringIndex does, and whether it stopped early: then the ranges
// cover s up to where it stopped and the rest had no match looked for.
func (r *splitRegex) findAll(s string) (idx [][]int, stopped bool) {
	if r.re2 != nil {
		return r.re2.FindAllStringIndex(s, -1), false
	}
	if !r.timed {
		idx, err := r.bt.FindAllStringIndex(s, -1)
		if err != nil { // only the backtracking stack limit gets here
			return nil, true
		}
		return idx, false
	}
	return findAllTimed(r.bt, s, splitBudget)
}

// findAllTimed is FindAllStringIndex match by match, so that a split that
// overruns (one match past the regexp's MatchTimeout, or all of them past
// budget) keeps what it found.
func findAllTimed(bt *regexp2.Regexp, s string, budget time.Duration) (idx [][]int, stopped bool) {
	start := time.Now()
	m, err := bt.FindStringMatch(s)
	prevEnd := -1
	for m != nil && err == nil {
		i, n := m.ByteRange()
		if n != 0 || i != prevEnd { // FindAll's rule: no empty match right after a match
			idx = append(idx, []int{i, i + n})
			prevEnd = i + n
		}
		if time.Since(start) > budget {
			return idx, true
		}
		m, err = bt.FindNextMatch(m)
	}
	return idx, err != nil
}
