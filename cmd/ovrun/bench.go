package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/internal/bench"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
)

var benchCommand = &cli.Command{
	Name:  "bench",
	Usage: "counterbalanced paired campaign of ladder policies with honest statistics",
	Description: `Runs every arm (policy) once per block, each run a fresh "ovrun run" process,
after one excluded warm-up run per arm. Two arms alternate AB/BA; three or more
follow a Williams design (every arm in every position, every ordered pair of
arms adjacent equally often). The first arm is the control.

Writes into --out: campaign.json (the campaign, checked by --resume),
runs/<pair>-<pos>-<arm>.json (each run summary, with its .log), report.json
(arms, order, runs, comparisons, boundary evidence, machine, versions,
command), report.md (the endpoint tables) and timeline.svg, kv.svg,
endpoints.svg.

Why N defaults to 6: the report's p is an exact two-sided sign-flip test of
the paired differences, whose smallest possible value with N pairs is 2/2^N.
With 5 pairs that floor is 0.0625, so no result could ever reach p < 0.05;
with 6 it is 0.031. --pairs must therefore be even (AB and BA equally often)
and at least 6, or a whole number of Williams cycles for more arms;
--allow-small runs smaller designs (for smoke tests) and the report says what
they cannot show.

Ctrl-C kills the current run, keeps the finished ones, writes a partial
report and exits non-zero; --resume with the same --out and flags reruns only
the missing runs. A failed run stops the campaign unless --keep-going.
Extra "ovrun run" flags go through --run-flag, e.g. --run-flag=--infer-threads=1
--run-flag=--compile-cpus=1 --run-flag=--device=NPU.`,
	Flags: []cli.Flag{
		modelFlag,
		&cli.StringFlag{Name: "ladder", Value: "1024,2048,4096,8192", Usage: "ascending context `CAPACITIES`"},
		&cli.StringFlag{Name: "arms", Value: "grow-eager,grow-one-ahead", Usage: "`POLICIES` to compare, the control first (direct, pyramid, grow-eager, grow-one-ahead, lazy, grow-remap)"},
		&cli.IntFlag{Name: "pairs", Value: bench.DefaultPairs, Usage: "measured blocks `N` (each runs every arm once); default 6, or a whole number of Williams cycles for 3+ arms"},
		&cli.BoolFlag{Name: "allow-small", Usage: "accept --pairs below 6, odd, or not a whole number of counterbalancing cycles"},
		&cli.IntFlag{Name: "prompt-tokens", Value: 128, Usage: "a seeded random prompt of `N` tokens"},
		&cli.IntFlag{Name: "decode-tokens", Value: 256, Usage: "decode `STEPS` per run"},
		&cli.BoolFlag{Name: "teacher-forced", Usage: "feed every run the same seeded token stream"},
		seedFlag,
		precisionFlag,
		&cli.BoolFlag{Name: "verify-boundaries", Usage: "pass --verify to every run: boundary logits compared with a never-switched control (outside the timed path)"},
		&cli.GenericFlag{Name: "run-flag", Value: &stringList{}, Usage: "extra `FLAG` for every ovrun run, e.g. --run-flag=--infer-threads=1 (repeatable; commas are kept)"},
		&cli.StringFlag{Name: "out", Required: true, Usage: "campaign `DIR`"},
		&cli.BoolFlag{Name: "resume", Usage: "continue the campaign in --out, reusing its complete runs"},
		&cli.BoolFlag{Name: "keep-going", Usage: "record a failed run and go on instead of stopping"},
		quietFlag,
	},
	Action: benchAction,
}

// stringList is a repeatable string flag that, unlike cli.StringSlice,
// does not split its values at commas (--compile-cpus=1,2 must survive).
type stringList struct{ v []string }

func (s *stringList) Set(x string) error { s.v = append(s.v, x); return nil }
func (s *stringList) String() string     { return strings.Join(s.v, " ") }

func benchAction(c *cli.Context) error {
	ladder, err := cliutil.ParseInts("ladder", c.String("ladder"))
	if err != nil {
		return err
	}
	model, err := filepath.Abs(c.String(modelFlag.Name))
	if err != nil {
		return err
	}
	precision := strings.ToLower(c.String(precisionFlag.Name))
	switch precision {
	case "", "f32", "bf16", "f16":
	default:
		return fmt.Errorf("--precision %q: want f32, bf16 or f16", precision)
	}
	var arms []string
	for _, a := range strings.Split(c.String("arms"), ",") {
		arms = append(arms, strings.TrimSpace(a))
	}
	cfg := &bench.Config{
		Model: model, Ladder: ladder, Arms: arms, Pairs: c.Int("pairs"),
		PromptTokens: c.Int("prompt-tokens"), DecodeTokens: c.Int("decode-tokens"),
		TeacherForced: c.Bool("teacher-forced"), Seed: c.Uint64(seedFlag.Name), Precision: precision,
		VerifyBoundaries: c.Bool("verify-boundaries"),
	}
	if rf, ok := c.Generic("run-flag").(*stringList); ok {
		cfg.RunFlags = rf.v
	}
	if !c.IsSet("pairs") && len(arms) > 2 {
		cfg.Pairs = bench.BalancedPairs(len(arms))
	}
	if err := cfg.Validate(c.Bool("allow-small")); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(model, "config.json")); err != nil {
		return fmt.Errorf("--model %s: no config.json (make one with: ovrun synth --preset small --out DIR)", model)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the ovrun binary to run: %w", err)
	}
	out := c.String("out")
	prog := bench.NewTerminal(os.Stderr, c.Bool(quietFlag.Name))
	opt := bench.Options{
		Dir: out, Resume: c.Bool("resume"), KeepGoing: c.Bool("keep-going"),
		Runner: &bench.ExecRunner{Binary: exe},
		Meta: bench.Meta{
			Machine: bench.ReadMachine(), GoVersion: goruntime.Version(),
			Command: shellJoin(os.Args),
		},
	}
	if prog != nil {
		opt.Progress = prog.Update
	}
	rep, err := bench.Run(c.Context, cfg, opt)
	prog.Close()
	if rep != nil {
		printBench(rep, out)
	}
	if errors.Is(err, context.Canceled) {
		// Our own line and exit status 130, instead of main's generic one.
		return cli.Exit("ovrun: "+strings.TrimSuffix(cliutil.OneLine(err), ": "+context.Canceled.Error()), 130)
	}
	return err
}

// printBench writes the short human summary of a campaign.
func printBench(r *bench.Report, dir string) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	if len(r.Comparisons) > 0 {
		fmt.Fprintln(tw, "treatment\tendpoint\tcontrol\ttreatment\tdiff %\tp\twins\t")
	}
	for _, c := range r.Comparisons {
		pct := "n/a"
		if c.PctChange != nil {
			pct = fmt.Sprintf("%+.2f", *c.PctChange)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.4g\t%.4g\t%s\t%.3f\t%d/%d\t\n", c.Treatment, c.Endpoint, c.ControlMean, c.TreatmentMean, pct, c.PSignFlip, c.TreatmentWins, c.N)
	}
	tw.Flush()
	fmt.Printf("%s: report in %s\n", r.Status, filepath.Join(dir, "report.md"))
}

// shellJoin quotes args so the command line can be pasted into a shell.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`&|;<>()*?[]{}!#~") {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
