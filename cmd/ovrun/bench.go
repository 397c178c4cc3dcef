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

	"github.com/ovtoolkit/ovrun/app/bench"
	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/stats"
	"github.com/ovtoolkit/ovrun/runtime"
)

var (
	// benchModelFlag is --model, checked by the action rather than by the
	// parser, so that "ovrun bench merge DIR" needs no --model.
	benchModelFlag = cliutil.ModelFlag(false)
	armsFlag       = &cli.StringFlag{Name: "arms", Value: "grow-eager,grow-one-ahead", Usage: "`ARMS` to compare, the control first: policies (" + strings.Join(runtime.PolicyNames(), ", ") + "), each optionally +prefill=MODE (" + strings.Join(runtime.PrefillModes(), ", ") + "), +compile-in=WHERE (process, worker), +weights=FORMAT (native, rounded, f32, kernel, kernel-q8) and +attention=FORM (auto, bounded, static)",
		Action: func(_ *cli.Context, v string) error { _, err := parseArms(v); return err }}
	pairsFlag             = &cli.IntFlag{Name: "pairs", Value: stats.MinPairs, Usage: "measured blocks `N` (each runs every arm once); default 6, or a whole number of Williams cycles for 3+ arms"}
	allowSmallFlag        = &cli.BoolFlag{Name: "allow-small", Usage: "accept --pairs below 6, odd, or not a whole number of counterbalancing cycles"}
	benchPromptTokensFlag = &cli.IntFlag{Name: "prompt-tokens", Value: 128, Usage: "a seeded random prompt of `N` tokens"}
	verifyBoundariesFlag  = &cli.BoolFlag{Name: "verify-boundaries", Usage: "pass --verify to every run: boundary logits compared with a never-switched control (outside the timed path)"}
	runFlagFlag           = &cli.StringSliceFlag{Name: "run-flag", Usage: "extra `FLAG` for every ovrun run, e.g. --run-flag=--infer-threads=1 (repeatable; commas are kept)"}
	benchOutFlag          = &cli.StringFlag{Name: "out", Usage: "campaign `DIR` (required)"}
	resumeFlag            = &cli.BoolFlag{Name: "resume", Usage: "continue the campaign in --out, reusing its complete runs"}
	keepGoingFlag         = &cli.BoolFlag{Name: "keep-going", Usage: "record a failed run and go on instead of stopping"}
	benchCacheFlag        = &cli.StringFlag{Name: "cache", Usage: "compiled-rung cache `MODE` of the runs: cold gives every run a fresh empty --cache-dir (compile and export), warm one campaign --cache-dir that the warm-up runs fill (every measured run imports); unset: no cache",
		Action: func(_ *cli.Context, v string) error { _, err := bench.ParseCache(v); return err }}
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
command; schema ovrun.bench/1, every field in docs/outputs.md), report.md
(the endpoint tables) and timeline.svg, kv.svg, endpoints.svg. --resume
and merge refuse a run summary a newer ovrun wrote.

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
--run-flag=--compile-cpus=1 --run-flag=--device=NPU.

An arm may fix the prefill mode as well as the policy, to compare prefill
schedules: --arms grow-one-ahead+prefill=graph,grow-one-ahead+prefill=auto.
Every run's ttft_s (process start to the first token) is an endpoint.
An arm may also say where graphs compile, to measure compile workers:
--arms grow-one-ahead,grow-one-ahead+compile-in=worker.

--cache cold|warm measures the compiled-rung cache: cold gives every run a
fresh empty --cache-dir (each rung compiled, then exported into it), warm
gives every run the campaign's DIR/rung-cache, which the warm-up runs fill,
so that every measured run imports its rungs.

--queue nats://HOST:PORT runs the blocks on other machines instead of here:
the campaign publishes each block as one work item (its own warm-up run per
arm, its arms in their counterbalanced order, the run flags) to NATS
JetStream; "ovrun worker"s whose --labels meet the block's --requires class
run it whole, and the runs come back into --out/classes/CLASS/ in the layout
above (plus blocks/, where each block ran), one folder and one set of
statistics per class. Repeat --requires to run the design on several classes
of machine; they are never pooled unless "ovrun bench merge --pool". The
campaign waits for every block (Ctrl-C leaves them running; --detach does not
wait); "ovrun bench merge DIR" collects and reports at any time. See
"ovrun bench merge --help", "ovrun worker --help" and docs/fleet.md.`,
	Flags: []cli.Flag{
		benchModelFlag, ladderFlag, armsFlag, pairsFlag, allowSmallFlag,
		promptFlag, promptFileFlag, benchPromptTokensFlag, decodeTokensFlag, teacherFlag, seedFlag, precisionFlag, attentionFlag,
		verifyBoundariesFlag, compileCostFlag, benchCacheFlag, runFlagFlag, benchOutFlag, resumeFlag, keepGoingFlag,
		campaignQueueFlag, requiresFlag, detachFlag, ackWaitFlag,
		quietFlag,
	},
	Subcommands: []*cli.Command{benchMergeCommand},
	Action:      benchAction,
}

func benchAction(c *cli.Context) error {
	ladder, err := cliutil.ParseInts(ladderFlag.Name, ladderFlag.Get(c))
	if err != nil {
		return err
	}
	if benchModelFlag.Get(c) == "" {
		return errors.New("give the model: --model FILE.gguf or --model DIR")
	}
	model, err := filepath.Abs(benchModelFlag.Get(c))
	if err != nil {
		return err
	}
	precision, err := cliutil.ParsePrecision(precisionFlag.Get(c))
	if err != nil {
		return err
	}
	arms, err := parseArms(armsFlag.Get(c))
	if err != nil {
		return err
	}
	attention, err := attentionOf(c)
	if err != nil {
		return err
	}
	if attention == "auto" {
		attention = "" // each run resolves it for its device
	}
	cfg := &bench.Config{
		Model: model, Ladder: ladder, Arms: arms, Pairs: pairsFlag.Get(c),
		PromptTokens: benchPromptTokensFlag.Get(c), DecodeTokens: decodeTokensFlag.Get(c),
		TeacherForced: teacherFlag.Get(c), Seed: seedFlag.Get(c), Precision: precision,
		Attention: string(attention), VerifyBoundaries: verifyBoundariesFlag.Get(c), Cache: benchCacheFlag.Get(c),
	}
	if cfg.Prompt, err = benchPrompt(c); err != nil {
		return err
	}
	if p := compileCostFlag.Get(c); p != "" {
		if _, err := compilecost.Load(p); err != nil {
			return err
		}
		if cfg.CompileCost, err = filepath.Abs(p); err != nil {
			return err
		}
	}
	cfg.RunFlags = runFlagFlag.Get(c)
	if !c.IsSet(pairsFlag.Name) && len(arms) > 2 {
		cfg.Pairs = stats.BalancedPairs(len(arms))
	}
	if err := cfg.Validate(allowSmallFlag.Get(c)); err != nil {
		return err
	}
	if err := checkModelPath(model); err != nil {
		return err
	}
	out := benchOutFlag.Get(c)
	if out == "" {
		return errors.New("give the campaign folder: --out DIR")
	}
	if campaignQueueFlag.Get(c) != "" {
		return queuedBench(c, cfg, out)
	}
	if err := checkQueueFlagsUnset(c); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the ovrun binary to run: %w", err)
	}
	prog := bench.NewTerminal(os.Stderr, quietFlag.Get(c))
	opt := bench.Options{
		Dir: out, Resume: resumeFlag.Get(c), KeepGoing: keepGoingFlag.Get(c),
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

// parseArms splits --arms and checks every name is a policy.
func parseArms(s string) ([]string, error) {
	var arms []string
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		if _, err := bench.ParseArm(a); err != nil {
			return nil, fmt.Errorf("--arms: %w", err)
		}
		arms = append(arms, a)
	}
	return arms, nil
}

// checkModelPath fails early, before a campaign starts any run, when model
// is neither a GGUF file nor a checkpoint folder with a config.json.
func checkModelPath(model string) error {
	if st, err := os.Stat(model); err == nil && st.Mode().IsRegular() && strings.HasSuffix(strings.ToLower(model), ".gguf") {
		return nil
	}
	if _, err := os.Stat(filepath.Join(model, "config.json")); err != nil {
		return fmt.Errorf("--model %s: not a .gguf file and no config.json in it (make one with: ovrun synth --preset small --out DIR)", model)
	}
	return nil
}

// benchPrompt is the text prompt of a campaign (--prompt or the contents of
// --prompt-file), "" for the seeded random prompt.
func benchPrompt(c *cli.Context) (string, error) {
	text := promptFlag.Get(c)
	if p := promptFileFlag.Get(c); p != "" {
		if text != "" {
			return "", errors.New("give --prompt or --prompt-file, not both")
		}
		b, err := readPromptFile(p)
		if err != nil {
			return "", err
		}
		text = string(b)
	}
	if text != "" && c.IsSet(benchPromptTokensFlag.Name) {
		return "", errors.New("give a text prompt or --prompt-tokens, not both")
	}
	return text, nil
}
