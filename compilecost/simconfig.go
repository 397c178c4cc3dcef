package compilecost

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/ovtoolkit/ovrun/ladder"
)

// Run policies (the names of `ovrun run --policy`, ladder.Policies). The
// simulator takes each policy's compile schedule and KV store from its row
// of ladder.Rows, with one deliberate difference: it models pyramid as
// OpenVINO's NPUW does, repacking the live KV at a switch (charged as
// MigrateS), where ovrun's pyramid views a prefix and copies nothing.
const (
	// PolicyDirect compiles one graph at the largest capacity up front and
	// reserves the largest KV (B0).
	PolicyDirect = string(ladder.Direct)
	// PolicyPyramid compiles every rung up front, one after another, and
	// reserves one KV buffer of the largest capacity (B1). A switch repacks
	// the live KV for the larger graph, charged as MigrateS.
	PolicyPyramid = string(ladder.Pyramid)
	// PolicyGrowEager compiles every rung up front and keeps KV sized to the
	// current rung, copying live KV forward at each boundary; old and new
	// buffers coexist during the copy (I1).
	PolicyGrowEager = string(ladder.GrowEager)
	// PolicyGrowOneAhead compiles the first rung in the foreground and each
	// successor in the background while the rung before it decodes, one
	// compile at a time; KV as in grow-eager (I2).
	PolicyGrowOneAhead = string(ladder.GrowOneAhead)
	// PolicyLazy compiles each successor at its boundary, so every boundary
	// waits for a full compile; KV as in grow-eager.
	PolicyLazy = string(ladder.Lazy)
	// PolicyGrowRemap schedules compiles like grow-one-ahead but grows KV by
	// remapping: no migrate time and no moment with two buffers.
	PolicyGrowRemap = string(ladder.GrowRemap)
)

// Prefill modes (SimConfig.Prefill), as `ovrun run --prefill`.
const (
	PrefillAuto   = "auto"
	PrefillGraph  = "graph"
	PrefillDecode = "decode"
	PrefillShared = "shared"
)

// Policies returns the policy names Simulate accepts.
func Policies() []string { return ladder.Names() }

// ErrInvalidSimConfig is wrapped by SimConfig.Validate's errors.
var ErrInvalidSimConfig = errors.New("invalid simulation config")

// SimConfig describes one request and the costs to plan it with.
//
// Tokens: the prompt occupies positions 0..PromptTokens-1 and decode step s
// (0-based) writes position PromptTokens+s, so it needs a rung of capacity
// greater than that position (RungFor(ladder, PromptTokens+s+1)). The first
// rung is therefore the smallest capacity >= PromptTokens+1, and decoding
// stops after DecodeTokens steps or when the largest rung is full.
type SimConfig struct {
	// Ladder holds the capacities, strictly ascending.
	Ladder []int
	// PromptTokens is the prompt length (>= 1); DecodeTokens the number of
	// tokens to decode (>= 0).
	PromptTokens, DecodeTokens int
	// Policy is one of Policies().
	Policy string
	// CompileS returns the compile time of a capacity's graph, seconds
	// (e.g. Profile.CompileFunc()).
	CompileS func(capacity int) float64
	// DecodeStepS returns the time of one decode step on a capacity's graph, seconds.
	DecodeStepS func(capacity int) float64
	// PrefillS is the time of the prompt through the prefill graph, seconds
	// (with Prefill "decode" the prompt goes through the first rung's decode
	// graph instead, PromptTokens steps of DecodeStepS).
	PrefillS float64
	// CompileSuccessorS, when set, is the compile time of a capacity's
	// decode graph compiled after another graph in the same process; only
	// the first compile of the process takes CompileS. Nil: every compile
	// takes CompileS (one number per rung, as older profiles have it).
	CompileSuccessorS func(capacity int) float64
	// Prefill is how the prompt is processed, as `ovrun run --prefill`:
	// PrefillGraph ("" too) compiles the prefill graph first, before the
	// first rung; PrefillDecode feeds the prompt through the first rung's
	// decode graph; PrefillAuto does what is faster for this prompt: the
	// decode graph when its PromptTokens steps take no longer than compiling
	// the prefill graph after the first rung and running the prompt through
	// it, else that.
	Prefill string
	// SharedGraphs says the device compiles shared graphs (a dynamic token
	// axis: CPU, GPU). PrefillShared makes the first rung one graph that
	// takes the prompt (taken to cost PrefillS) and decodes with steps
	// SharedPenalty longer; PrefillAuto chooses that where SharedPays,
	// as the runtime does, when SharedGraphs is set.
	SharedGraphs bool
	// PrefillChunk is the most prompt tokens a call of the prefill or a
	// shared graph takes (`--prefill-chunk`); 0 takes the whole prompt in
	// one call.
	PrefillChunk int
	// SharedPenalty is how much longer a shared graph's decode step is
	// than the decode graph's, as a fraction (SharedStepPenalty of the
	// model); 0 takes DefaultSharedStepPenalty.
	SharedPenalty float64
	// ReuseGraphs says later rungs reuse a graph compiled for an earlier
	// one, as ovrun's paged graphs do on the CPU (their capacity is only a
	// bound): only the first rung compiles, and after a first rung that
	// prefill mode auto made shared the first decode graph; every other
	// rung costs no compile.
	ReuseGraphs bool
	// PrefillCompileS is the compile time of the prefill graph (of the
	// first rung's capacity) as the first compile of the process, and
	// PrefillCompileSuccessorS after the first rung's decode graph (0: as
	// PrefillCompileS). A zero PrefillCompileS leaves the prefill graph's
	// compile out of the model: counted in the first rung's, as a profile
	// without prefill graphs has it.
	PrefillCompileS, PrefillCompileSuccessorS float64
	// MigrateS returns the time to move liveTokens of KV from the fromCap
	// graph to the toCap graph, seconds; nil means free.
	MigrateS func(fromCap, toCap, liveTokens int) float64
	// Lookahead is how many rungs ahead of the current one a background
	// compile may run (grow-one-ahead and grow-remap): 0 follows the
	// runtime's launch rule (ladder.LaunchTwoAhead: one ahead, and two ahead
	// once the rung before the previous one has decoded ladder.RateSteps
	// steps and the compile would not fit the previous rung's window); k >= 1
	// launches rung j when rung j-k is bound. Background compiles still run
	// one at a time.
	Lookahead int
	// KVBytesPerToken is the KV size of one token over all layers, bytes.
	KVBytesPerToken int64
	// BackgroundSlowdown, when > 0, multiplies the decode step time while a
	// background compile runs (e.g. 1.05 for 5% slower); it must then be >= 1.
	// Zero means decode is unaffected. Prefill and migrates are never slowed.
	BackgroundSlowdown float64
}

// Validate checks the config. Errors wrap ErrInvalidSimConfig.
func (c SimConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSimConfig, fmt.Sprintf(format, args...))
	}
	if err := ValidateLadder(c.Ladder); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSimConfig, err)
	}
	if !slices.Contains(Policies(), c.Policy) {
		return bad("unknown policy %q (want one of %v)", c.Policy, Policies())
	}
	if c.PromptTokens < 1 {
		return bad("prompt tokens %d < 1", c.PromptTokens)
	}
	if maxCap := c.Ladder[len(c.Ladder)-1]; c.PromptTokens+1 > maxCap {
		return bad("a prompt of %d tokens leaves no room to decode in the largest rung (%d)", c.PromptTokens, maxCap)
	}
	if c.DecodeTokens < 0 {
		return bad("decode tokens %d < 0", c.DecodeTokens)
	}
	if c.CompileS == nil || c.DecodeStepS == nil {
		return bad("CompileS and DecodeStepS are required")
	}
	if !finiteNonNeg(c.PrefillS) {
		return bad("prefill time %v is not a finite non-negative time", c.PrefillS)
	}
	if !slices.Contains([]string{"", PrefillGraph, PrefillDecode, PrefillAuto, PrefillShared}, c.Prefill) {
		return bad("unknown prefill mode %q (want %s, %s, %s or %s)", c.Prefill, PrefillAuto, PrefillGraph, PrefillDecode, PrefillShared)
	}
	for _, v := range []float64{c.PrefillCompileS, c.PrefillCompileSuccessorS} {
		if !finiteNonNeg(v) {
			return bad("prefill compile time %v is not a finite non-negative time", v)
		}
	}
	if c.Lookahead < 0 {
		return bad("lookahead %d < 0", c.Lookahead)
	}
	if c.KVBytesPerToken < 0 {
		return bad("KV bytes per token %d < 0", c.KVBytesPerToken)
	}
	if c.BackgroundSlowdown != 0 && !(c.BackgroundSlowdown >= 1 && !math.IsInf(c.BackgroundSlowdown, 0)) {
		return bad("background slowdown %v must be 0 (none) or a finite factor >= 1", c.BackgroundSlowdown)
	}
	for _, capacity := range c.Ladder {
		if v := c.CompileS(capacity); !finiteNonNeg(v) {
			return bad("compile time %v for capacity %d is not a finite non-negative time", v, capacity)
		}
		if c.CompileSuccessorS != nil {
			if v := c.CompileSuccessorS(capacity); !finiteNonNeg(v) {
				return bad("successor compile time %v for capacity %d is not a finite non-negative time", v, capacity)
			}
		}
		if v := c.DecodeStepS(capacity); !finiteNonNeg(v) {
			return bad("decode step time %v for capacity %d is not a finite non-negative time", v, capacity)
		}
	}
	return nil
}

func finiteNonNeg(x float64) bool { return x >= 0 && !math.IsInf(x, 1) }
