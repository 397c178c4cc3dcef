package tokenizer

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"unicode"

	"github.com/dlclark/regexp2/v2/syntax"
)

// A pattern without lookaround, backreferences or the other constructs
// only a backtracking engine has runs on Go's regexp instead, which takes
// time linear in the text whatever the pattern. re2Source writes the
// pattern for it from the tree regexp2 would run, so both engines follow
// the same rewrites, and writes every class out in full: Go's \s, \w, \d
// and \b are ASCII-only where regexp2's are Unicode, so none of them
// appears in what it writes. It gives up (errNotRE2) on anything whose
// meaning it cannot carry over exactly; the pattern then stays on regexp2.
// TestRE2RouteMatchesRegexp2 and FuzzRE2Route hold the two to the same
// splits.

var errNotRE2 = errors.New("needs the backtracking engine")

// maxRE2Repeat is the largest count Go's regexp accepts in {n,m}.
const maxRE2Repeat = 1000

// compileRE2 returns the Go regexp that matches what the pattern matches,
// or errNotRE2.
func compileRE2(pattern string, root *syntax.RegexNode, a alphabet) (*regexp.Regexp, error) {
	// A user's atomic group changes what matches, and regexp2 folds it
	// into loops the optimizer also makes atomic (those change nothing),
	// so the source decides: no "(?>" at all, or no RE2 route.
	if strings.Contains(pattern, "(?>") {
		return nil, errNotRE2
	}
	var b strings.Builder
	w := re2Writer{b: &b, alpha: a}
	if err := w.node(root); err != nil {
		return nil, err
	}
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNotRE2, err)
	}
	return re, nil
}

type re2Writer struct {
	b     *strings.Builder
	alpha alphabet
}

func (w re2Writer) node(n *syntax.RegexNode) error {
	if n.Options&(syntax.RightToLeft|syntax.ECMAScript) != 0 {
		return errNotRE2
	}
	b := w.b
	switch n.T {
	case syntax.NtOne, syntax.NtNotone, syntax.NtSet, syntax.NtMulti:
		return w.atom(n)
	case syntax.NtOneloop, syntax.NtNotoneloop, syntax.NtSetloop,
		syntax.NtOneloopatomic, syntax.NtNotoneloopatomic, syntax.NtSetloopatomic:
		// regexp2 makes a loop atomic only where giving characters back
		// could not lead to a match (there is no "(?>" in the source).
		return w.repeat(n, n.M, n.N, false, w.atom)
	case syntax.NtOnelazy, syntax.NtNotonelazy, syntax.NtSetlazy:
		return w.repeat(n, n.M, n.N, true, w.atom)
	case syntax.NtLoop, syntax.NtLazyloop:
		if len(n.Children) != 1 {
			return errNotRE2
		}
		// A body that can match the empty text is where the engines part:
		// .NET ends a loop on an empty iteration, RE2 prefers another.
		if minLength(n.Children[0]) == 0 {
			return errNotRE2
		}
		return w.repeat(n.Children[0], n.M, n.N, n.T == syntax.NtLazyloop, w.node)
	case syntax.NtCapture, syntax.NtGroup, syntax.NtAtomic:
		if len(n.Children) != 1 {
			return errNotRE2
		}
		b.WriteString("(?:")
		if err := w.node(n.Children[0]); err != nil {
			return err
		}
		b.WriteString(")")
	case syntax.NtConcatenate:
		b.WriteString("(?:")
		for _, c := range n.Children {
			if err := w.node(c); err != nil {
				return err
			}
		}
		b.WriteString(")")
	case syntax.NtAlternate:
		b.WriteString("(?:")
		for i, c := range n.Children {
			if i > 0 {
				b.WriteString("|")
			}
			if err := w.node(c); err != nil {
				return err
			}
		}
		b.WriteString(")")
	case syntax.NtEmpty, syntax.NtUpdateBumpalong: // bumpalong only moves where the next try starts
		b.WriteString("(?:)")
	case syntax.NtNothing:
		b.WriteString(`[^\x00-\x{10FFFF}]`)
	case syntax.NtBol:
		b.WriteString(`(?m:^)`)
	case syntax.NtEol:
		b.WriteString(`(?m:$)`)
	case syntax.NtBeginning:
		b.WriteString(`\A`)
	case syntax.NtEnd:
		b.WriteString(`\z`)
	default:
		// Lookaround, references, conditionals, \G, \b and \B (Unicode
		// in regexp2, ASCII in Go), \Z and $ (which also match before a
		// final newline), \X.
		return errNotRE2
	}
	return nil
}

// repeat writes (?:x){min,max} with x written by write.
func (w re2Writer) repeat(x *syntax.RegexNode, min, max int, lazy bool, write func(*syntax.RegexNode) error) error {
	if min > maxRE2Repeat || (max != math.MaxInt32 && max > maxRE2Repeat) || min > max {
		return errNotRE2
	}
	w.b.WriteString("(?:")
	if err := write(x); err != nil {
		return err
	}
	w.b.WriteString(")")
	switch {
	case max == math.MaxInt32:
		fmt.Fprintf(w.b, "{%d,}", min)
	default:
		fmt.Fprintf(w.b, "{%d,%d}", min, max)
	}
	if lazy {
		w.b.WriteString("?")
	}
	return nil
}

// atom writes the one character (or string) a leaf or a loop's leaf reads.
func (w re2Writer) atom(n *syntax.RegexNode) error {
	if n.Options&syntax.IgnoreCase != 0 && n.T != syntax.NtOne && n.T != syntax.NtNotone {
		// regexp2 has already turned case-insensitive characters into sets;
		// anything else still marked is beyond this writer.
		return errNotRE2
	}
	switch {
	case n.T == syntax.NtMulti:
		for _, r := range n.Str {
			if n.Options&syntax.IgnoreCase != 0 && unicode.SimpleFold(r) != r {
				return errNotRE2
			}
			writeRune(w.b, r)
		}
	case n.IsOneFamily():
		if n.Options&syntax.IgnoreCase != 0 && unicode.SimpleFold(n.Ch) != n.Ch {
			return errNotRE2
		}
		writeRune(w.b, n.Ch)
	case n.IsNotoneFamily():
		if n.Options&syntax.IgnoreCase != 0 && unicode.SimpleFold(n.Ch) != n.Ch {
			return errNotRE2
		}
		w.b.WriteString("[^")
		writeRune(w.b, n.Ch)
		w.b.WriteString("]")
	case n.Set != nil:
		return w.class(n.Set)
	default:
		return errNotRE2
	}
	return nil
}

func writeRune(b *strings.Builder, r rune) {
	fmt.Fprintf(b, `\x{%x}`, r)
}

// class writes a regexp2 character class as a Go one with the same runes,
// after checking on the sample alphabet that it decoded the class right.
func (w re2Writer) class(set *syntax.CharSet) error {
	c, err := charClass(set)
	if err != nil || c.sub {
		return errNotRE2
	}
	// regexp2 tests a class's categories in order and stops at the first
	// negated one that holds the rune, so a negated category is a plain
	// union only when it is the only one and comes last.
	for i, cat := range c.cats {
		if cat.Negate && i != len(c.cats)-1 {
			return errNotRE2
		}
	}
	if c.anything {
		w.b.WriteString(`[\x00-\x{10FFFF}]`)
		return nil
	}
	var in []string
	for _, r := range c.ranges {
		if r.First < 0 || r.Last > unicode.MaxRune {
			return errNotRE2
		}
		in = append(in, fmt.Sprintf(`\x{%x}-\x{%x}`, r.First, r.Last))
	}
	for _, cat := range c.cats {
		s, err := categoryClass(cat)
		if err != nil {
			return err
		}
		in = append(in, s)
	}
	if len(in) == 0 {
		if c.negate {
			w.b.WriteString(`[\x00-\x{10FFFF}]`)
		} else {
			w.b.WriteString(`[^\x00-\x{10FFFF}]`)
		}
		return nil
	}
	src := "[" + strings.Join(in, "") + "]"
	if c.negate {
		src = "[^" + strings.Join(in, "") + "]"
	}
	re, err := regexp.Compile(`\A` + src + `\z`)
	if err != nil {
		return errNotRE2
	}
	for _, r := range w.alpha {
		if r >= 0xd800 && r <= 0xdfff {
			continue // not in any Go string
		}
		if re.MatchString(string(r)) != set.Contains(r) {
			return errNotRE2
		}
	}
	w.b.WriteString(src)
	return nil
}

// categoryClass writes one category as the inside of a Go class.
func categoryClass(cat syntax.Category) (string, error) {
	switch cat.Cat {
	case " ": // unicode.IsSpace is the White_Space property
		rs := tableRanges(unicode.White_Space)
		if cat.Negate {
			rs = complement(rs)
		}
		var b strings.Builder
		for _, r := range rs {
			fmt.Fprintf(&b, `\x{%x}-\x{%x}`, r.First, r.Last)
		}
		return b.String(), nil
	case "W":
		if cat.Negate {
			return "", errNotRE2
		}
		return `\p{L}\p{Mn}\p{Nd}\p{Pc}\x{200c}\x{200d}`, nil
	}
	_, isCat := unicode.Categories[cat.Cat]
	_, isScript := unicode.Scripts[cat.Cat]
	_, isProp := unicode.Properties[cat.Cat]
	_, isAlias := unicode.CategoryAliases[cat.Cat]
	if !(isCat || isScript) || isProp || isAlias {
		return "", errNotRE2 // Go's \p knows categories and scripts only
	}
	if cat.Negate {
		return `\P{` + cat.Cat + `}`, nil
	}
	return `\p{` + cat.Cat + `}`, nil
}

// complement returns the runes outside sorted, disjoint ranges.
func complement(rs []syntax.SingleRange) []syntax.SingleRange {
	var out []syntax.SingleRange
	next := rune(0)
	for _, r := range rs {
		if r.First > next {
			out = append(out, syntax.SingleRange{First: next, Last: r.First - 1})
		}
		next = r.Last + 1
	}
	if next <= unicode.MaxRune {
		out = append(out, syntax.SingleRange{First: next, Last: unicode.MaxRune})
	}
	return out
}
