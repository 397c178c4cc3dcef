//go:build race

package chat

// raceEnabled: the race detector's shadow memory counts against the
// worker's address space.
const raceEnabled = true
