package stats

// ABBA returns the run orders of nPairs blocks of a two-arm experiment,
// alternating AB and BA: block i is [0 1] when i is even and [1 0] when odd,
// so that over an even number of blocks each arm runs first equally often.
// It returns nil when nPairs < 1.
func ABBA(nPairs int) [][]int {
	if nPairs < 1 {
		return nil
	}
	out := make([][]int, nPairs)
	for i := range out {
		if i%2 == 0 {
			out[i] = []int{0, 1}
		} else {
			out[i] = []int{1, 0}
		}
	}
	return out
}

// Williams returns a Williams design for k arms (numbered 0..k-1): sequences
// in which every arm appears equally often in every position and every
// ordered pair of distinct arms is adjacent equally often, which balances
// first-order carry-over.
//
// For even k it returns k sequences (a Latin square whose every ordered pair
// is adjacent exactly once). For odd k no such square exists and it returns
// 2k sequences, the square followed by its mirror images, in which every arm
// appears twice in each position and every ordered pair is adjacent exactly
// twice. The square is the standard cyclic one: row 0 is 0, 1, k-1, 2, k-2,
// ..., and row i adds i modulo k. Williams(1) is [[0]]; k < 1 gives nil.
func Williams(k int) [][]int {
	if k < 1 {
		return nil
	}
	base := make([]int, k)
	lo, hi := 1, k-1
	for j := 1; j < k; j++ {
		if j%2 == 1 {
			base[j] = lo
			lo++
		} else {
			base[j] = hi
			hi--
		}
	}
	rows := k
	if k%2 == 1 && k > 1 {
		rows = 2 * k
	}
	out := make([][]int, 0, rows)
	for i := range k {
		row := make([]int, k)
		for j, b := range base {
			row[j] = (b + i) % k
		}
		out = append(out, row)
	}
	if rows == 2*k {
		for i := range k {
			src := out[i]
			row := make([]int, k)
			for j := range src {
				row[j] = src[k-1-j]
			}
			out = append(out, row)
		}
	}
	return out
}

// Orders returns the run order of each of blocks blocks for an experiment
// with arms arms: ABBA(blocks) for two arms, and for three or more the rows
// of Williams(arms) taken in turn (cycling when blocks exceeds the number of
// rows; blocks that are a multiple of the row count keep the balance). One
// arm gives [0] per block. It returns nil when arms < 1 or blocks < 1. The
// rows are fresh slices the caller may modify.
func Orders(arms, blocks int) [][]int {
	if arms < 1 || blocks < 1 {
		return nil
	}
	if arms == 2 {
		return ABBA(blocks)
	}
	w := Williams(arms)
	out := make([][]int, blocks)
	for b := range out {
		out[b] = append([]int(nil), w[b%len(w)]...)
	}
	return out
}
