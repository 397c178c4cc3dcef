// Package plan is the `plan` subcommand shared by ovrun and ovtrace: it
// predicts every policy's timeline from a compile-cost profile.
package plan

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/internal/traffic"
	"github.com/ovtoolkit/ovrun/ladder"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// Command is the plan subcommand.
var (
	compileCostFlag        = &cli.StringFlag{Name: "compile-cost", Usage: "compile-cost profile `cost.json` (from ovtrace compile)", Required: true}
	decodeRateFlag         = &cli.Float64Flag{Name: "decode-rate", Usage: "decode `TOK/S` (the same on every rung)", Required: true}
	ladderFlag             = &cli.StringFlag{Name: "ladder", Usage: "ascending `CAPACITIES` (default: the profile's)"}
	promptTokensFlag       = &cli.StringFlag{Name: "prompt-tokens", Usage: "prompt length `N` (required); with --serve a mix N,N,..., one drawn at random per request"}
	decodeTokensFlag       = &cli.IntFlag{Name: "decode-tokens", Usage: "tokens to decode `M` (required without --serve)"}
	prefillSFlag           = &cli.Float64Flag{Name: "prefill-s", Usage: "prefill time, `SECONDS`"}
	backgroundSlowdownFlag = &cli.Float64Flag{Name: "background-slowdown", Usage: "decode step time multiplier `X` (>= 1) while a background compile runs"}
	kvBytesPerTokenFlag    = &cli.Int64Flag{Name: "kv-bytes-per-token", Usage: "KV `BYTES` of one token over all layers (enables the KV columns)"}
	migrateGibPerSFlag     = &cli.Float64Flag{Name: "migrate-gib-per-s", Usage: "KV copy bandwidth at a boundary, `GIB/S` (default: copies are free)"}
	lookaheadFlag          = &cli.IntFlag{Name: "lookahead", Usage: "rungs ahead a background compile may run (0: the runtime's rule: one ahead, two when after 8 steps the compile would not fit the next rung's window)"}
	policyFlag             = &cli.StringFlag{Name: "policy", Value: "all", Usage: "`POLICIES`, comma-separated, or all",
		Action: func(_ *cli.Context, v string) error { _, err := parsePolicies(v); return err }}
	prefillFlag = &cli.StringFlag{Name: "prefill", Value: string(runtime.DefaultPrefill), Usage: "prefill `MODES` as ovrun run --prefill (auto, graph, decode), comma-separated, or all",
		Action: func(_ *cli.Context, v string) error { _, err := parsePrefill(v); return err }}
	graphPerRungFlag = &cli.BoolFlag{Name: "graph-per-rung", Usage: "model ovrun --graph-per-rung: every rung compiles its graph, where a profile of paged graphs otherwise has later rungs reuse the first ones (no compile)"}
	cachedFlag       = &cli.StringFlag{Name: "cached", Usage: "`CAPACITIES` whose decode graphs are in the compiled-rung cache (ovrun --cache-dir), comma-separated, or all: they cost the profile's measured import instead of a compile",
		Action: func(_ *cli.Context, v string) error { _, err := parseCached(v); return err }}
	prefillChunkFlag = &cli.IntFlag{Name: "prefill-chunk", Value: runtime.DefaultPrefillChunk, Usage: "tokens per prefill call `N`: which prefill graph of the profile to model"}
)

var Command = &cli.Command{
	Name:  "plan",
	Usage: "predict the timeline of every run policy from a compile-cost profile (no compiling)",
	Description: `Simulates one request per policy with compile times from --compile-cost (the
measured median of a capacity, else the profile's fit) and a constant decode
rate, and prints time to first token, foreground compile, critical path,
decode, boundary waits, background compile overlapped with decode and, with
--kv-bytes-per-token, the time-weighted average and peak reserved KV.

Compiles are modelled by kind when the profile measured them (ovtrace
compile): the first compile of the process at its first-compile cost, every
later one at its successor cost, and the prefill graph (--prefill-chunk) as
--prefill says: compiled before the first rung (graph), not at all, the
prompt going through the first rung's decode graph at --decode-rate
(decode), or whichever makes the first token sooner for this prompt (auto).
--prefill-s is the prompt's time through the prefill graph. A profile from an
older ovtrace (one number per rung) charges every compile that number and
leaves the prefill graph's compile out. Notes name missed one-ahead
deadlines and compiles launched two rungs ahead. Use a cost profile measured
on the target device (an NPU, say) to size a ladder before running there.

--cached names the rungs a compiled-rung cache holds (or all): they cost the
profile's import_s (ovtrace compile --import) instead of a compile; a
profile that measured no import keeps the compile cost.

A profile of paged graphs (attention paged: ovrun's default on the CPU)
charges a compile to the first rung only, and after a first rung that
prefill auto makes shared to the first decode graph: ovrun compiles a paged
graph once for the model's whole context and every later rung reuses it.
--graph-per-rung models ovrun --graph-per-rung, which compiles every rung.

With --serve it plans a server instead of one request: ovrun serve
--batching off --compile-cost, where every request is one sequence on a
shared ladder that keeps its rungs, under a load of --requests requests
arriving at --rate per second (a Poisson process; 0: all at once), each
drawing its prompt length from --prompt-tokens and its answer from
--answer-tokens (mixes such as 16,200,400, drawn with --seed: ovrun
loadtest with the same flags sends the same requests at the same times).
It prints time to first token (p50, p99), boundary waits (a sequence at a
rung whose graph is not ready), admission waits (a request whose prompt
starts on a rung not yet compiled waits for it in the queue), background
compiles by why they were launched, and the peak reserved KV
(--kv-bytes-per-token); --json writes every figure.

Modelled: the first rung compiled before the start; the deadline rule (a
rung launches once a sequence's time left before it needs the rung, at the
sequence's step time measured over 8 steps, falls to the predicted compile
plus the compiles queued before it, plus 25%), with the rungs below it;
launches at admission and at a boundary no rule foresaw; one compile at a
time, in launch order; --max-seqs sequences at once, first come first
served, and --queue more waiting (beyond that, 429); prompts at
--prefill-rate (default --decode-rate); sequences busy at once share the
cores (each at 1/max(1, busy/--parallel) of its pace alone); a compile at
the profile's under-decode pace while anything decodes and its successor
pace otherwise; rungs freed after --rung-idle. Not modelled: the prefill
graph and its compile, decoding slowed by a compile, the runtime's online
correction of its predictions, continuous batching (--batching on),
request timeouts, tokenizing and streaming.`,
	Flags: []cli.Flag{
		compileCostFlag,
		decodeRateFlag,
		ladderFlag,
		promptTokensFlag,
		decodeTokensFlag,
		serveFlag,
		answerTokensFlag,
		rateFlag,
		requestsFlag,
		maxSeqsFlag,
		queueFlag,
		parallelFlag,
		prefillRateFlag,
		rungIdleFlag,
		seedFlag,
		prefillSFlag,
		backgroundSlowdownFlag,
		kvBytesPerTokenFlag,
		migrateGibPerSFlag,
		lookaheadFlag,
		policyFlag,
		prefillFlag,
		prefillChunkFlag,
		cachedFlag,
		graphPerRungFlag,
		jsonFlag,
	},
	Action: planAction,
}

// Report is plan's --json output.
type Report struct {
	CompileCost string                  `json:"compile_cost"`
	DecodeRate  float64                 `json:"decode_rate"`
	Results     []compilecost.SimResult `json:"results"`
}

// maxTokens is the largest capacity and token count accepted.
const maxTokens = ladder.MaxCapacity

// checkFlags validates every number before any work: finite, in range.
func checkFlags(c *cli.Context) error {
	if err := cliutil.CheckFloat("decode-rate", decodeRateFlag.Get(c), math.SmallestNonzeroFloat64, 1e9); err != nil {
		return err
	}
	if err := checkMode(c); err != nil {
		return err
	}
	if serveFlag.Get(c) {
		return checkServeFlags(c)
	}
	checks := []error{
		cliutil.CheckInt("decode-tokens", decodeTokensFlag.Get(c), 0, maxTokens),
		cliutil.CheckFloat("prefill-s", prefillSFlag.Get(c), 0, 1e9),
		cliutil.CheckFloat("migrate-gib-per-s", migrateGibPerSFlag.Get(c), 0, 1e9),
		cliutil.CheckInt("lookahead", lookaheadFlag.Get(c), 0, 64),
		cliutil.CheckInt("prefill-chunk", prefillChunkFlag.Get(c), 2, maxTokens),
	}
	if s := backgroundSlowdownFlag.Get(c); s != 0 {
		checks = append(checks, cliutil.CheckFloat("background-slowdown", s, 1, 1e6))
	}
	return firstError(c, checks)
}

// firstError adds the checks of the flags both plan commands take
// (--kv-bytes-per-token, --json) to checks and returns the first error.
func firstError(c *cli.Context, checks []error) error {
	if n := kvBytesPerTokenFlag.Get(c); n < 0 || n > 1<<40 {
		checks = append(checks, fmt.Errorf("--kv-bytes-per-token %d: want 0..%d", n, int64(1<<40)))
	}
	if path := jsonFlag.Get(c); path != "" {
		checks = append(checks, safefile.Check(path))
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	return nil
}

func planAction(c *cli.Context) error {
	if err := checkFlags(c); err != nil {
		return err
	}
	prompts, err := parseMix(promptTokensFlag, promptTokensFlag.Get(c))
	if err != nil {
		return err
	}
	prof, err := compilecost.Load(compileCostFlag.Get(c))
	if err != nil {
		return err
	}
	ladder, err := ladderOf(c, prof)
	if err != nil {
		return err
	}
	rate := decodeRateFlag.Get(c)
	if rate <= 0 {
		return fmt.Errorf("--decode-rate %v: want tokens per second > 0", rate)
	}
	cached, err := parseCached(cachedFlag.Get(c))
	if err != nil {
		return err
	}
	if cached != nil {
		if _, ok := prof.PredictImport(ladder[0]); !ok {
			return fmt.Errorf("--cached: %s measured no import; measure one with ovtrace compile --import", compileCostFlag.Get(c))
		}
	}
	if serveFlag.Get(c) {
		return planServe(c, prof, ladder, prompts, cached)
	}
	if len(prompts) != 1 {
		return fmt.Errorf("--prompt-tokens %s: one request has one prompt length; a mix needs --serve", promptTokensFlag.Get(c))
	}
	policies, err := parsePolicies(policyFlag.Get(c))
	if err != nil {
		return err
	}
	prefills, err := parsePrefill(prefillFlag.Get(c))
	if err != nil {
		return err
	}
	kvPerToken := kvBytesPerTokenFlag.Get(c)
	cfg := compilecost.SimConfig{
		Ladder:             ladder,
		PromptTokens:       prompts[0],
		DecodeTokens:       decodeTokensFlag.Get(c),
		CompileS:           prof.CompileFunc(),
		CompileSuccessorS:  prof.KindFunc(compilecost.Kind{Graph: compilecost.GraphDecode, Chunk: 1, Successor: true}),
		DecodeStepS:        func(int) float64 { return 1 / rate },
		PrefillS:           prefillSFlag.Get(c),
		Lookahead:          lookaheadFlag.Get(c),
		KVBytesPerToken:    kvPerToken,
		BackgroundSlowdown: backgroundSlowdownFlag.Get(c),
		SharedGraphs:       runtime.DynamicShapes(prof.Device),
		PrefillChunk:       prefillChunkFlag.Get(c),
		SharedPenalty:      prof.SharedPenalty(),
		ReuseGraphs:        prof.Attention == string(model.AttentionPaged) && !graphPerRungFlag.Get(c),
	}
	// The prefill graph is the first rung's: the smallest holding the
	// prompt and one token.
	if r0, ok := compilecost.RungFor(ladder, cfg.PromptTokens+1); ok {
		first := compilecost.Kind{Graph: compilecost.GraphPrefill, Chunk: prefillChunkFlag.Get(c)}
		succ := first
		succ.Successor = true
		cfg.PrefillCompileS, _ = prof.PredictKind(first, ladder[r0])
		if prof.HasKind(succ) {
			cfg.PrefillCompileSuccessorS, _ = prof.PredictKind(succ, ladder[r0])
		}
	}
	if cached != nil {
		cfg.CompileS = prof.CachedFunc(cfg.CompileS, cached)
		if cfg.CompileSuccessorS != nil {
			cfg.CompileSuccessorS = prof.CachedFunc(cfg.CompileSuccessorS, cached)
		}
	}
	if bw := migrateGibPerSFlag.Get(c); bw > 0 {
		cfg.MigrateS = func(_, _, live int) float64 { return float64(int64(live)*kvPerToken) / (bw * (1 << 30)) }
	}
	rep := Report{CompileCost: compileCostFlag.Get(c), DecodeRate: rate}
	for _, p := range policies {
		for _, pre := range prefills {
			cfg.Policy, cfg.Prefill = p, pre
			res := compilecost.Simulate(cfg)
			if res.Error != "" {
				return fmt.Errorf("plan %s: %s", p, res.Error)
			}
			rep.Results = append(rep.Results, res)
		}
	}
	if path := jsonFlag.Get(c); path != "" {
		if err := cliutil.WriteJSON(path, rep); err != nil {
			return err
		}
	}
	fmt.Fprintf(c.App.Writer, "%s on %s (OpenVINO %s), ladder %v, %d prompt + %d decode tokens at %.3g tok/s\n",
		prof.Model, prof.Device, prof.OpenVINOVersion, ladder, cfg.PromptTokens, cfg.DecodeTokens, rate)
	return writePlan(c.App.Writer, rep.Results, kvPerToken > 0)
}

func writePlan(w io.Writer, results []compilecost.SimResult, kv bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "policy\tprefill\tTTFT s\tforeground compile s\tcritical path s\tdecode s\tboundary wait s\tbackground compile s\toverlapped s\t"
	if kv {
		head += "KV avg MiB\tKV peak MiB\t"
	}
	fmt.Fprintln(tw, head+"finish\t")
	for _, r := range results {
		prefill := r.PrefillUsed
		if r.Prefill == compilecost.PrefillAuto {
			prefill = "auto: " + prefill
		}
		line := fmt.Sprintf("%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t", r.Policy, prefill, r.TTFTS, r.ForegroundCompileS, r.CriticalPathS,
			r.DecodeS, r.BoundaryWaitS, r.BackgroundCompileS, r.OverlappedS)
		if kv {
			line += fmt.Sprintf("%.1f\t%.1f\t", r.KVReservedAvgBytes/(1<<20), float64(r.KVReservedPeakBytes)/(1<<20))
		}
		fmt.Fprintln(tw, line+r.FinishReason+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		for _, n := range r.Notes {
			fmt.Fprintf(w, "%s: %s\n", r.Policy, n)
		}
	}
	return nil
}

// ladderOf is --ladder, or the profile's capacities.
func ladderOf(c *cli.Context, prof *compilecost.Profile) ([]int, error) {
	s := ladderFlag.Get(c)
	if s == "" {
		var caps []int
		for _, r := range prof.Rungs {
			caps = append(caps, r.Capacity)
		}
		return caps, nil
	}
	caps, err := cliutil.ParseInts("ladder", s)
	if err != nil {
		return nil, err
	}
	for _, r := range caps {
		if err := cliutil.CheckInt("ladder", r, 1, maxTokens); err != nil {
			return nil, err
		}
	}
	return caps, nil
}

// parseMix reads a flag of token counts: one, or a comma-separated mix.
func parseMix(f *cli.StringFlag, s string) ([]int, error) {
	xs, err := cliutil.ParseInts(f.Name, s)
	if err != nil {
		return nil, err
	}
	if len(xs) > traffic.MaxMix {
		return nil, fmt.Errorf("--%s: %d lengths, at most %d", f.Name, len(xs), traffic.MaxMix)
	}
	for _, x := range xs {
		if err := cliutil.CheckInt(f.Name, x, 1, maxTokens); err != nil {
			return nil, err
		}
	}
	return xs, nil
}

var jsonFlag = &cli.StringFlag{Name: "json", Usage: "write the machine-readable result to `FILE`"}

// parsePrefill reads --prefill: "all" or a comma-separated list of modes.
func parsePrefill(s string) ([]string, error) {
	if s == "all" {
		return runtime.PrefillModes(), nil
	}
	modes := strings.Split(s, ",")
	for _, m := range modes {
		if _, err := runtime.ParsePrefillMode(m); err != nil {
			return nil, fmt.Errorf("--prefill: %w", err)
		}
	}
	return modes, nil
}

// parsePolicies reads --policy: "all" or a comma-separated list of policies.
func parsePolicies(s string) ([]string, error) {
	if s == "all" {
		return compilecost.Policies(), nil
	}
	policies := strings.Split(s, ",")
	for _, name := range policies {
		if !slices.Contains(compilecost.Policies(), name) {
			return nil, fmt.Errorf("--policy %q: want all or some of %s", name, strings.Join(compilecost.Policies(), ","))
		}
	}
	return policies, nil
}

// parseCached reads --cached: nil for none, every capacity for "all".
func parseCached(s string) (func(capacity int) bool, error) {
	switch s {
	case "":
		return nil, nil
	case "all":
		return func(int) bool { return true }, nil
	}
	caps, err := cliutil.ParseInts("cached", s)
	if err != nil {
		return nil, fmt.Errorf("%w, or all", err)
	}
	set := map[int]bool{}
	for _, c := range caps {
		if err := cliutil.CheckInt("cached", c, 1, maxTokens); err != nil {
			return nil, err
		}
		set[c] = true
	}
	return func(capacity int) bool { return set[capacity] }, nil
}
