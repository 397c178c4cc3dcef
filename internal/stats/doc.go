// Package stats holds the statistics that paired, counterbalanced A/B
// experiments report (docs/design.md §7): paired-t 95% confidence intervals, the
// exact two-sided sign-flip test, win counts and counterbalanced run orders
// (AB/BA alternation for two arms, Williams designs for more).
//
// Everything here is pure Go with no dependencies beyond the standard library,
// and nothing it returns for JSON output ever holds NaN or ±Inf: quantities
// that are undefined (a CI from one pair, a percent change from a zero
// control mean) are flagged or omitted instead.
package stats
