package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/serve"
)

var (
	urlFlag              = &cli.StringFlag{Name: "url", Value: "http://127.0.0.1:8080", Usage: "the `URL` of an ovrun serve on this machine (loopback only)"}
	clientsFlag          = &cli.IntFlag{Name: "clients", Value: 4, Usage: "`N` concurrent clients"}
	requestsFlag         = &cli.IntFlag{Name: "requests", Value: 16, Usage: "`N` requests in total"}
	maxTokMixFlag        = &cli.StringFlag{Name: "max-tokens", Value: "32,128", Usage: "max_tokens `VALUES` drawn at random per request"}
	loadKeyFlag          = &cli.StringFlag{Name: "api-key", EnvVars: []string{"OVRUN_API_KEY"}, Usage: "the `KEY` of a server started with --api-key"}
	loadTimeFlag         = &cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "stop the whole test after `DURATION`"}
	loadRateFlag         = &cli.Float64Flag{Name: "rate", Usage: "open loop: requests arrive at `REQ/S` on average (a Poisson process, drawn from --seed), whatever the answers; 0 keeps the closed loop of --clients"}
	loadPromptTokensFlag = &cli.StringFlag{Name: "prompt-tokens", Usage: "prompts of exactly `N,N,...` tokens (random token ids, drawn at random per request) sent to /v1/completions, instead of chat messages"}
	loadIgnoreEOSFlag    = &cli.BoolFlag{Name: "ignore-eos", Usage: "ask for every answer in full (ignore_eos): exactly its max_tokens"}
	loadCommand          = &cli.Command{
		Name:  "loadtest",
		Usage: "replay a mix of requests against ovrun serve on this machine and report throughput, TTFT, TPOT, KV, waits and compiles",
		Description: `Sends --requests streamed requests (greedy) to --url, which must be on this
machine, with max_tokens drawn from --max-tokens, and reports requests/s,
tokens/s, time to first token and time per output token (p50, p99), errors
(429s apart), and the peak reserved and live KV the server's /metrics
showed, with the change over the test of its boundary waits, admission
waits (a prompt waiting for its first rung), compiles and their seconds,
and compile launches by reason:

   ovrun serve --model M --addr 127.0.0.1:8080 --max-seqs 4 &
   ovrun loadtest --url http://127.0.0.1:8080 --clients 4 --requests 16 --json load.json

By default --clients clients each send their next request once the last is
answered (a closed loop), a chat message drawn from a fixed set. --rate
sends them at that rate instead (an open loop); --prompt-tokens sends
prompts of exactly those lengths (token ids 1000..4999, drawn from --seed)
to /v1/completions, and --ignore-eos makes each answer exactly its
max_tokens. With the same --rate, --requests, --prompt-tokens,
--max-tokens and --seed as ovrun plan --serve (its --answer-tokens), the
load is the one planned, request for request, and the JSON fields (schema
ovrun.loadtest/1, every field in docs/outputs.md) compare one to one
(docs/planning-a-server.md):

   ovrun loadtest --rate 0.5 --requests 32 --prompt-tokens 16,64,200 --max-tokens 32,128,256 --ignore-eos --json load.json`,
		Flags: []cli.Flag{urlFlag, clientsFlag, requestsFlag, loadRateFlag, loadPromptTokensFlag, maxTokMixFlag, loadIgnoreEOSFlag,
			loadTimeFlag, seedFlag, loadKeyFlag, jsonFlag},
		Action: loadAction,
	}
)

// loadPrompts is the mix of user messages: short questions and longer asks.
var loadPrompts = []string{
	"What is the capital of France?",
	"Name three primary colors.",
	"Write a short poem about the sea.",
	"Explain in a few sentences how a compiler turns source code into machine code.",
	"List five fruits and say one thing about each.",
	"Summarize the plot of a detective story in one paragraph.",
}

func loadAction(c *cli.Context) error {
	toks, err := cliutil.ParseInts(maxTokMixFlag.Name, maxTokMixFlag.Get(c))
	if err != nil {
		return err
	}
	for _, n := range toks {
		if err := cliutil.CheckInt(maxTokMixFlag.Name, n, 1, 1<<16); err != nil {
			return err
		}
	}
	var prompts []int
	if s := loadPromptTokensFlag.Get(c); s != "" {
		if prompts, err = cliutil.ParseInts(loadPromptTokensFlag.Name, s); err != nil {
			return err
		}
		for _, n := range prompts {
			if err := cliutil.CheckInt(loadPromptTokensFlag.Name, n, 1, 1<<20); err != nil {
				return err
			}
		}
	}
	if err := cliutil.CheckFloat(loadRateFlag.Name, loadRateFlag.Get(c), 0, 1e6); err != nil {
		return err
	}
	if loadRateFlag.Get(c) > 0 && c.IsSet(clientsFlag.Name) {
		return fmt.Errorf("--clients is the closed loop's; with --rate every request is sent on its own at its time")
	}
	if err := checkOutputs(c, jsonFlag); err != nil {
		return err
	}
	res, err := serve.RunLoad(c.Context, serve.LoadConfig{URL: strings.TrimRight(urlFlag.Get(c), "/"), Clients: clientsFlag.Get(c),
		Requests: requestsFlag.Get(c), Rate: loadRateFlag.Get(c), Timeout: loadTimeFlag.Get(c), Prompts: loadPrompts, PromptTokens: prompts,
		MaxTok: toks, IgnoreEOS: loadIgnoreEOSFlag.Get(c), Seed: seedFlag.Get(c), APIKey: loadKeyFlag.Get(c)})
	if res != nil {
		w := c.App.Writer
		who := fmt.Sprintf("%d clients", res.Clients)
		if res.Rate > 0 {
			who = fmt.Sprintf("%.3g req/s", res.Rate)
		}
		fmt.Fprintf(w, "%s, %d requests (%d errors, %d refused) in %.1f s: %.2f req/s, %.1f tok/s\n",
			who, res.Requests, res.Errors, res.Refused, res.WallS, res.RequestsPerS, res.TokensPerS)
		fmt.Fprintf(w, "TTFT p50 %.3f s p99 %.3f s   TPOT p50 %.4f s p99 %.4f s   peak KV reserved %s live %s\n",
			res.TTFTP50S, res.TTFTP99S, res.TPOTP50S, res.TPOTP99S, mib(res.PeakKVReserved), mib(res.PeakKVLive))
		if res.Metrics {
			fmt.Fprintf(w, "server: boundary waits %d (%.2f s), admission waits %d (%.2f s), compiles %d (%.2f s), launches %s\n",
				res.BoundaryWaits, res.BoundaryWaitS, res.AdmissionWaits, res.AdmissionWaitS, res.Compiles, res.CompileS, launches(res.Launches))
		}
		if res.ShortAnswers > 0 {
			fmt.Fprintf(w, "%d answers were shorter than their max_tokens (an end-of-generation token; --ignore-eos asks for them in full)\n", res.ShortAnswers)
		}
		if res.ErrorSample != "" {
			fmt.Fprintf(w, "first error: %s\n", res.ErrorSample)
		}
		if p := jsonFlag.Get(c); p != "" {
			if werr := cliutil.WriteJSON(p, res); werr != nil && err == nil {
				err = werr
			}
		}
	}
	return err
}

// launches writes counts by reason, the non-zero ones, in a stable order.
func launches(m map[string]int) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] > 0 {
			out = append(out, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
