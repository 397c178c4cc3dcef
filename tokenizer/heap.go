package tokenizer

// queue is a binary heap whose top is the element that comes before all
// others; the merge loops of both BPE flavours use it.
type queue[T interface{ before(T) bool }] []T

func (q *queue[T]) push(x T) {
	*q = append(*q, x)
	s := *q
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s[i].before(s[parent]) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (q *queue[T]) pop() T {
	s := *q
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, first := 2*i+1, 2*i+2, i
		if l < len(s) && s[l].before(s[first]) {
			first = l
		}
		if r < len(s) && s[r].before(s[first]) {
			first = r
		}
		if first == i {
			break
		}
		s[i], s[first] = s[first], s[i]
		i = first
	}
	*q = s
	return top
}
