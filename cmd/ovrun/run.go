package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/engine"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/hugepages"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
	"github.com/ovtoolkit/ovrun/runtime/ovexec"
)

// processStart is the origin of every *_start_s offset in run summaries.
var processStart = time.Now()

// defaultCompileNice lets decode keep the cores while a background compile
// runs (measured with ovrun contention: see docs/benchmarks.md).
const defaultCompileNice = 19

var (
	policyFlag = &cli.StringFlag{Name: "policy", Value: "grow-one-ahead", Usage: "`POLICY`: " + strings.Join(runtime.PolicyNames(), ", "),
		Action: func(_ *cli.Context, v string) error { _, err := runtime.ParsePolicy(v); return err }}
	verifyFlag      = &cli.BoolFlag{Name: "verify", Usage: "at every boundary compare the first step with a control that never switched (not for timing)"}
	compileCPUsFlag = &cli.StringFlag{Name: "compile-cpus", Usage: "pin background compiles to these `CPUS` (e.g. 1 or 2-3)"}
	compileNiceFlag = &cli.IntFlag{Name: "compile-nice", Value: defaultCompileNice, Usage: "nice `N` (0-19) for the background compile thread; 19 lets decode keep the cores (see ovrun contention)"}
)

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

The prompt is --prompt/--prompt-file text (tokenized with the model's own
tokenizer; the run then stops at the model's end-of-generation token unless
--ignore-eos, and prints and records the generated text) or token ids
(--prompt-ids, or a seeded random --prompt-tokens N for experiments).
The first rung is the smallest that holds the prompt plus one token. Decode
steps past the largest rung stop the run with finish_reason "capacity".
--json writes the run summary (also on errors and Ctrl-C, with what was done;
every field, with its schema ovrun.run/1: docs/outputs.md).

--compile-cost FILE (from "ovtrace compile") gives every successor a budget:
its predicted compile time against the decode window before its boundary,
measured as the run goes; a rung that cannot make it one ahead is launched
two ahead. budgets[] in the summary holds prediction, window and actual.

--prefill says how the prompt is processed. graph compiles the prefill graph
(--prefill-chunk tokens per call) before the first token; decode feeds the
prompt through the first rung's decode graph, one token per call, and never
compiles a prefill graph; auto starts on the decode graph and, after every
prompt token, compares the rest of the prompt at the measured step time with
compiling the prefill graph (its time from --compile-cost, else taken to be
at least the decode graph's) and running the rest through it, switching when
that is faster. All three give the same tokens; the summary records the mode,
what the prompt went through and why (prefill_mode, prefill_used,
prefill_reason, and shared_step_penalty: auto's estimate of a shared
graph's slower steps for this model) and the time to first token (ttft_s).

On a CPU both decode and background compiles use the same cores; see
--compile-cpus, --compile-nice and --infer-threads.`,
	Flags: append(append(compileFlags(),
		ladderFlag, policyFlag,
		promptFlag, promptFileFlag, promptIDsFlag, promptTokensFlag, seedFlag, prefillChunkFlag, prefillFlag,
		decodeTokensFlag, teacherFlag, verifyFlag, compileCostFlag,
		compileCPUsFlag, compileNiceFlag,
		jsonFlag, quietFlag,
	), append(samplingFlags, traceFlags...)...),
	Action: runAction,
}

func runAction(c *cli.Context) error {
	ladder, policy, err := ladderAndPolicy(c, ladderFlag, policyFlag)
	if err != nil {
		return err
	}
	cpus, err := parseCPUList(c, compileCPUsFlag)
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
	prefill, err := prefillMode(c)
	if err != nil {
		return err
	}
	for _, err := range []error{
		runtime.CheckNice(compileNiceFlag.Name, compileNiceFlag.Get(c)),
		cliutil.CheckInt(decodeTokensFlag.Name, decodeTokensFlag.Get(c), 1, runtime.MaxCapacity),
		checkCompileFlags(c),
		checkOutputs(c, jsonFlag, traceOutFlag, profileOutFlag),
	} {
		if err != nil {
			return err
		}
	}
	// From here on --json gets a summary whatever happens.
	sum := &runtime.Summary{Schema: runtime.SummarySchema, Policy: string(policy), Model: modelFlag.Get(c), Ladder: ladder,
		DecodeTokens: decodeTokensFlag.Get(c), Seed: seedFlag.Get(c), FinishReason: "error"}
	fail := func(err error) error {
		sum.Error = err.Error()
		if p := jsonFlag.Get(c); p != "" {
			return errors.Join(err, cliutil.WriteJSON(p, sum))
		}
		return err
	}
	mcfg, err := modelConfig(c)
	if err != nil {
		return fail(err)
	}
	if err := runtime.CheckCapacity(ladderFlag.Name, ladder.Max(), runtime.ShapeOf(mcfg)); err != nil {
		return fail(err)
	}
	if err := runtime.CheckPrefillChunk(prefillChunkFlag.Name, prefillChunkFlag.Get(c), ladder.Max(), mcfg); err != nil {
		return fail(err)
	}
	vocab := mcfg.VocabSize
	ck, comp, err := openModel(c)
	if err != nil {
		return fail(err)
	}
	defer ck.Close()
	defer comp.Close()
	in, err := readPrompt(c, ck)
	if err != nil {
		return fail(err)
	}
	if len(in.ids) >= ladder.Max() {
		return fail(fmt.Errorf("%w: a prompt of %d tokens plus one decoded token needs %d slots; the largest rung holds %d",
			runtime.ErrCapacity, len(in.ids), len(in.ids)+1, ladder.Max()))
	}
	// The prompt's prediction and one token per decode step.
	req, err := request(c, in, decodeTokensFlag.Get(c)+1)
	if err != nil {
		return fail(err)
	}
	dec, _, err := engine.Decoding(req)
	if err != nil {
		return fail(err)
	}
	cfg := runtime.RunConfig{
		Ladder: ladder, Policy: policy, Prompt: in.ids, DecodeTokens: decodeTokensFlag.Get(c), Decoding: dec,
		Verify: verifyFlag.Get(c), PrefillChunk: prefillChunk(c, comp), Prefill: prefill,
		Background:   runtime.BackgroundOptions{CPUs: cpus, Nice: compileNiceFlag.Get(c)},
		ProcessStart: processStart,
	}
	if teacherFlag.Get(c) {
		// A stream independent of the prompt's: seed+1.
		cfg.Forced = runtime.SeededTokens(seedFlag.Get(c)+1, cfg.DecodeTokens, vocab)
	}
	if cfg.CompileCost, err = loadCompileCost(c, comp, ladder); err != nil {
		return fail(err)
	}
	prog := newProgress(quietFlag.Get(c))
	cfg.Progress = prog.update
	obs, err := startObserver(c)
	if err != nil {
		return fail(err)
	}
	sum, runErr := runtime.Run(c.Context, comp, comp.KVShape(), cfg)
	prog.done()
	describeRun(c, comp, sum)
	if in.isText() {
		sum.Text = generatedText(in.tok, sum.Predictions)
	}
	// The summary first: a hung trace export cannot lose it.
	var werr error
	saved := ""
	if p := jsonFlag.Get(c); p != "" {
		if werr = cliutil.WriteJSON(p, sum); werr == nil {
			saved = p
		}
	}
	obs.finish(sum) // spans and profile, also after errors and Ctrl-C
	if in.isText() && !quietFlag.Get(c) {
		fmt.Printf("%s\n\n", sum.Text)
	}
	if !quietFlag.Get(c) || runErr == nil {
		printSummary(os.Stdout, sum)
	}
	if werr != nil {
		return errors.Join(runErr, werr)
	}
	return cliutil.Interrupted(runErr, saved)
}

// parseCPUList parses --compile-cpus or --decode-cpus: CPUs this process
// may use, in ranges that run forwards.
func parseCPUList(c *cli.Context, flag *cli.StringFlag) ([]int, error) {
	return runtime.ParseCPUList(flag.Name, flag.Get(c))
}

// loadCompileCost reads --compile-cost (nil without one) and notes on
// stderr where the profile was measured otherwise than comp compiles the
// ladder's graphs (huge pages, attention form): ovrun run and serve share it.
func loadCompileCost(c *cli.Context, comp *ovexec.Compiler, ladder runtime.Ladder) (*compilecost.Profile, error) {
	p := compileCostFlag.Get(c)
	if p == "" {
		return nil, nil
	}
	prof, err := compilecost.Load(p)
	if err != nil {
		return nil, err
	}
	var forms []string
	for _, capacity := range ladder {
		forms = append(forms, string(comp.Spec(model.GraphSpec{Capacity: capacity, Chunk: 1}).Attention))
	}
	for _, note := range []string{hugePagesMismatch(p, prof, hugepages.On()), attentionMismatch(p, prof, forms)} {
		if note != "" {
			fmt.Fprintln(c.App.ErrWriter, "ovrun: note:", note)
		}
	}
	return prof, nil
}

// attentionMismatch is a note where the compile-cost profile at path
// measured graphs of another attention form than this run's decode graphs
// (forms, one per rung): a static graph compiles differently from a paged
// one, so the budgets would predict the wrong graphs. "" when they match or
// the profile does not say.
func attentionMismatch(path string, p *compilecost.Profile, forms []string) string {
	if p.Attention == "" {
		return ""
	}
	measured := strings.Split(p.Attention, ", ")
	for _, f := range forms {
		if !slices.Contains(measured, f) {
			return fmt.Sprintf("%s measured %s graphs and this run compiles %s ones: its budgets predict other graphs (measure with ovtrace compile --attention %s)",
				path, p.Attention, f, f)
		}
	}
	return ""
}

// hugePagesMismatch is a note where the compile-cost profile at path was
// measured with huge pages set otherwise than this process has them (its
// budgets then mispredict by tens of percent), else "".
func hugePagesMismatch(path string, p *compilecost.Profile, on bool) string {
	if p.HugePages == nil || *p.HugePages == on {
		return ""
	}
	state := map[bool]string{true: "on", false: "off"}
	return fmt.Sprintf("%s was measured with huge pages %s and this run has them %s (GLIBC_TUNABLES %s): its compile budgets may be far off (qwen2.5-0.5b compiles 40%% slower on 4 KiB pages)",
		path, state[*p.HugePages], state[on], hugepages.Tunable)
}
