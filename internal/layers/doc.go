// Package layers holds no code: its test checks the import rules of
// docs/design.md §2 (the layers from cmd/ down to the leaf helpers in
// internal/, and who may import whom) against the real imports that
// `go list` reports, so an import that breaks them fails
// `go test ./internal/layers`. The test's table of rules mirrors the
// table in docs/design.md §2; a package with no row, or a row with no
// package, fails it too, so the two are changed together.
package layers
