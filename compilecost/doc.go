// Package compilecost holds measured per-rung compile-cost profiles (the
// cost.json contract), the fits that extend them to capacities that were not
// measured, the capacity-ladder arithmetic (RungFor), and a planning
// simulator (Simulate) that predicts the timeline of every run policy —
// foreground compile, boundary waits, overlap of background compiles with
// decode, reserved and live KV — from those costs.
//
// Per-rung budgets come from here: a scheduler compiling one rung ahead
// meets its deadline when the successor's compile time fits in the decode
// window before the boundary (see Deadline and Deadlines).
//
// The package uses only the standard library and knows nothing of OpenVINO.
package compilecost
