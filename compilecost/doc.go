// Package compilecost holds measured per-rung compile-cost profiles (the
// cost.json contract), the fits that extend them to capacities that were not
// measured, and a planning simulator (Simulate) that predicts the timeline of
// every run policy — foreground compile, boundary waits, overlap of
// background compiles with decode, reserved and live KV — from those costs.
//
// The ladder arithmetic (RungFor), the policies and the launch rule are the
// ladder package's, shared with the runtime: the simulator follows the
// runtime's schedules, and runtime's TestSimulatorPredictsTheRuntime checks
// that for the same costs both give the same launch times and waits.
//
// Per-rung budgets come from here: a scheduler compiling one rung ahead
// meets its deadline when the successor's compile time fits in the decode
// window before the boundary (see Deadline and Deadlines).
//
// The package uses only the standard library and the ladder vocabulary; it
// knows nothing of OpenVINO.
package compilecost
