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
	//
	// In a static batched graph (model.GraphSpec.StaticBatch: B = Batch
	// caches of Capacity C slots back to back, Tokens 1) Blocks[0] is the
	// sequence's batch slot b, 0..B-1, and nothing else is read: its cache
	// is slots b*C .. b*C+C-1 of the bound KV, and the step's K/V row goes
	// to slot b*C+Past. Each slot holds at most one sequence of a step.
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
//
// A static batched graph (model.GraphSpec.StaticBatch, the NPU's form)
// takes one token for each of up to Batch sequences per step, each in its
// own batch slot (BatchSeq.Blocks[0]), in any order; Bind takes a KV of
// Batch*Capacity slots, and slots no sequence names run id 0 at position 0
// with their outputs dropped. Step runs the sequence of slot 0.
type BatchExecutable interface {
	Executable
	StepBatch(step *BatchStep) ([][]float32, error)
}
