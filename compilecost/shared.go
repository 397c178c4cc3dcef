package compilecost

import "fmt"

// DefaultSharedStepPenalty is how much longer a decode step of a shared
// graph is than one of the decode graph of the same capacity, as a fraction
// of the step, where nothing is known of the model: the most measured
// (SmolLM2 in bf16 on an AVX-512 CPU, whole generations of 16 + 128 tokens,
// three interleaved rounds: 0.37 at capacity 256, 0.38 at 1024, 0.43 at
// 4096). SharedStepPenalty never estimates more.
const DefaultSharedStepPenalty = 0.4

// What a shared graph's step costs, in the terms SharedStepPenalty uses.
// Every shape in a shared graph (prefill mode shared: one graph per rung
// that takes 1 to the prefill chunk's tokens per call) is dynamic, so the
// CPU plugin checks shapes and picks kernels at every node on every call:
// a cost per layer that does not grow with the layer's width. A decode
// step itself mostly reads the weights. Measured on a 2-core AVX2 CPU at
// f32 (scripts/step_time.py, decode graph against shared graph, capacity
// 1024, 16 tokens in the cache): SmolLM2 (30 layers, 97 MB of weights)
// 20.4 against 24.8 ms, the synthetic small (8 layers, 78 MB) 9.7 against
// 10.3 ms, the qwen2.5-0.5b shapes (24 layers, 991 MB) 109.6 against
// 114.7 ms (docs/design.md, "One graph for the prompt and decoding").
//
// A shared graph whose attention is paged (--attention paged) pays less:
// its attention has no dynamic shapes of its own, the rest of the layer
// does. Measured on a 2-core CPU with AMX (bin/ovrun generate --capacity
// 1024 --prompt-tokens 16 --max-new-tokens 256 --prefill shared|decode,
// three interleaved rounds, medians): SmolLM2 bf16 46.5 against 51.4
// tok/s, f32 48.7 against 56.1 (0.10 and 0.15 of a step, about 80 µs per
// layer), small f32 98.0 against 102.4 (within the noise).
const (
	sharedLayerOverheadS = 150e-6 // the shared graph's extra time per layer and step
	pagedLayerOverheadS  = 80e-6  // the same with paged attention
	decodeLayerS         = 300e-6 // a decode step's time per layer outside the weights
	weightBytesPerS      = 10e9   // weights read per second by a decode step
)

// SharedStepPenalty estimates how much longer a decode step of a shared
// graph is than one of the decode graph, as a fraction of the step, for a
// model of layers decoder layers whose decode step reads weightBytes of
// weights: the shared graph's per-layer overhead over the estimated step.
// SmolLM2: 0.24 (measured 0.22 at f32 on an AVX2 CPU, 0.37-0.43 in bf16
// on an AVX-512 one); small: 0.12 (0.06, 0.10-0.18); qwen2.5-0.5b: 0.03
// (0.05). Wide models read so much per step that the overhead hardly
// shows. Without a model (layers or weightBytes 0) it is
// DefaultSharedStepPenalty, and never more.
func SharedStepPenalty(layers int, weightBytes int64) float64 {
	return stepPenalty(layers, weightBytes, sharedLayerOverheadS)
}

// PagedSharedStepPenalty is SharedStepPenalty for graphs whose attention
// is paged: SmolLM2 0.13, small 0.06, qwen2.5-0.5b 0.02.
func PagedSharedStepPenalty(layers int, weightBytes int64) float64 {
	return stepPenalty(layers, weightBytes, pagedLayerOverheadS)
}

// stepPenalty is a shared graph's per-layer overhead over the estimated
// step, DefaultSharedStepPenalty without a model, and never more.
func stepPenalty(layers int, weightBytes int64, overheadS float64) float64 {
	if layers <= 0 || weightBytes <= 0 {
		return DefaultSharedStepPenalty
	}
	step := float64(weightBytes)/weightBytesPerS + float64(layers)*decodeLayerS
	return min(float64(layers)*overheadS/step, DefaultSharedStepPenalty)
}

// SharedPays is auto mode's choice of a shared graph for the rung that takes
// a prompt of n tokens and then decodes decoded tokens, on a device that
// compiles shared graphs, whose steps are penalty longer than the decode
// graph's (SharedStepPenalty): the prompt costs PromptCalls(n, per) calls
// of the decode graph (per tokens a call: 1, or a kernel graph's 8 or 16,
// each call taken as a step) and PromptCalls(n, chunk) through the shared
// graph, which then costs penalty of a step more for each token the rung
// decodes; the calls it saves must outweigh that. Compiling the shared
// graph costs no more than the decode graph (on the AVX2 CPU above less:
// 8.0-8.6 against 13.8-17.3 s for the qwen2.5-0.5b shapes), and it spares
// the prefill graph's compile and memory.
func SharedPays(n, per, chunk, decoded int, penalty float64) bool {
	saved := PromptCalls(n, per) - PromptCalls(n, chunk)
	return saved > 0 && float64(saved) > penalty*float64(decoded)
}

// PromptCalls are the decode graph's calls for n prompt tokens, per a
// call (0: 1).
func PromptCalls(n, per int) int {
	per = max(per, 1)
	return (n + per - 1) / per
}

// SharedWhy says why SharedPays chose a shared graph, for the reasons that
// summaries, generate and plan give.
func SharedWhy(n, per, chunk, decoded int, penalty float64) string {
	return fmt.Sprintf("auto: the %d-token prompt through the decode graph would take %d calls, %d more than through a shared graph, estimated %.0f%% longer a step for this model, cost over the %d tokens the rung decodes",
		n, PromptCalls(n, per), PromptCalls(n, per)-PromptCalls(n, chunk), 100*penalty, decoded)
}
