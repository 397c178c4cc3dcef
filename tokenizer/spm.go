package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// spmModel is SentencePiece-style BPE as llama.cpp runs it for
// tokenizer.ggml.model "llama": spaces become "▁", a space is put in front of
// each stretch of text when spacePrefix is set, the text starts as one symbol
// per UTF-8 character, and the adjacent pair whose concatenation is a piece
// with the highest score merges first (leftmost on ties). A final symbol that
// is not a piece is spelt with <0xNN> byte tokens, or UNK without them.
type spmModel struct {
	pieces      map[string]int64 // mergeable pieces: normal, user-defined, unused
	scores      []float32
	byteID      [256]int64 // <0xNN> tokens, -1 if absent
	unk         int64
	spacePrefix bool
}

const spaceMarker = "▁"

type spmSym struct {
	start, end int // byte range in the escaped text; end == start once merged away
	prev, next int
}

// spmPair is a candidate merge of the symbol at left with its right
// neighbour, whose joined text had size bytes when it was queued.
type spmPair struct {
	score float32
	left  int32
	size  int32
}

func spmBefore(p, o spmPair) bool {
	return p.score > o.score || (p.score == o.score && p.left < o.left)
}

func (m *spmModel) encode(s string, out []int64) []int64 {
	if m.spacePrefix {
		s = " " + s
	}
	s = strings.ReplaceAll(s, " ", spaceMarker)
	syms := make([]spmSym, 0, len(s))
	for i := 0; i < len(s); {
		_, n := utf8.DecodeRuneInString(s[i:])
		syms = append(syms, spmSym{start: i, end: i + n, prev: len(syms) - 1, next: len(syms) + 1})
		i += n
	}
	if len(syms) == 0 {
		return out
	}
	syms[len(syms)-1].next = -1
	h := queue[spmPair]{before: spmBefore}
	for i := 0; i+1 < len(syms); i++ {
		m.push(&h, s, syms, i, i+1)
	}
	for h.len() > 0 {
		p := h.pop()
		left := int(p.left)
		l := &syms[left]
		if l.end == l.start || l.next < 0 || syms[l.next].end-l.start != int(p.size) {
			continue // stale: the pair's text has changed since it was queued
		}
		r := &syms[l.next]
		l.end = r.end
		r.end = r.start
		l.next = r.next
		if l.next >= 0 {
			syms[l.next].prev = left
		}
		if l.prev >= 0 {
			m.push(&h, s, syms, l.prev, left)
		}
		if l.next >= 0 {
			m.push(&h, s, syms, left, l.next)
		}
	}
	for i := 0; i >= 0; i = syms[i].next {
		piece := s[syms[i].start:syms[i].end]
		if id, ok := m.pieces[piece]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(piece); j++ {
			switch {
			case m.byteID[piece[j]] >= 0:
				out = append(out, m.byteID[piece[j]])
			case m.unk >= 0:
				out = append(out, m.unk)
			}
		}
	}
	return out
}

func (m *spmModel) push(h *queue[spmPair], s string, syms []spmSym, left, right int) {
	text := s[syms[left].start:syms[right].end] // neighbours are contiguous
	if id, ok := m.pieces[text]; ok {
		h.push(spmPair{score: m.scores[id], left: int32(left), size: int32(len(text))})
	}
}
