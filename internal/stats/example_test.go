package stats_test

import (
	"fmt"

	"github.com/ovtoolkit/ovrun/internal/stats"
)

func ExampleCompare() {
	// Foreground compile wall of six counterbalanced pairs (seconds).
	eager := []float64{84.1, 85.3, 83.9, 84.8, 84.5, 83.2}
	oneAhead := []float64{65.2, 66.0, 65.8, 64.9, 65.5, 64.7}
	c, err := stats.Compare("foreground_compile_s", eager, oneAhead, true)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %.2f s (%.2f%%), 95%% CI [%.2f, %.2f], sign-flip p = %.5f, wins %d/%d\n",
		c.Endpoint, c.DiffMean, *c.PctChange, *c.CI95Low, *c.CI95High, c.PSignFlip, c.TreatmentWins, c.N)
	// Output:
	// foreground_compile_s: -18.95 s (-22.48%), 95% CI [-19.61, -18.29], sign-flip p = 0.03125, wins 6/6
}

func ExampleOrders() {
	fmt.Println(stats.Orders(2, 4))
	fmt.Println(stats.Orders(4, 4))
	// Output:
	// [[0 1] [1 0] [0 1] [1 0]]
	// [[0 1 3 2] [1 2 0 3] [2 3 1 0] [3 0 2 1]]
}

// The smallest two-sided p an exact sign-flip test can give with n pairs.
func ExampleSignFlipFloor() {
	for _, n := range []int{5, 6, 8} {
		fmt.Printf("N=%d: %.4f\n", n, stats.SignFlipFloor(n))
	}
	// Output:
	// N=5: 0.0625
	// N=6: 0.0312
	// N=8: 0.0078
}
