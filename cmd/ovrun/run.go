package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/ov"
	"github.com/ovtoolkit/ovrun/runtime"
)

// processStart is the origin of every *_start_s offset in run summaries.
var processStart = time.Now()

var runCommand = &cli.Command{
	Name:  "run",
	Usage: "decode across a ladder of compiled capacities under one policy",
	Description: `Policies (the seed's progression):
   direct          B0: one graph at the largest capacity, max KV from the start
   pyramid         B1: every rung compiled up front, one shared max-size KV
   grow-eager      I1: every rung up front, KV sized to the rung, copied at boundaries
   grow-one-ahead  I2: first rung up front, rung k+1 compiled while rung k decodes
   lazy            each rung compiled when its boundary is reached
   grow-remap      one-ahead compiles, KV in one reservation committed as tokens arrive

The first rung is the smallest that holds the prompt plus one token. Decode
steps past the largest rung stop the run with finish_reason "capacity".
--json writes the run summary (also on errors and Ctrl-C, with what was done).

On a CPU both decode and background compiles use the same cores; see
--compile-cpus, --compile-nice and --infer-threads.`,
	Flags: append(append(compileFlags(),
		&cli.StringFlag{Name: "ladder", Value: "1024,2048,4096,8192", Usage: "ascending context `CAPACITIES`"},
		&cli.StringFlag{Name: "policy", Value: "grow-one-ahead", Usage: "`POLICY`: direct, pyramid, grow-eager, grow-one-ahead, lazy, grow-remap"},
		promptIDsFlag, promptTokensFlag, seedFlag, prefillChunkFlag,
		&cli.IntFlag{Name: "decode-tokens", Value: 256, Usage: "decode `STEPS`"},
		&cli.BoolFlag{Name: "teacher-forced", Usage: "feed a seeded token stream (identical for every policy) instead of the model's own predictions"},
		&cli.BoolFlag{Name: "verify", Usage: "at every boundary compare the first step with a control that never switched (not for timing)"},
		&cli.StringFlag{Name: "compile-cpus", Usage: "pin background compiles to these `CPUS` (e.g. 1 or 2-3)"},
		&cli.IntFlag{Name: "compile-nice", Value: 19, Usage: "nice `N` (0-19) for the background compile thread; 19 lets decode keep the cores (see ovrun contention)"},
		jsonFlag, quietFlag,
	), traceFlags...),
	Action: runAction,
}

func runAction(c *cli.Context) error {
	caps, err := cliutil.ParseInts("ladder", c.String("ladder"))
	if err != nil {
		return err
	}
	ladder, err := runtime.NewLadder(caps)
	if err != nil {
		return err
	}
	policy, err := runtime.ParsePolicy(c.String("policy"))
	if err != nil {
		return err
	}
	cpus, err := parseCPUList(c, "compile-cpus")
	if err != nil {
		return err
	}
	n, err := promptLen(c)
	if err != nil {
		return err
	}
	if n >= ladder.Max() {
		return fmt.Errorf("%w: a prompt of %d tokens plus one decoded token needs %d slots; the largest rung holds %d",
			runtime.ErrCapacity, n, n+1, ladder.Max())
	}
	for _, err := range []error{
		runtime.CheckNice("compile-nice", c.Int("compile-nice")),
		cliutil.CheckInt("decode-tokens", c.Int("decode-tokens"), 1, runtime.MaxCapacity),
		checkCompileFlags(c),
		checkOutputs(c, jsonFlag.Name, traceOutFlag.Name, profileOutFlag.Name),
	} {
		if err != nil {
			return err
		}
	}
	// From here on --json gets a summary whatever happens.
	sum := &runtime.Summary{Policy: string(policy), Model: c.String(modelFlag.Name), Ladder: ladder,
		DecodeTokens: c.Int("decode-tokens"), Seed: c.Uint64(seedFlag.Name), FinishReason: "error"}
	fail := func(err error) error {
		sum.Error = err.Error()
		if p := c.String(jsonFlag.Name); p != "" {
			return errors.Join(err, cliutil.WriteJSON(p, sum))
		}
		return err
	}
	mcfg, err := modelConfig(c)
	if err != nil {
		return fail(err)
	}
	if err := runtime.CheckCapacity("ladder", ladder.Max(), runtime.ShapeOf(mcfg)); err != nil {
		return fail(err)
	}
	if err := runtime.CheckPrefillChunk(prefillChunkFlag.Name, c.Int(prefillChunkFlag.Name), ladder.Max(), mcfg); err != nil {
		return fail(err)
	}
	vocab := mcfg.VocabSize
	ids, err := prompt(c, vocab)
	if err != nil {
		return fail(err)
	}
	ck, comp, err := openModel(c)
	if err != nil {
		return fail(err)
	}
	defer ck.Close()
	defer comp.Close()
	cfg := runtime.RunConfig{
		Ladder: ladder, Policy: policy, Prompt: ids, DecodeTokens: c.Int("decode-tokens"),
		Verify: c.Bool("verify"), PrefillChunk: c.Int(prefillChunkFlag.Name),
		Background:   runtime.BackgroundOptions{CPUs: cpus, Nice: c.Int("compile-nice")},
		ProcessStart: processStart,
	}
	if c.Bool("teacher-forced") {
		// A stream independent of the prompt's: seed+1.
		cfg.Forced = runtime.SeededTokens(c.Uint64(seedFlag.Name)+1, cfg.DecodeTokens, vocab)
	}
	if p := c.String("compile-cost"); p != "" {
		if cfg.CompileCost, err = compilecost.Load(p); err != nil {
			return fail(err)
		}
	}
	prog := newProgress(c.Bool(quietFlag.Name))
	cfg.Progress = prog.update
	obs, err := startObserver(c)
	if err != nil {
		return fail(err)
	}
	sum, runErr := runtime.Run(c.Context, comp, runtime.ShapeOf(ck.Config), cfg)
	prog.done()
	sum.Model = c.String(modelFlag.Name)
	sum.Device = comp.Options().Device
	sum.Precision = comp.Options().Precision
	sum.PrecisionUsed = comp.EffectivePrecision()
	sum.Seed = c.Uint64(seedFlag.Name)
	sum.OpenVINOVersion, _ = ov.Version()
	// The summary first: a hung trace export cannot lose it.
	var werr error
	saved := ""
	if p := c.String(jsonFlag.Name); p != "" {
		if werr = cliutil.WriteJSON(p, sum); werr == nil {
			saved = p
		}
	}
	obs.finish(sum) // spans and profile, also after errors and Ctrl-C
	if !c.Bool(quietFlag.Name) || runErr == nil {
		printSummary(os.Stdout, sum)
	}
	if werr != nil {
		return errors.Join(runErr, werr)
	}
	return cliutil.Interrupted(runErr, saved)
}

// parseCPUList parses --compile-cpus or --decode-cpus: CPUs this process
// may use, in ranges that run forwards.
func parseCPUList(c *cli.Context, flag string) ([]int, error) {
	return runtime.ParseCPUList(flag, c.String(flag))
}
