package plan

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/traffic"
	"github.com/ovtoolkit/ovrun/ladder"
	"github.com/ovtoolkit/ovrun/model"
)

// plan --serve: a server's load on a kept ladder (compilecost.SimulateServe).
var (
	serveFlag        = &cli.BoolFlag{Name: "serve", Usage: "plan ovrun serve --batching off under a load of many requests instead of one request (see the description)"}
	answerTokensFlag = &cli.StringFlag{Name: "answer-tokens", Usage: "with --serve, answer lengths `N,N,...` (max_tokens, generated in full), one drawn at random per request (required)"}
	rateFlag         = &cli.Float64Flag{Name: "rate", Usage: "with --serve, requests arrive at `REQ/S` on average, a Poisson process; 0 sends them all at once"}
	requestsFlag     = &cli.IntFlag{Name: "requests", Value: 16, Usage: "with --serve, `N` requests in all"}
	maxSeqsFlag      = &cli.IntFlag{Name: "max-seqs", Value: 8, Usage: "with --serve, `N` sequences decoding at once (ovrun serve --max-seqs)"}
	queueFlag        = &cli.IntFlag{Name: "queue", Value: 16, Usage: "with --serve, `N` requests waiting beyond --max-seqs; more are refused (ovrun serve --queue)"}
	parallelFlag     = &cli.Float64Flag{Name: "parallel", Value: 1, Usage: "with --serve, `X`: with c > 1 sequences busy at once each runs at X/c of its pace alone (processor sharing; 1: one sequence keeps the cores busy; below 1: sequences side by side slow each other more than sharing, as two OpenVINO streams on 2 cores do; measure it with ovrun loadtest --clients 1 and 2)"}
	prefillRateFlag  = &cli.Float64Flag{Name: "prefill-rate", Usage: "with --serve, the prompt's `TOK/S`; 0: --decode-rate"}
	rungIdleFlag     = &cli.DurationFlag{Name: "rung-idle", Usage: "with --serve, free a rung no request used for `DURATION` (ovrun serve --rung-idle); 0 keeps every rung"}
	seedFlag         = &cli.Uint64Flag{Name: "seed", Value: 1, Usage: "with --serve, `SEED` of the arrivals and the lengths drawn (ovrun loadtest --seed)"}
)

// serveOnly are the flags that mean something with --serve alone; oneOnly
// those that mean something without it alone.
var (
	serveOnly = []cli.Flag{answerTokensFlag, rateFlag, requestsFlag, maxSeqsFlag, queueFlag, parallelFlag, prefillRateFlag, rungIdleFlag, seedFlag}
	oneOnly   = []cli.Flag{decodeTokensFlag, prefillSFlag, backgroundSlowdownFlag, migrateGibPerSFlag, lookaheadFlag, policyFlag, prefillFlag, prefillChunkFlag}
)

// ServeReport is plan --serve's --json output: the load planned and the
// prediction.
type ServeReport struct {
	CompileCost string  `json:"compile_cost"`
	DecodeRate  float64 `json:"decode_rate"`
	// PrefillRate is the prompt's tokens per second.
	PrefillRate float64 `json:"prefill_rate"`
	Ladder      []int   `json:"ladder"`
	MaxSeqs     int     `json:"max_seqs"`
	Queue       int     `json:"queue"`
	Parallel    float64 `json:"parallel"`
	RungIdleS   float64 `json:"rung_idle_s,omitempty"`
	// Rate, Requests, PromptTokens, AnswerTokens and Seed are the load.
	Rate         float64                 `json:"rate"`
	Requests     int                     `json:"requests"`
	PromptTokens []int                   `json:"prompt_tokens"`
	AnswerTokens []int                   `json:"answer_tokens"`
	Seed         uint64                  `json:"seed"`
	Result       compilecost.ServeResult `json:"result"`
}

// checkMode refuses the flags of the other mode and checks the required
// ones (done here, not by urfave/cli, because they differ by mode).
func checkMode(c *cli.Context) error {
	serve := serveFlag.Get(c)
	if !c.IsSet(promptTokensFlag.Name) {
		return fmt.Errorf("--prompt-tokens is required")
	}
	for _, f := range oneOnly {
		if name := f.Names()[0]; serve && c.IsSet(name) {
			hint := ""
			if f == decodeTokensFlag {
				hint = "; give the answer lengths with --answer-tokens"
			}
			return fmt.Errorf("--%s plans one request; it does not apply to --serve%s", name, hint)
		}
	}
	for _, f := range serveOnly {
		if name := f.Names()[0]; !serve && c.IsSet(name) {
			return fmt.Errorf("--%s needs --serve", name)
		}
	}
	switch {
	case serve && !c.IsSet(answerTokensFlag.Name):
		return fmt.Errorf("--answer-tokens is required with --serve (the answer lengths, e.g. 64,256)")
	case !serve && !c.IsSet(decodeTokensFlag.Name):
		return fmt.Errorf("--decode-tokens is required (with --serve: --answer-tokens)")
	}
	return nil
}

// checkServeFlags validates --serve's numbers before any work.
func checkServeFlags(c *cli.Context) error {
	checks := []error{
		cliutil.CheckFloat(rateFlag.Name, rateFlag.Get(c), 0, traffic.MaxRate),
		cliutil.CheckInt(requestsFlag.Name, requestsFlag.Get(c), 1, traffic.MaxRequests),
		cliutil.CheckInt(maxSeqsFlag.Name, maxSeqsFlag.Get(c), 1, compilecost.MaxServeSeqs),
		cliutil.CheckInt(queueFlag.Name, queueFlag.Get(c), 0, compilecost.MaxServeQueue),
		cliutil.CheckFloat(parallelFlag.Name, parallelFlag.Get(c), 0.1, compilecost.MaxServeSeqs),
		cliutil.CheckFloat(prefillRateFlag.Name, prefillRateFlag.Get(c), 0, 1e9),
	}
	if d := rungIdleFlag.Get(c); d < 0 || d > 1e6*time.Second {
		checks = append(checks, fmt.Errorf("--rung-idle %v: want 0 (keep every rung) up to 1e6 s", d))
	}
	if err := firstError(c, checks); err != nil {
		return err
	}
	_, err := parseMix(answerTokensFlag, answerTokensFlag.Get(c))
	return err
}

// planServe simulates the load on the profile's costs and prints it.
// cached are the --cached capacities (nil: none), checked by the caller.
func planServe(c *cli.Context, prof *compilecost.Profile, caps []int, prompts []int, cached func(int) bool) error {
	answers, err := parseMix(answerTokensFlag, answerTokensFlag.Get(c))
	if err != nil {
		return err
	}
	rate := decodeRateFlag.Get(c)
	prefill := prefillRateFlag.Get(c)
	if prefill == 0 {
		prefill = rate
	}
	cfg := compilecost.ServeConfig{
		Ladder:  caps,
		MaxSeqs: maxSeqsFlag.Get(c),
		Queue:   queueFlag.Get(c),
		Traffic: traffic.Mix{Rate: rateFlag.Get(c), Requests: requestsFlag.Get(c), Prompt: prompts, Answer: answers, Seed: seedFlag.Get(c)},
		CompileS: func(capacity int) float64 {
			s, _, _ := prof.PredictBackground(capacity)
			return s
		},
		DecodeStepS:       func(int) float64 { return 1 / rate },
		PrefillTokensPerS: prefill,
		Parallel:          parallelFlag.Get(c),
		KVBytesPerToken:   kvBytesPerTokenFlag.Get(c),
		RungIdleS:         rungIdleFlag.Get(c).Seconds(),
	}
	// A compile measured beside decoding takes that long only while
	// something decodes; alone, its successor figure (as the runtime's
	// budgets blend them).
	if prof.HasKind(compilecost.UnderDecodeKind) {
		cfg.CompileSoloS = func(capacity int) float64 {
			s, _ := prof.PredictSuccessor(capacity)
			return s
		}
	}
	if cached != nil {
		cfg.CompileS = prof.CachedFunc(cfg.CompileS, cached)
		if cfg.CompileSoloS != nil {
			cfg.CompileSoloS = prof.CachedFunc(cfg.CompileSoloS, cached)
		}
	}
	// Paged graphs: every later rung reuses the first one's graph.
	if prof.Attention == string(model.AttentionPaged) && !graphPerRungFlag.Get(c) {
		cfg.CompileS, cfg.CompileSoloS = reused(caps[0], cfg.CompileS), reused(caps[0], cfg.CompileSoloS)
	}
	res, err := compilecost.SimulateServe(cfg)
	if err != nil {
		return fmt.Errorf("plan --serve: %w", err)
	}
	rep := ServeReport{CompileCost: compileCostFlag.Get(c), DecodeRate: rate, PrefillRate: prefill, Ladder: caps,
		MaxSeqs: cfg.MaxSeqs, Queue: cfg.Queue, Parallel: cfg.Parallel, RungIdleS: cfg.RungIdleS,
		Rate: cfg.Traffic.Rate, Requests: cfg.Traffic.Requests, PromptTokens: prompts, AnswerTokens: answers, Seed: cfg.Traffic.Seed, Result: res}
	if path := jsonFlag.Get(c); path != "" {
		if err := cliutil.WriteJSON(path, rep); err != nil {
			return err
		}
	}
	return writeServe(c.App.Writer, prof, rep)
}

// reused is f except at capacities above first, which cost nothing.
func reused(first int, f func(int) float64) func(int) float64 {
	if f == nil {
		return nil
	}
	return func(capacity int) float64 {
		if capacity > first {
			return 0
		}
		return f(capacity)
	}
}

func writeServe(w io.Writer, prof *compilecost.Profile, rep ServeReport) error {
	r := rep.Result
	arrive := "all at once"
	if rep.Rate > 0 {
		arrive = fmt.Sprintf("at %.3g/s", rep.Rate)
	}
	fmt.Fprintf(w, "%s on %s (OpenVINO %s), ovrun serve --batching off, ladder %v, --max-seqs %d, decode %.3g tok/s, prompts %.3g tok/s\n",
		prof.Model, prof.Device, prof.OpenVINOVersion, rep.Ladder, rep.MaxSeqs, rep.DecodeRate, rep.PrefillRate)
	fmt.Fprintf(w, "%d requests %s (seed %d), prompt tokens %s, answer tokens %s\n\n",
		rep.Requests, arrive, rep.Seed, ints(rep.PromptTokens), ints(rep.AnswerTokens))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	refused := ""
	if r.Refused > 0 {
		refused = fmt.Sprintf(" (%d refused: --max-seqs + --queue were waiting)", r.Refused)
	}
	fmt.Fprintf(tw, "answered\t%d of %d%s\n", r.Answered, r.Requests, refused)
	fmt.Fprintf(tw, "makespan\t%.2f s, %.1f tok/s, %.2f req/s\n", r.MakespanS, r.TokensPerS, r.RequestsPerS)
	fmt.Fprintf(tw, "TTFT p50 / p99\t%.3f s / %.3f s\n", r.TTFTP50S, r.TTFTP99S)
	fmt.Fprintf(tw, "boundary waits\t%d, %.2f s in all (p50 %.3f s, p99 %.3f s)\n", r.BoundaryWaits, r.BoundaryWaitS, r.BoundaryWaitP50S, r.BoundaryWaitP99S)
	fmt.Fprintf(tw, "admission waits\t%d, %.2f s in all\n", r.AdmissionWaits, r.AdmissionWaitS)
	var reasons []string
	for _, k := range ladder.LaunchReasons {
		if n := r.Launches[k]; n > 0 {
			reasons = append(reasons, fmt.Sprintf("%s %d", k, n))
		}
	}
	launched := "none"
	if len(reasons) > 0 {
		launched = strings.Join(reasons, ", ")
	}
	fmt.Fprintf(tw, "compiles\t%d, %.2f s (launched by %s)\n", r.Compiles, r.CompileS, launched)
	if rep.RungIdleS > 0 {
		fmt.Fprintf(tw, "rungs freed\t%d (--rung-idle)\n", r.RungReleases)
	}
	fmt.Fprintf(tw, "peak sequences\t%d\n", r.PeakSeqs)
	if r.PeakKVReservedBytes > 0 {
		fmt.Fprintf(tw, "peak KV reserved\t%.1f MiB\n", float64(r.PeakKVReservedBytes)/(1<<20))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rung\tlaunches\tcompile s\tready at s\tboundary waits\twait s\tadmission waits\twait s\t")
	for _, g := range r.Rungs {
		ready := "-"
		if g.ReadyS >= 0 {
			ready = fmt.Sprintf("%.2f", g.ReadyS)
		}
		fmt.Fprintf(tw, "%d\t%d\t%.2f\t%s\t%d\t%.2f\t%d\t%.2f\t\n", g.Capacity, g.Launches, g.CompileS, ready,
			g.BoundaryWaits, g.BoundaryWaitS, g.AdmissionWaits, g.AdmissionWaitS)
	}
	return tw.Flush()
}

func ints(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
