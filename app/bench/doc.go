// Package bench runs `ovrun bench` campaigns: counterbalanced, paired runs of
// ladder policies, each in a fresh `ovrun run` process, and reports them
// with honest statistics (docs/design.md §7).
//
// A campaign is a Config (what is measured, stored as campaign.json) and a
// Plan: one excluded warm-up run per arm, then Pairs blocks that each run
// every arm once, in AB/BA alternation for two arms and in the rows of a
// Williams design for more. The first arm is the control. Run executes the
// plan through a Runner (ExecRunner in production, a fake in tests), keeps
// every finished run summary under runs/, and writes report.json,
// report.md and three SVG plots (timeline.svg, kv.svg, endpoints.svg).
// An interrupted campaign continues with Options.Resume, which reuses the
// complete summaries that match the stored campaign.
package bench
