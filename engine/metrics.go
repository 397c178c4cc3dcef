package engine

import (
	"context"
	"time"
)

// This file is what a batched engine tells its observers: a snapshot of its
// state (Stats, for a /metrics handler or a progress line) and one record
// per step (BatchConfig.OnStep, for traces and step histograms). Both are
// plain values: the caller picks the metrics library.

// BatchStats is a snapshot of a Batched engine.
type BatchStats struct {
	Running  int   // sequences admitted (prefilling or decoding)
	Released int64 // static variants freed after BatchConfig.RungIdle
	Waiting  int   // requests queued for a sequence slot

	// Blocks of the KV pool: Used (held by running sequences) + Cached
	// (prefix cache, no sequence holds them) + Free = Total.
	// In the static form a block is a sequence's cache in its rung (Total:
	// MaxSeqs per rung; never cached).
	BlocksTotal, BlocksUsed, BlocksCached, BlocksFree int
	BlockTokens                                       int // tokens per block (paged)
	// LiveTokens is the positions the running sequences' caches span:
	// their blocks, or their rungs' capacities (static).
	LiveTokens int
	// Prefix cache lookups at admission, in full blocks (a prompt of n
	// tokens looks up floor((n-1)/Block) blocks) and in prompt tokens
	// (misses: the prompt tokens that were computed).
	PrefixHitBlocks, PrefixMissBlocks int64
	PrefixHitTokens, PrefixMissTokens int64
	// PrefixEvictions counts cached blocks dropped for room.
	PrefixEvictions int64

	// KVReservedBytes is the pool's address space; KVCommittedBytes the
	// part of it backed by memory, as the kernel reports it (-1 when it
	// could not be read, or after Close).
	KVReservedBytes, KVCommittedBytes int64

	Steps         int64 // inferences run
	StepTokens    int64 // tokens they carried, prefill and decode
	PrefillTokens int64 // of which prompt tokens

	// Rungs are the graphs, one per ladder rung, smallest first; in the
	// static form one per rung and batch size, rung-major.
	Rungs []RungStats
}

// The states of a rung's graph.
const (
	RungIdle      = "idle"      // not needed yet
	RungQueued    = "queued"    // waiting for the compile worker
	RungCompiling = "compiling" // being compiled
	RungReady     = "ready"     // compiled and bound to the pool
	RungFailed    = "failed"    // its compile failed twice; sequences that need it fail
)

// RungStats is one rung's graph.
type RungStats struct {
	Capacity int
	Batch    int           // sequences per step (model.GraphSpec.Batch)
	State    string        // RungIdle, RungQueued, RungCompiling, RungReady or RungFailed
	Compile  time.Duration // time spent compiling it, both tries when it was retried
	Tries    int           // compile attempts
	// Compiles and CompileTotal count every attempt since the start: a
	// variant freed after RungIdle and compiled again counts again.
	Compiles     int
	CompileTotal time.Duration
	Err          string // the compile error of a failed rung
}

// StepInfo describes one inference of a batched engine. Its slices belong
// to the receiver.
type StepInfo struct {
	Start time.Time
	Dur   time.Duration // StepBatch alone; sampling and Emit excluded
	Rung  int           // capacity of the graph that ran
	// Seqs sequences carried Tokens tokens, PrefillTokens of them prompt
	// tokens (the rest are one decode token per decoding sequence).
	Seqs, Tokens, PrefillTokens int
	// SeqIDs are the request ids of the sequences carried, in the step's
	// order; Contexts their Generate contexts, so that a tracer can link
	// the step's span to each request's span.
	SeqIDs   []uint64
	Contexts []context.Context
	Err      error // the step failed; its sequences fail with it
}
