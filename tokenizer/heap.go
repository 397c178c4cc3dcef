package tokenizer

// queue is a binary heap whose top is the element that comes before all
// others by its before function; the merge loops of both BPE flavours use it.
type queue[T any] struct {
	items  []T
	before func(a, b T) bool
}

func (q *queue[T]) len() int { return len(q.items) }

func (q *queue[T]) push(x T) {
	q.items = append(q.items, x)
	s := q.items
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !q.before(s[i], s[parent]) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (q *queue[T]) pop() T {
	s := q.items
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, first := 2*i+1, 2*i+2, i
		if l < len(s) && q.before(s[l], s[first]) {
			first = l
		}
		if r < len(s) && q.before(s[r], s[first]) {
			first = r
		}
		if first == i {
			break
		}
		s[i], s[first] = s[first], s[i]
		i = first
	}
	q.items = s
	return top
}
