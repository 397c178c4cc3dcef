package tokenizer

import (
	"encoding/binary"
	"fmt"
	"slices"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2/syntax"
)

// classSpec is what a regexp2 character class is made of: ranges and
// categories, the whole negated or not. regexp2 keeps these fields to
// itself; charClass reads them from CharSet.Hash, the serialization its
// generated code reads back with syntax.NewCharSetRuntime. Whoever uses a
// classSpec checks it against CharSet.Contains first (see matches), so a
// change of that format can only make a class unreadable, never wrong.
type classSpec struct {
	negate, anything bool
	ranges           []syntax.SingleRange
	cats             []syntax.Category // " " is \s, "W" is \w, else a Unicode name
	sub              bool              // has a subtracted class ([a-z-[aeiou]])
}

// charClass decodes a set's serialization.
func charClass(set *syntax.CharSet) (classSpec, error) {
	b := set.Hash()
	bad := fmt.Errorf("unreadable character class %s", set.String())
	if len(b) < 9 {
		return classSpec{}, bad
	}
	c := classSpec{negate: b[0]&1 != 0, anything: b[0]&2 != 0}
	nr := int32(binary.LittleEndian.Uint32(b[1:]))
	nc := int32(binary.LittleEndian.Uint32(b[5:]))
	b = b[9:]
	if nr < 0 || nc < 0 || int(nr) > len(b) || int(nc) > len(b) {
		return classSpec{}, bad
	}
	readRune := func() (rune, bool) {
		r, n := utf8.DecodeRune(b)
		if n == 0 {
			return 0, false
		}
		b = b[n:]
		return r, true
	}
	for range nr {
		lo, ok1 := readRune()
		hi, ok2 := readRune()
		if !ok1 || !ok2 || lo > hi {
			return classSpec{}, bad
		}
		c.ranges = append(c.ranges, syntax.SingleRange{First: lo, Last: hi})
	}
	for range nc {
		if len(b) == 0 {
			return classSpec{}, bad
		}
		n := int(int8(b[0]))
		neg := n < 0
		if neg {
			n = -n
		}
		if n == 0 || n > len(b)-1 {
			return classSpec{}, bad
		}
		c.cats = append(c.cats, syntax.Category{Negate: neg, Cat: string(b[1 : 1+n])})
		b = b[1+n:]
	}
	c.sub = len(b) > 0
	return c, nil
}

// categoryTable is the table regexp2 looks a category name up in, in its
// order (it also knows some Emoji and break properties, which Go's
// unicode package has not: those give false).
func categoryTable(name string) (*unicode.RangeTable, bool) {
	if t, ok := unicode.Properties[name]; ok {
		return t, true
	}
	if c, ok := unicode.CategoryAliases[name]; ok {
		return unicode.Categories[c], true
	}
	if t, ok := unicode.Categories[name]; ok {
		return t, true
	}
	t, ok := unicode.Scripts[name]
	return t, ok
}

// wordTables are the tables of regexp2's \w besides ZWJ and ZWNJ
// (syntax.IsWordChar).
var wordTables = []*unicode.RangeTable{unicode.L, unicode.Mn, unicode.Nd, unicode.Pc}

// tableRanges lists a table's runes as ranges.
func tableRanges(t *unicode.RangeTable) []syntax.SingleRange {
	var out []syntax.SingleRange
	add := func(lo, hi, stride rune) {
		if stride == 1 {
			out = append(out, syntax.SingleRange{First: lo, Last: hi})
			return
		}
		for r := lo; r <= hi; r += stride {
			out = append(out, syntax.SingleRange{First: r, Last: r})
		}
	}
	for _, r := range t.R16 {
		add(rune(r.Lo), rune(r.Hi), rune(r.Stride))
	}
	for _, r := range t.R32 {
		add(rune(r.Lo), rune(r.Hi), rune(r.Stride))
	}
	return out
}

// alphabet is a sample of runes that stands in for all of Unicode when the
// ambiguity check intersects character classes: every rune below U+0250
// and every edge of every range and category the pattern names, so two
// classes that share a rune almost always share one of these.
type alphabet []rune

func newAlphabet(root *syntax.RegexNode) alphabet {
	seen := map[rune]bool{}
	add := func(rs ...rune) {
		for _, r := range rs {
			if r >= 0 && r <= unicode.MaxRune {
				seen[r] = true
			}
		}
	}
	for r := rune(0); r < 0x250; r++ {
		add(r)
	}
	add(0x2028, 0x3000, 0xfeff, utf8.RuneError, unicode.MaxRune)
	addRanges := func(rs []syntax.SingleRange) {
		for _, r := range rs {
			add(r.First-1, r.First, r.Last, r.Last+1)
		}
	}
	var walk func(n *syntax.RegexNode)
	walk = func(n *syntax.RegexNode) {
		add(n.Ch, n.Ch-1, n.Ch+1)
		add(n.Str...)
		if n.Set != nil {
			if c, err := charClass(n.Set); err == nil {
				addRanges(c.ranges)
				for _, cat := range c.cats {
					switch cat.Cat {
					case " ":
						addRanges(tableRanges(unicode.White_Space))
					case "W":
						for _, t := range wordTables {
							addRanges(tableRanges(t))
						}
						add(0x200c, 0x200d)
					default:
						if t, ok := categoryTable(cat.Cat); ok {
							addRanges(tableRanges(t))
						}
					}
				}
			}
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(root)
	a := make(alphabet, 0, len(seen))
	for r := range seen {
		a = append(a, r)
	}
	slices.Sort(a)
	return a
}

// label is the subset of an alphabet a pattern position can match, one
// bit per rune.
type label []uint64

func (a alphabet) label(match func(rune) bool) label {
	l := make(label, (len(a)+63)/64)
	for i, r := range a {
		if match(r) {
			l[i/64] |= 1 << (i % 64)
		}
	}
	return l
}

// common returns the first rune of a both labels hold.
func (a alphabet) common(x, y label) (rune, bool) {
	for i := range x {
		if w := x[i] & y[i]; w != 0 {
			for b := range 64 {
				if w&(1<<b) != 0 {
					return a[i*64+b], true
				}
			}
		}
	}
	return 0, false
}

func (x label) meets(y label) bool {
	for i := range x {
		if x[i]&y[i] != 0 {
			return true
		}
	}
	return false
}

func (x label) or(y label) label {
	out := slices.Clone(x)
	for i := range out {
		out[i] |= y[i]
	}
	return out
}
