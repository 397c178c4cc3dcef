package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/internal/abtest"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/safefile"
)

var (
	ladderFlag = &cli.StringFlag{Name: "ladder", Value: "1024,2048,4096,8192", Usage: "ascending `CAPACITIES` to measure"}
	repsFlag   = &cli.IntFlag{Name: "reps", Value: 3, Usage: "compiles per capacity"}
)

var compileCommand = &cli.Command{
	Name:  "compile",
	Usage: "measure the compile cost of every capacity of a ladder, each compile in a fresh process",
	Description: `Compiles the decode graph (--chunk 1) of every --ladder capacity --reps times,
each in a fresh "ovtrace compile-once" process, ascending in odd repetitions
and descending in even ones. Per capacity it records the IR build time (emit
and read), the compile wall and CPU time (user+sys of all threads) and the
peak RSS, and fits compile time against capacity (line or power law, the one
with the higher R²).

--json writes the compile-cost profile (cost.json: model, device,
openvino_version, rungs[{capacity, compile_s[], compile_cpu_s[], median_s,
ir_build_s[], peak_rss_bytes}], fit{model, a, b, r2, max_rel_err, n}) that
"ovrun run --compile-cost" and "ovtrace plan" read. A failed compile or Ctrl-C
still writes what was measured, and exits non-zero.`,
	Flags: append(compileFlags(),
		ladderFlag,
		repsFlag,
		jsonFlag, quietFlag,
	),
	Action: compileAction,
}

func compileAction(c *cli.Context) error {
	cfg, err := onceConfig(c, 0)
	if err != nil {
		return err
	}
	ladder, err := cliutil.ParseInts("ladder", ladderFlag.Get(c))
	if err != nil {
		return err
	}
	for _, r := range ladder {
		if err := cliutil.CheckInt("ladder", r, 1, maxCapacity); err != nil {
			return err
		}
	}
	if err := cliutil.CheckInt("reps", repsFlag.Get(c), 1, 1000); err != nil {
		return err
	}
	if p := jsonFlag.Get(c); p != "" {
		if err := safefile.Check(p); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	st := cliutil.NewStatus(os.Stderr, quietFlag.Get(c))
	sweep := abtest.SweepConfig{Ladder: ladder, Reps: repsFlag.Get(c), Model: cfg.Model, Device: cfg.Device, Precision: cfg.Precision}
	run := func(ctx context.Context, capacity int) (*abtest.Measurement, error) {
		once := cfg
		once.Capacity = capacity
		return runOnce(ctx, once, abtest.Variant{})
	}
	st.Show("compile 1/%d: capacity %d", len(ladder)*sweep.Reps, ladder[0])
	prof, err := abtest.Sweep(c.Context, sweep, run, func(p abtest.SweepProgress) {
		left := p.Elapsed / time.Duration(p.Done) * time.Duration(p.Total-p.Done)
		st.Show("compile %d/%d done: capacity %d in %.2f s  ETA %s", p.Done, p.Total, p.Capacity, p.Last.CompileS, eta(left))
	})
	st.Clear()
	if prof != nil {
		if path := jsonFlag.Get(c); path != "" {
			if serr := prof.Save(path); serr != nil {
				return errors.Join(err, serr)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "ovtrace: wrote the partial profile to %s\n", path)
			}
		}
		if werr := abtest.WriteProfile(c.App.Writer, prof); werr != nil {
			return errors.Join(err, werr)
		}
	}
	return err
}
