package runtime

// Continuous batching (package engine) runs many sequences through one
// inference of a batched paged graph (model.GraphSpec.Batch > 0): every
// sequence brings some tokens (one when it decodes, a chunk of its prompt
// when it prefills) and its own block table into one shared pool of KV
// blocks. docs/design.md §9.

// BatchSeq is one sequence's part of a batch step.
type BatchSeq struct {
	// Tokens is how many of the step's ids are this sequence's (at least
	// 1): they follow the previous sequence's, at positions Past.. .
	Tokens int
	// Past is how many tokens of this sequence the pool already holds:
	// the position of its first token in this step.
	Past int
	// Blocks is its block table: Blocks[j] is the pool block holding its
	// positions j*Block .. j*Block+Block-1. It covers Past+Tokens
	// positions; the graph writes the step's K/V into those blocks.
	Blocks []int32
}

// BatchStep is one inference over many sequences.
type BatchStep struct {
	IDs  []int64 // every sequence's tokens, sequence after sequence
	Seqs []BatchSeq
}

// BatchExecutable is a batched paged graph. Bind takes the whole block
// pool (a KV of any Capacity that is a whole number of blocks, at least
// one); StepBatch then runs a step (at most Spec().Chunk tokens, at most
// Spec().Batch sequences, each at most Spec().Capacity positions) and
// returns the logits after the last token of each sequence, one row per
// sequence, valid until the next step. Step (one sequence, the identity
// block table) works as for any paged graph.
type BatchExecutable interface {
	Executable
	StepBatch(step *BatchStep) ([][]float32, error)
}
