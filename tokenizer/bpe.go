package tokenizer

// bpeModel is byte-level BPE: each byte of a pre-tokenized word starts as the
// token of its byte-alphabet rune, then the adjacent pair with the lowest
// merge rank is merged (leftmost first on ties) until no pair has a rank.
type bpeModel struct {
	merges       map[uint64]merge // pairKey(left, right) -> rank and result
	byteID       [256]int         // token of each byte's rune, -1 if absent
	whole        map[string]int   // raw bytes -> id of a normal token (ignore_merges)
	ignoreMerges bool             // a word that is a token is that token (Llama 3)
	cache        wordCache
}

type merge struct {
	rank int32
	id   int32
}

func pairKey(left, right int) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

type bpeSym struct {
	id         int // -1 once merged into its left neighbour
	prev, next int
}

type bpePair struct {
	rank        int32
	left, right int
	lid, rid    int
}

func (p bpePair) before(o bpePair) bool {
	return p.rank < o.rank || (p.rank == o.rank && p.left < o.left)
}

// encodeWord appends the ids of one pre-tokenized word (raw bytes).
func (m *bpeModel) encodeWord(w string, out []int) []int {
	if ids, ok := m.cache.get(w); ok {
		return append(out, ids...)
	}
	start := len(out)
	out = m.mergeWord(w, out)
	m.cache.put(w, out[start:])
	return out
}

func (m *bpeModel) mergeWord(w string, out []int) []int {
	if m.ignoreMerges {
		if id, ok := m.whole[w]; ok {
			return append(out, id)
		}
	}
	syms := make([]bpeSym, 0, len(w))
	for i := 0; i < len(w); i++ {
		id := m.byteID[w[i]]
		if id < 0 {
			continue // a byte the vocabulary cannot spell is dropped, as Hugging Face does
		}
		syms = append(syms, bpeSym{id: id, prev: len(syms) - 1, next: len(syms) + 1})
	}
	if len(syms) == 0 {
		return out
	}
	syms[len(syms)-1].next = -1
	var h queue[bpePair]
	for i := 0; i+1 < len(syms); i++ {
		m.push(&h, syms, i, i+1)
	}
	for len(h) > 0 {
		p := h.pop()
		l := &syms[p.left]
		if l.id != p.lid || l.next != p.right || syms[p.right].id != p.rid {
			continue // stale: a neighbour has merged since
		}
		r := &syms[p.right]
		l.id = int(m.merges[pairKey(p.lid, p.rid)].id)
		l.next = r.next
		r.id = -1
		if l.next >= 0 {
			syms[l.next].prev = p.left
		}
		if l.prev >= 0 {
			m.push(&h, syms, l.prev, p.left)
		}
		if l.next >= 0 {
			m.push(&h, syms, p.left, l.next)
		}
	}
	for i := 0; i >= 0; i = syms[i].next { // the first symbol is never merged away
		out = append(out, syms[i].id)
	}
	return out
}

func (m *bpeModel) push(h *queue[bpePair], syms []bpeSym, left, right int) {
	lid, rid := syms[left].id, syms[right].id
	if mg, ok := m.merges[pairKey(lid, rid)]; ok {
		h.push(bpePair{rank: mg.rank, left: left, right: right, lid: lid, rid: rid})
	}
}
