package tokenizer

// bpeModel is byte-level BPE: each byte of a pre-tokenized word starts as the
// token of its byte-alphabet rune, then the adjacent pair with the lowest
// merge rank is merged (leftmost first on ties) until no pair has a rank.
type bpeModel struct {
	merges       map[uint64]merge // pairKey(left, right) -> rank and result
	byteID       [256]int64       // token of each byte's rune, -1 if absent
	whole        map[string]int64 // raw bytes -> id of a normal token (ignore_merges)
	ignoreMerges bool             // a word that is a token is that token (Llama 3)
	cache        wordCache
}

type merge struct {
	rank int32
	id   int32
}

func pairKey(left, right int64) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

type bpeSym struct {
	id         int64 // -1 once merged into its left neighbour
	prev, next int
}

// bpePair is a candidate merge of the symbol at left with its right
// neighbour. It is stale once either symbol has changed; the rank then no
// longer matches the pair's (ranks are unique per pair), which is the check.
type bpePair struct {
	rank int32
	left int32
}

func bpeBefore(p, o bpePair) bool {
	return p.rank < o.rank || (p.rank == o.rank && p.left < o.left)
}

// encodeWord appends the ids of one pre-tokenized word (raw bytes).
func (m *bpeModel) encodeWord(w string, out []int64) []int64 {
	if ids, ok := m.cache.get(w); ok {
		return append(out, ids...)
	}
	start := len(out)
	out = m.mergeWord(w, out)
	m.cache.put(w, out[start:])
	return out
}

func (m *bpeModel) mergeWord(w string, out []int64) []int64 {
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
	h := queue[bpePair]{before: bpeBefore}
	for i := 0; i+1 < len(syms); i++ {
		m.push(&h, syms, i, i+1)
	}
	for h.len() > 0 {
		p := h.pop()
		left := int(p.left)
		l := &syms[left]
		if l.id < 0 || l.next < 0 {
			continue // stale: merged away, or no right neighbour any more
		}
		r := &syms[l.next]
		mg, ok := m.merges[pairKey(l.id, r.id)]
		if !ok || mg.rank != p.rank {
			continue // stale: a symbol of the pair has merged since
		}
		l.id = int64(mg.id)
		l.next = r.next
		r.id = -1
		if l.next >= 0 {
			syms[l.next].prev = left
		}
		if l.prev >= 0 {
			m.push(&h, syms, l.prev, left)
		}
		if l.next >= 0 {
			m.push(&h, syms, left, l.next)
		}
	}
	for i := 0; i >= 0; i = syms[i].next { // the first symbol is never merged away
		out = append(out, syms[i].id)
	}
	return out
}

func (m *bpeModel) push(h *queue[bpePair], syms []bpeSym, left, right int) {
	if mg, ok := m.merges[pairKey(syms[left].id, syms[right].id)]; ok {
		h.push(bpePair{rank: mg.rank, left: int32(left)})
	}
}
