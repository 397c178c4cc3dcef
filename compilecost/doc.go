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
// SimulateServe plans a server instead of one request: ovrun serve
// --batching off on a kept ladder whose rungs launch by deadline
// (ladder.Due), under a seeded load (internal/traffic: the requests ovrun
// loadtest sends from the same seed), and predicts its boundary and
// admission waits, compiles by launch reason, time to first token and
// peak reserved KV.
//
// The package uses only the standard library, the ladder vocabulary and
// the internal traffic and stats helpers; it knows nothing of OpenVINO.
package compilecost
