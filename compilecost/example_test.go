package compilecost_test

import (
	"fmt"

	"github.com/ovtoolkit/ovrun/compilecost"
)

func ExampleRungFor() {
	ladder := []int{1024, 2048, 4096, 8192}
	for _, tokens := range []int{1024, 1025, 8192, 8193} {
		idx, ok := compilecost.RungFor(ladder, tokens)
		fmt.Println(tokens, idx, ok)
	}
	// Output:
	// 1024 0 true
	// 1025 1 true
	// 8192 3 true
	// 8193 -1 false
}

func ExampleSimulate() {
	profile := compilecost.Profile{Model: "m", Device: "CPU", Rungs: []compilecost.Rung{
		{Capacity: 1024, MedianS: 4}, {Capacity: 2048, MedianS: 6}, {Capacity: 4096, MedianS: 10}, {Capacity: 8192, MedianS: 18},
	}}
	for _, policy := range []string{compilecost.PolicyGrowEager, compilecost.PolicyGrowOneAhead} {
		r := compilecost.Simulate(compilecost.SimConfig{
			Ladder:       []int{1024, 2048, 4096, 8192},
			PromptTokens: 128, DecodeTokens: 8064,
			Policy:          policy,
			CompileS:        profile.CompileFunc(),
			DecodeStepS:     func(int) float64 { return 0.02 },
			PrefillS:        0.5,
			MigrateS:        func(from, to, live int) float64 { return 1e-5 * float64(live) },
			KVBytesPerToken: 12 << 10,
		})
		fmt.Printf("%-14s foreground %5.2f s  critical path %6.2f s  wait %.2f s  overlapped %5.2f s\n",
			r.Policy, r.ForegroundCompileS, r.CriticalPathS, r.BoundaryWaitS, r.OverlappedS)
	}
	// Output:
	// grow-eager     foreground 38.00 s  critical path 199.85 s  wait 0.00 s  overlapped  0.00 s
	// grow-one-ahead foreground  4.00 s  critical path 165.85 s  wait 0.00 s  overlapped 33.47 s
}
