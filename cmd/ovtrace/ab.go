package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/app/compilebench"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/internal/stats"
)

var (
	variantFlag       = &cli.StringSliceFlag{Name: "variant", Usage: "`NAME=SPEC` (repeatable, at least two; the first is the control)"}
	pairsFlag         = &cli.IntFlag{Name: "pairs", Value: compilebench.MinPairs, Usage: "paired blocks `N` (even, >= 6; whole Williams cycles for 3+ variants, which the default follows)"}
	endpointsFlag     = &cli.StringFlag{Name: "endpoints", Value: strings.Join(compilebench.DefaultEndpoints, ","), Usage: "`LIST` of compile_s, compile_cpu_s, peak_rss_bytes, ir_build_s"}
	allowSmallFlag    = &cli.BoolFlag{Name: "allow-small", Usage: "allow fewer than 6 pairs, an odd number, or not whole Williams cycles"}
	toleranceFlag     = &cli.Float64Flag{Name: "tolerance", Usage: "largest logit difference still reported as equal"}
	noEquivalenceFlag = &cli.BoolFlag{Name: "no-equivalence", Usage: "skip the logits and compiled-model comparisons"}
)

var abCommand = &cli.Command{
	Name:  "ab",
	Usage: "counterbalanced paired trials of compile variants (OpenVINO properties, environment, OpenVINO builds)",
	Description: `Each --variant is NAME=SPEC, SPEC a comma-separated list of
   prop:KEY=VALUE   an OpenVINO compile property
   env:KEY=VALUE    an environment variable of the variant's processes
   lib:DIR          an OpenVINO library folder (e.g. a patched build), passed as OVRUN_OPENVINO_LIB
   preload:PATH     a shared library preloaded into the compile process (LD_PRELOAD),
                    e.g. a patch that interposes functions OpenVINO calls through its PLT
The first variant is the control. Every trial compiles the --capacity graph in
a fresh process. Each variant first runs once as a warm-up (excluded), which
also writes the logits of a seeded prompt and one decode step. After every
compile, outside the timed window, the process exports the compiled model
(ov_compiled_model_export_model) and hashes its bytes. The report's
"equivalent" says whether every run of every variant exported byte-identical
compiled models, and compares the warm-ups' logits with the control's. Then
--pairs blocks run, in AB/BA alternation (Williams orders for more variants).

Every compile process gets OVTRACE_MEMO_STATS, a fresh file name: a preloaded
memoization patch keeps its counters there (patches/README.md), and the report
gives its calls per compile and hit rate.

Pairs default to 6 and must be even and >= 6 unless --allow-small: with n
pairs the smallest two-sided exact sign-flip p is 2/2^n, so 5 pairs can never
show p < 0.05, and an even n runs each variant first equally often. With 3 or
more variants they must be whole Williams cycles (a multiple of 6 for 3, of 4
for 4), and the default is the smallest such number >= 6, as in ovrun bench.

Per endpoint the report gives the arm means, the paired difference and %
change, the paired-t 95% CI, the exact sign-flip p, the treatment's wins and
the raw values. --json writes it (also when stopped by Ctrl-C or a failure).

--queue nats://HOST:PORT --out DIR runs the blocks on other machines: each
block (one warm-up per variant, with its own equivalence logits, then the
block's trials in its order, each compile-once command line as it would run
here) is a work item on NATS JetStream for the "ovrun worker"s whose --labels
meet its --requires class; each worker runs its blocks whole with this
ovtrace (ovrun worker --ovtrace). Repeat --requires for several classes: each
runs all --pairs blocks and gets its own report, DIR/classes/CLASS/ab.json (the
--json report over that class's trials, plus where each block ran);
DIR/merge.json names the overall result. --merge DIR collects and reports at
any time (--wait for every block); classes are pooled only with --pool, and
a pooled report says so. See "ovrun worker --help" and docs/fleet.md.`,
	Flags: append(compileFlags(), capacityFlag,
		variantFlag,
		pairsFlag,
		endpointsFlag,
		allowSmallFlag,
		toleranceFlag,
		noEquivalenceFlag,
		jsonFlag, quietFlag,
		abQueueFlag, abRequiresFlag, abOutFlag, abDetachFlag, abAckWaitFlag,
		abMergeFlag, abPoolFlag, abWaitFlag,
	),
	Action: abAction,
}

func abAction(c *cli.Context) error {
	if dir := abMergeFlag.Get(c); dir != "" {
		return abMerge(c, dir)
	}
	if len(variantFlag.Get(c)) < 2 {
		return fmt.Errorf("give at least two variants: --variant NAME=SPEC --variant NAME=SPEC (the first is the control)")
	}
	once, err := onceConfig(c, capacityFlag.Get(c))
	if err != nil {
		return err
	}
	if once.Capacity < 1 {
		return fmt.Errorf("give the graph's capacity: --capacity C")
	}
	if err := cliutil.CheckInt("pairs", pairsFlag.Get(c), 1, 10000); err != nil {
		return err
	}
	if err := cliutil.CheckFloat("tolerance", toleranceFlag.Get(c), 0, math.MaxFloat32); err != nil {
		return err
	}
	if p := jsonFlag.Get(c); p != "" {
		if err := safefile.Check(p); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	variants, err := compilebench.ParseVariants(variantFlag.Get(c))
	if err != nil {
		return err
	}
	for _, v := range variants {
		if err := v.Check(); err != nil {
			return err
		}
	}
	pairs := pairsFlag.Get(c)
	if !c.IsSet(pairsFlag.Name) {
		pairs = stats.BalancedPairs(len(variants))
	}
	cfg := compilebench.Config{
		Variants:   variants,
		Pairs:      pairs,
		Endpoints:  strings.Split(endpointsFlag.Get(c), ","),
		AllowSmall: allowSmallFlag.Get(c),
		Tolerance:  toleranceFlag.Get(c),
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if abQueueFlag.Get(c) != "" {
		return queuedAB(c, once, cfg)
	}
	if err := checkABQueueFlagsUnset(c); err != nil {
		return err
	}
	if !noEquivalenceFlag.Get(c) {
		dir, err := os.MkdirTemp("", "ovtrace-ab-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.LogitsDir = dir
	}
	st := cliutil.NewStatus(os.Stderr, quietFlag.Get(c))
	run := func(ctx context.Context, v compilebench.Variant, dumpLogits string) (*compilebench.Measurement, error) {
		o := once
		o.DumpLogits = dumpLogits
		o.ExportHash = !noEquivalenceFlag.Get(c)
		return runOnce(ctx, o, v)
	}
	rep, err := compilebench.Run(c.Context, cfg, run, func(p compilebench.Progress) {
		if p.Warmup {
			st.Show("warm-up %s (excluded; equivalence logits)", p.Variant)
			return
		}
		st.Show("trial %d of %d: %s (pair %d)  ETA %s", p.Trial, p.Total, p.Variant, p.Pair, eta(p.ETA))
	})
	st.Clear()
	if rep == nil {
		return err
	}
	rep.Model = filepath.Base(filepath.Clean(once.Model))
	rep.Capacity, rep.Device, rep.Precision = once.Capacity, once.Device, once.Precision
	if path := jsonFlag.Get(c); path != "" {
		if werr := cliutil.WriteJSON(path, rep); werr != nil {
			return errors.Join(err, werr)
		}
	}
	fmt.Fprintf(c.App.Writer, "%s, capacity %d on %s: ", rep.Model, rep.Capacity, rep.Device)
	if werr := compilebench.WriteReport(c.App.Writer, rep); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}
