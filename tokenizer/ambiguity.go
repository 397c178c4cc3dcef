package tokenizer

import (
	"errors"
	"fmt"
	"math"

	"github.com/dlclark/regexp2/v2/syntax"
)

// A backtracking engine tries every way a pattern can match a text before
// it gives up on a start position. When a repeated group can match the
// same text in two ways, a run of n such texts has 2^n ways, and a text of
// 100 bytes that fails at its end takes longer than the universe is old:
// `(a+)+$`, `(a|aa)+b`, `(\w+\s?)*$`. ambiguity finds such a group before
// anything is matched.
//
// The check works on the tree regexp2 itself runs (after its own
// rewrites, which make many loops atomic) and builds, for each repeated
// group, the position automaton of that group (one state per character
// the group can consume, Glushkov's construction, keeping the number of
// distinct ways each transition arises). The group backtracks
// exponentially exactly when some state can return to itself along two
// different paths that read the same text (Weber and Seidl's EDA
// criterion); that shows as a cycle through a diagonal pair in the product
// of the automaton with itself that passes through an off-diagonal pair
// or a doubled transition. Character classes are intersected on a sample
// of runes (see alphabet), which can only miss an overlap, never invent
// one: the check refuses nothing that is unambiguous, and what it misses
// the probe and the match timeout catch (see regex.go).

// Limits on the work one check does; past them a group is left to the
// probe and the match timeout.
const (
	maxAmbPositions = 256     // states in one group's automaton
	maxAmbSteps     = 4 << 20 // pairs of transitions the product looks at
)

var errAmbTooLarge = errors.New("pattern too large to check")

// ambiguity returns why the pattern can backtrack catastrophically, or ""
// when no repeated group of it can match the same text in two ways.
func ambiguity(root *syntax.RegexNode, a alphabet) string {
	var loops []*syntax.RegexNode
	var find func(n *syntax.RegexNode)
	find = func(n *syntax.RegexNode) {
		for _, c := range n.Children {
			find(c)
		}
		if (n.T == syntax.NtLoop || n.T == syntax.NtLazyloop) && n.N > 4 && len(n.Children) == 1 {
			loops = append(loops, n) // children before parents: the innermost culprit first
		}
	}
	find(root)
	for _, l := range loops {
		g := &glushkov{alpha: a}
		if _, err := g.loop(l.Children[0], l.M, l.N); err != nil {
			continue
		}
		r, found, err := g.twoPaths()
		if err != nil || !found {
			continue
		}
		return describeAmbiguity(l.Children[0], r)
	}
	return ""
}

// describeAmbiguity names the kind of group and a rune it repeats.
func describeAmbiguity(body *syntax.RegexNode, r rune) string {
	what := "a repeated group can match the same text in more than one way"
	switch {
	case hasNode(body, isVariableLoop):
		what = "nested quantifiers: a repeated group holds a repeat, so a run splits into iterations in exponentially many ways"
	case hasNode(body, func(n *syntax.RegexNode) bool { return n.T == syntax.NtAlternate }):
		what = "a repeated alternation has branches that match the same text"
	}
	return fmt.Sprintf("%s, as on a run of %q", what, r)
}

func isVariableLoop(n *syntax.RegexNode) bool {
	switch n.T {
	case syntax.NtOneloop, syntax.NtNotoneloop, syntax.NtSetloop,
		syntax.NtOnelazy, syntax.NtNotonelazy, syntax.NtSetlazy, syntax.NtLoop, syntax.NtLazyloop:
		return n.N > 1 && n.M != n.N
	}
	return false
}

// hasNode reports whether pred holds for n or a node under it, not looking
// inside atomic groups or lookarounds (they do not backtrack into the
// group around them).
func hasNode(n *syntax.RegexNode, pred func(*syntax.RegexNode) bool) bool {
	if pred(n) {
		return true
	}
	switch n.T {
	case syntax.NtAtomic, syntax.NtPosLook, syntax.NtNegLook:
		return false
	}
	for _, c := range n.Children {
		if hasNode(c, pred) {
			return true
		}
	}
	return false
}

// ways counts distinct derivations, saturating at 2 (two is all the
// criterion needs).
type ways uint8

func (w ways) plus(v ways) ways {
	return min(w+v, 2)
}

func (w ways) times(v ways) ways {
	return min(w*v, 2)
}

// frag is a sub-pattern's part of the automaton: the states a match of it
// can start and end in, each with the number of ways, and the number of
// ways it can match the empty text.
type frag struct {
	first, last map[int]ways
	empty       ways
}

func emptyFrag(w ways) frag {
	return frag{first: map[int]ways{}, last: map[int]ways{}, empty: w}
}

type glushkov struct {
	alpha  alphabet
	labels []label
	edges  []map[int]ways // edges[p][q]: ways to go from state p to q
}

func (g *glushkov) state(l label) (frag, error) {
	if len(g.labels) >= maxAmbPositions {
		return frag{}, errAmbTooLarge
	}
	p := len(g.labels)
	g.labels = append(g.labels, l)
	g.edges = append(g.edges, map[int]ways{})
	return frag{first: map[int]ways{p: 1}, last: map[int]ways{p: 1}}, nil
}

func (g *glushkov) link(from, to map[int]ways) {
	for p, wp := range from {
		for q, wq := range to {
			g.edges[p][q] = g.edges[p][q].plus(wp.times(wq))
		}
	}
}

func addWays(dst map[int]ways, src map[int]ways, k ways) {
	if k == 0 {
		return
	}
	for p, w := range src {
		dst[p] = dst[p].plus(w.times(k))
	}
}

func (g *glushkov) concat(a, b frag) frag {
	g.link(a.last, b.first)
	out := emptyFrag(a.empty.times(b.empty))
	addWays(out.first, a.first, 1)
	addWays(out.first, b.first, a.empty)
	addWays(out.last, b.last, 1)
	addWays(out.last, a.last, b.empty)
	return out
}

func alternate(fs ...frag) frag {
	out := emptyFrag(0)
	for _, f := range fs {
		addWays(out.first, f.first, 1)
		addWays(out.last, f.last, 1)
		out.empty = out.empty.plus(f.empty)
	}
	return out
}

// leafLabel is the label of a node that reads one character.
func (g *glushkov) leafLabel(n *syntax.RegexNode) label {
	switch {
	case n.IsOneFamily():
		return g.alpha.label(func(r rune) bool { return r == n.Ch })
	case n.IsNotoneFamily():
		return g.alpha.label(func(r rune) bool { return r != n.Ch })
	case n.Set != nil:
		return g.alpha.label(n.Set.Contains)
	}
	return g.alpha.label(func(rune) bool { return true })
}

// anyLabel is what a node could read anywhere inside it.
func (g *glushkov) anyLabel(n *syntax.RegexNode) label {
	l := g.alpha.label(func(rune) bool { return false })
	var walk func(n *syntax.RegexNode)
	walk = func(n *syntax.RegexNode) {
		switch {
		case n.T == syntax.NtMulti:
			for _, r := range n.Str {
				l = l.or(g.alpha.label(func(x rune) bool { return x == r }))
			}
		case n.IsOneFamily() || n.IsNotoneFamily() || n.IsSetFamily():
			l = l.or(g.leafLabel(n))
		case n.T == syntax.NtRef || n.T == syntax.NtGrapheme:
			l = l.or(g.alpha.label(func(rune) bool { return true }))
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(n)
	return l
}

// chain reads k characters of one label in a row (at most 16: past that
// the count changes nothing the criterion sees).
func (g *glushkov) chain(l label, k int) (frag, error) {
	out := emptyFrag(1)
	for range min(k, 16) {
		s, err := g.state(l)
		if err != nil {
			return frag{}, err
		}
		out = g.concat(out, s)
	}
	return out, nil
}

// build adds n's states and transitions to g.
func (g *glushkov) build(n *syntax.RegexNode) (frag, error) {
	switch n.T {
	case syntax.NtOne, syntax.NtNotone, syntax.NtSet:
		return g.state(g.leafLabel(n))
	case syntax.NtMulti:
		out := emptyFrag(1)
		for _, r := range n.Str {
			s, err := g.state(g.alpha.label(func(x rune) bool { return x == r }))
			if err != nil {
				return frag{}, err
			}
			out = g.concat(out, s)
		}
		return out, nil
	case syntax.NtOneloop, syntax.NtNotoneloop, syntax.NtSetloop,
		syntax.NtOnelazy, syntax.NtNotonelazy, syntax.NtSetlazy:
		return g.charLoop(g.leafLabel(n), n.M, n.N)
	case syntax.NtOneloopatomic, syntax.NtNotoneloopatomic, syntax.NtSetloopatomic:
		// An atomic loop takes all it can and never gives any back: one
		// way to read whatever it reads.
		if n.N == 0 {
			return emptyFrag(1), nil
		}
		s, err := g.state(g.leafLabel(n))
		if n.M == 0 {
			s.empty = 1
		}
		return s, err
	case syntax.NtLoop, syntax.NtLazyloop:
		if len(n.Children) != 1 {
			return frag{}, fmt.Errorf("loop with %d children", len(n.Children))
		}
		return g.loop(n.Children[0], n.M, n.N)
	case syntax.NtCapture, syntax.NtGroup:
		if len(n.Children) != 1 {
			return frag{}, fmt.Errorf("group with %d children", len(n.Children))
		}
		return g.build(n.Children[0])
	case syntax.NtConcatenate:
		out := emptyFrag(1)
		for _, c := range n.Children {
			f, err := g.build(c)
			if err != nil {
				return frag{}, err
			}
			out = g.concat(out, f)
		}
		return out, nil
	case syntax.NtAlternate, syntax.NtBackRefCond, syntax.NtExprCond:
		kids := n.Children
		if n.T == syntax.NtExprCond && len(kids) > 0 {
			kids = kids[1:] // the condition reads nothing
		}
		var fs []frag
		for _, c := range kids {
			f, err := g.build(c)
			if err != nil {
				return frag{}, err
			}
			fs = append(fs, f)
		}
		if n.T != syntax.NtAlternate && len(kids) < 2 {
			fs = append(fs, emptyFrag(1)) // a missing "no" branch matches nothing
		}
		return alternate(fs...), nil
	case syntax.NtAtomic:
		// One way out of an atomic group: a single state that reads
		// whatever the group could (its inside is checked on its own).
		s, err := g.state(g.anyLabel(n))
		if err == nil && len(n.Children) == 1 && minLength(n.Children[0]) == 0 {
			s.empty = 1
		}
		return s, err
	case syntax.NtRef, syntax.NtGrapheme:
		s, err := g.state(g.alpha.label(func(rune) bool { return true }))
		if n.T == syntax.NtRef {
			s.empty = 1
		}
		return s, err
	case syntax.NtNothing:
		return emptyFrag(0), nil
	case syntax.NtEmpty, syntax.NtPosLook, syntax.NtNegLook, syntax.NtBol, syntax.NtEol,
		syntax.NtBoundary, syntax.NtNonboundary, syntax.NtECMABoundary, syntax.NtNonECMABoundary,
		syntax.NtBeginning, syntax.NtStart, syntax.NtEndZ, syntax.NtEnd,
		syntax.NtUpdateBumpalong, syntax.NtResetCapture:
		return emptyFrag(1), nil
	}
	return frag{}, fmt.Errorf("node type %d", n.T)
}

// charLoop reads min to max characters of one label.
func (g *glushkov) charLoop(l label, min, max int) (frag, error) {
	head, err := g.chain(l, min)
	if err != nil || max == min {
		return head, err
	}
	s, err := g.state(l)
	if err != nil {
		return frag{}, err
	}
	if max-min > 1 {
		g.link(s.last, s.first) // the loop reads its label again
	}
	s.empty = 1
	return g.concat(head, s), nil
}

// loop repeats body min to max times. A few iterations are laid out one
// after another; more, or no limit, become one copy that can go back to
// its start, which is the cycle the criterion looks for.
func (g *glushkov) loop(body *syntax.RegexNode, min, max int) (frag, error) {
	if max <= 4 {
		// X{1,3} is X(X(X)?)?: nested, so that one text has one layout.
		tail := emptyFrag(1)
		for i := max; i > 0; i-- {
			f, err := g.build(body)
			if err != nil {
				return frag{}, err
			}
			tail = g.concat(f, tail)
			if i > min {
				tail.empty = tail.empty.plus(1)
			}
		}
		return tail, nil
	}
	f, err := g.build(body)
	if err != nil {
		return frag{}, err
	}
	g.link(f.last, f.first)
	if min == 0 {
		f.empty = f.empty.plus(1)
	}
	return f, nil
}

// twoPaths reports whether some state returns to itself along two
// different paths that read the same text, and a rune of that text.
func (g *glushkov) twoPaths() (rune, bool, error) {
	n := len(g.labels)
	type edge struct {
		to int
		w  ways
	}
	out := make([][]edge, n)
	for p, m := range g.edges {
		for q, w := range m {
			out[p] = append(out[p], edge{q, w})
		}
	}
	// Tarjan's strongly connected components over the pairs (p, r)
	// reachable from the diagonal; pair index p*n+r.
	const unseen = -1
	index := make([]int32, n*n)
	low := make([]int32, n*n)
	for i := range index {
		index[i] = unseen
	}
	onStack := make([]bool, n*n)
	var stack []int
	next, steps := int32(0), 0
	var found bool
	var witness rune
	var errOut error

	// forked marks a step from a diagonal pair that already took two
	// different transitions to the same state.
	type forkEdge struct{ from, to int }
	var forks []forkEdge

	var visit func(v int)
	visit = func(v int) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		p, r := v/n, v%n
		for _, e1 := range out[p] {
			for _, e2 := range out[r] {
				if steps++; steps > maxAmbSteps {
					errOut = errAmbTooLarge
					return
				}
				if !g.labels[e1.to].meets(g.labels[e2.to]) {
					continue
				}
				w := e1.to*n + e2.to
				if p == r && e1.to == e2.to && e1.w >= 2 {
					forks = append(forks, forkEdge{v, w})
				}
				if index[w] == unseen {
					visit(w)
					if errOut != nil {
						return
					}
					low[v] = min(low[v], low[w])
				} else if onStack[w] {
					low[v] = min(low[v], index[w])
				}
			}
		}
		if low[v] != index[v] {
			return
		}
		var comp []int
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[w] = false
			comp = append(comp, w)
			if w == v {
				break
			}
		}
		if found {
			return
		}
		in := map[int]bool{}
		diag, off := false, -1
		for _, w := range comp {
			in[w] = true
			if w/n == w%n {
				diag = true
			} else if off < 0 {
				off = w
			}
		}
		if !diag {
			return
		}
		if off >= 0 {
			witness, _ = g.alpha.common(g.labels[off/n], g.labels[off%n])
			found = true
			return
		}
		for _, f := range forks {
			if in[f.from] && in[f.to] {
				witness, _ = g.alpha.common(g.labels[f.to/n], g.labels[f.to/n])
				found = true
				return
			}
		}
	}
	for q := range n {
		if v := q*n + q; index[v] == unseen {
			visit(v)
			if errOut != nil {
				return 0, false, errOut
			}
			if found {
				return witness, true, nil
			}
		}
	}
	return witness, found, nil
}

// minLength is the fewest characters n can match.
func minLength(n *syntax.RegexNode) int {
	sat := func(x int) int { return min(x, math.MaxInt32) }
	switch n.T {
	case syntax.NtOne, syntax.NtNotone, syntax.NtSet, syntax.NtGrapheme:
		return 1
	case syntax.NtMulti:
		return len(n.Str)
	case syntax.NtOneloop, syntax.NtNotoneloop, syntax.NtSetloop, syntax.NtOnelazy,
		syntax.NtNotonelazy, syntax.NtSetlazy, syntax.NtOneloopatomic, syntax.NtNotoneloopatomic, syntax.NtSetloopatomic:
		return n.M
	case syntax.NtLoop, syntax.NtLazyloop:
		if len(n.Children) == 0 {
			return 0
		}
		return sat(n.M * minLength(n.Children[0]))
	case syntax.NtCapture, syntax.NtGroup, syntax.NtAtomic:
		if len(n.Children) == 0 {
			return 0
		}
		return minLength(n.Children[0])
	case syntax.NtConcatenate:
		t := 0
		for _, c := range n.Children {
			t = sat(t + minLength(c))
		}
		return t
	case syntax.NtAlternate:
		m := math.MaxInt32
		for _, c := range n.Children {
			m = min(m, minLength(c))
		}
		return m
	case syntax.NtNothing:
		return math.MaxInt32
	}
	return 0 // anchors, lookarounds, references, conditionals
}
