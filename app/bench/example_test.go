package bench_test

import (
	"fmt"

	"github.com/ovtoolkit/ovrun/app/bench"
	"github.com/ovtoolkit/ovrun/internal/stats"
)

// Two arms alternate AB and BA; the first arm is the control.
func ExampleOrders() {
	for _, block := range bench.Orders([]string{"grow-eager", "grow-one-ahead"}, 4) {
		fmt.Println(block)
	}
	// Output:
	// [grow-eager grow-one-ahead]
	// [grow-one-ahead grow-eager]
	// [grow-eager grow-one-ahead]
	// [grow-one-ahead grow-eager]
}

// Three arms follow a Williams design: six sequences in which every arm
// holds every position twice and follows every other arm twice.
func ExampleOrders_williams() {
	for _, block := range bench.Orders([]string{"direct", "grow-eager", "grow-one-ahead"}, stats.BalancedPairs(3)) {
		fmt.Println(block)
	}
	// Output:
	// [direct grow-eager grow-one-ahead]
	// [grow-eager grow-one-ahead direct]
	// [grow-one-ahead direct grow-eager]
	// [grow-one-ahead grow-eager direct]
	// [direct grow-one-ahead grow-eager]
	// [grow-eager direct grow-one-ahead]
}
