package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/app/profiling"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
)

var (
	nFlag          = &cli.IntFlag{Name: "n", Value: 20, Usage: "rows to print (-1: all)"}
	byFlag         = &cli.StringFlag{Name: "by", Value: profiling.ByFunction, Usage: "group by `function` or object (shared object)", Action: cliutil.OneOf("by", profiling.ByFunction, profiling.ByObject)}
	sampleTypeFlag = &cli.StringFlag{Name: "sample-type", Usage: "`TYPE` to rank by (default: the profile's, e.g. cpu-clock or instructions)"}
	widthFlag      = &cli.IntFlag{Name: "width", Value: 100, Usage: "longest function name printed, `CHARS`"}
)

var (
	nodesFlag     = &cli.IntFlag{Name: "nodes", Usage: "the graph's node count `N` (default: from the profile)"}
	ratioFlag     = &cli.Float64Flag{Name: "ratio", Value: profiling.DefaultRepeatRatio, Usage: "flag calls >= `R` per graph node"}
	printJSONFlag = &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"}
	sortFlag      = &cli.StringFlag{Name: "sort", Value: "flat", Usage: "order by the change of `flat` or cum", Action: cliutil.OneOf("sort", "flat", "cum")}
)

var topCommand = &cli.Command{
	Name:      "top",
	Usage:     "print the hotspots of a profile, flagging functions called far more often than the graph has nodes",
	ArgsUsage: "F.pb.gz",
	Description: `Ranks functions by flat (self) value and shows cumulative shares, the shared
object, and — for callgrind profiles — exact call counts. With the graph's
node count (recorded by "ovtrace profile --model", or --nodes N) it flags
functions whose calls per graph node reach --ratio: the signature of repeated
work, such as re-sorting the same dependency vectors once per query instead of
once per node. Functions of system libraries (libc, libstdc++, the loader,
the kernel) are never flagged.`,
	Flags: []cli.Flag{nFlag, byFlag, sampleTypeFlag, widthFlag,
		nodesFlag,
		ratioFlag,
		printJSONFlag,
	},
	Action: func(c *cli.Context) error {
		if c.Args().Len() != 1 {
			return fmt.Errorf("give one profile: ovtrace top F.pb.gz")
		}
		if err := checkTableFlags(c); err != nil {
			return err
		}
		if err := cliutil.CheckInt("nodes", nodesFlag.Get(c), 0, 1<<31-1); err != nil {
			return err
		}
		if err := cliutil.CheckFloat("ratio", ratioFlag.Get(c), 0, 1e12); err != nil {
			return err
		}
		p, err := profiling.ReadFile(c.Args().First())
		if err != nil {
			return err
		}
		rep, err := profiling.Top(p, profiling.TopOptions{
			SampleType: sampleTypeFlag.Get(c), By: byFlag.Get(c), N: nFlag.Get(c),
			Nodes: nodesFlag.Get(c), RepeatRatio: ratioFlag.Get(c),
		})
		if err != nil {
			return err
		}
		if printJSONFlag.Get(c) {
			return printJSON(c.App.Writer, rep)
		}
		return profiling.WriteTop(c.App.Writer, rep, widthFlag.Get(c))
	},
}

var diffCommand = &cli.Command{
	Name:      "diff",
	Usage:     "per-function change from profile A to profile B, largest absolute change first",
	ArgsUsage: "A.pb.gz B.pb.gz",
	Description: `Compares absolute values (CPU seconds for perf, instruction counts for
callgrind), flat and cumulative, so a faster B shows negative deltas. Both
profiles must carry the sample type compared. Sampled profiles differ by
sampling noise too: compare deltas with the totals, and repeat.`,
	Flags: []cli.Flag{nFlag, byFlag, sampleTypeFlag, widthFlag,
		sortFlag,
		printJSONFlag,
	},
	Action: func(c *cli.Context) error {
		if c.Args().Len() != 2 {
			return fmt.Errorf("give two profiles: ovtrace diff A.pb.gz B.pb.gz")
		}
		if err := checkTableFlags(c); err != nil {
			return err
		}
		a, err := profiling.ReadFile(c.Args().Get(0))
		if err != nil {
			return err
		}
		b, err := profiling.ReadFile(c.Args().Get(1))
		if err != nil {
			return err
		}
		rep, err := profiling.Diff(a, b, profiling.DiffOptions{
			SampleType: sampleTypeFlag.Get(c), By: byFlag.Get(c), N: nFlag.Get(c), SortBy: sortFlag.Get(c),
		})
		if err != nil {
			return err
		}
		if printJSONFlag.Get(c) {
			return printJSON(c.App.Writer, rep)
		}
		return profiling.WriteDiff(c.App.Writer, rep, widthFlag.Get(c))
	},
}

// checkTableFlags checks the flags top and diff share.
func checkTableFlags(c *cli.Context) error {
	if err := cliutil.CheckInt(widthFlag.Name, widthFlag.Get(c), profiling.MinNameWidth, 100000); err != nil {
		return err
	}
	if n := nFlag.Get(c); n < -1 || n > 1<<31-1 {
		return fmt.Errorf("--%s %d: want a row count, or -1 for all", nFlag.Name, n)
	}
	return nil
}
