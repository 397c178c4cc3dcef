package compilecost

import "fmt"

// SharedStepPenalty is how much longer a decode step of a shared graph
// (prefill mode shared: one graph per rung that takes 1 to the prefill
// chunk's tokens per call) takes than one of the decode graph of the same
// capacity, as a fraction of the step: every shape in a shared graph is
// dynamic, so the CPU plugin checks shapes at every node and fuses less.
// Measured for SmolLM2 in bf16 over whole generations (16 + 128 tokens,
// three interleaved rounds, medians): 0.37 at capacity 256, 0.38 at 1024,
// 0.43 at 4096 since its decode graphs compute the Q4_1 minima as a second
// product (a shared graph cannot gain from that); 0.10, 0.17 and 0.19
// before. The synthetic small model at f32: 0.10-0.18 (docs/design.md,
// "One graph for the prompt and decoding").
const SharedStepPenalty = 0.4

// SharedPays is auto mode's choice of a shared graph for the rung that takes
// a prompt of n tokens and then decodes decoded tokens, on a device that
// compiles shared graphs: the prompt costs n steps through the decode graph
// and next to nothing through the shared graph (a few chunks), which then
// costs SharedStepPenalty of a step more for each token the rung decodes.
// Compiling either graph costs about the same, and the shared graph spares
// the prefill graph's compile and memory.
func SharedPays(n, decoded int) bool {
	return n > 1 && float64(n) > SharedStepPenalty*float64(decoded)
}

// SharedWhy says why SharedPays chose a shared graph, for the reasons that
// summaries, generate and plan give.
func SharedWhy(n, decoded int) string {
	return fmt.Sprintf("auto: the %d-token prompt through the decode graph would take %d steps, more than a shared graph's %.0f%% longer steps cost over the %d tokens the rung decodes",
		n, n, 100*SharedStepPenalty, decoded)
}
