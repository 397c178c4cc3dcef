package runtime

import "math/rand/v2"

// SeededTokens is a deterministic stream of n token ids in [0, vocab): the
// same seed gives the same prompt and teacher-forced inputs for every policy.
func SeededTokens(seed uint64, n, vocab int) []int64 {
	r := rand.New(rand.NewPCG(seed, 0x6f7672756e)) // "ovrun"
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(r.IntN(vocab))
	}
	return out
}
