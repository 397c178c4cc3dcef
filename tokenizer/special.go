package tokenizer

// special is a token Encode cuts out of the text wherever its text appears.
type special struct {
	id      int64
	text    string
	control bool // not recognised by EncodeOrdinary
	lstrip  bool // swallows the whitespace on its left (tokenizer.json)
	rstrip  bool // and on its right
}

// specialMatcher finds, at a position of the text, the longest special
// token that starts there (leftmost-longest, as Hugging Face's added
// vocabulary does). It is a byte trie; few texts have many candidate bytes.
type specialMatcher struct {
	first [256]bool // bytes some special token starts with
	nodes []trieNode
	toks  []special
}

type trieNode struct {
	next map[byte]int32
	tok  int32 // index into toks, -1 if no token ends here
}

func newSpecialMatcher(toks []special) specialMatcher {
	m := specialMatcher{nodes: []trieNode{{tok: -1}}, toks: toks}
	for i, sp := range toks {
		n := int32(0)
		for j := 0; j < len(sp.text); j++ {
			c := sp.text[j]
			nx, ok := m.nodes[n].next[c]
			if !ok {
				if m.nodes[n].next == nil {
					m.nodes[n].next = map[byte]int32{}
				}
				nx = int32(len(m.nodes))
				m.nodes = append(m.nodes, trieNode{tok: -1})
				m.nodes[n].next[c] = nx
			}
			n = nx
		}
		m.nodes[n].tok = int32(i)
		m.first[sp.text[0]] = true
	}
	return m
}

// match returns the length and token of the longest special token at the
// start of s, skipping control tokens unless control is set; 0 if none.
func (m *specialMatcher) match(s string, control bool) (int, special) {
	best, bestTok := 0, int32(-1)
	n := int32(0)
	for i := 0; i < len(s); i++ {
		nx, ok := m.nodes[n].next[s[i]]
		if !ok {
			break
		}
		n = nx
		if k := m.nodes[n].tok; k >= 0 && (control || !m.toks[k].control) {
			best, bestTok = i+1, k
		}
	}
	if bestTok < 0 {
		return 0, special{}
	}
	return best, m.toks[bestTok]
}
