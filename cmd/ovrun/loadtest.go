package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/serve"
)

var (
	urlFlag       = &cli.StringFlag{Name: "url", Value: "http://127.0.0.1:8080", Usage: "the `URL` of an ovrun serve on this machine (loopback only)"}
	clientsFlag   = &cli.IntFlag{Name: "clients", Value: 4, Usage: "`N` concurrent clients"}
	requestsFlag  = &cli.IntFlag{Name: "requests", Value: 16, Usage: "`N` requests in total"}
	maxTokMixFlag = &cli.StringFlag{Name: "max-tokens", Value: "32,128", Usage: "max_tokens `VALUES` drawn at random per request"}
	loadKeyFlag   = &cli.StringFlag{Name: "api-key", EnvVars: []string{"OVRUN_API_KEY"}, Usage: "the `KEY` of a server started with --api-key"}
	loadTimeFlag  = &cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "stop the whole test after `DURATION`"}
	loadCommand   = &cli.Command{
		Name:  "loadtest",
		Usage: "replay a mix of chat requests against ovrun serve on this machine and report throughput, TTFT, TPOT and KV",
		Description: `Sends --requests streamed chat completions (greedy) from --clients concurrent
clients to --url, which must be on this machine, with prompts and max_tokens
drawn from a fixed mix, and reports requests/s, tokens/s, time to first token
and time per output token (p50, p99), errors, and the peak reserved and live
KV the server's /metrics showed:

   ovrun serve --model M --addr 127.0.0.1:8080 --max-seqs 4 &
   ovrun loadtest --url http://127.0.0.1:8080 --clients 4 --requests 16 --json load.json`,
		Flags:  []cli.Flag{urlFlag, clientsFlag, requestsFlag, maxTokMixFlag, loadTimeFlag, seedFlag, loadKeyFlag, jsonFlag},
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
	if err := checkOutputs(c, jsonFlag); err != nil {
		return err
	}
	res, err := serve.RunLoad(c.Context, serve.LoadConfig{URL: strings.TrimRight(urlFlag.Get(c), "/"), Clients: clientsFlag.Get(c),
		Requests: requestsFlag.Get(c), Timeout: loadTimeFlag.Get(c), Prompts: loadPrompts, MaxTok: toks, Seed: seedFlag.Get(c), APIKey: loadKeyFlag.Get(c)})
	if res != nil {
		w := c.App.Writer
		fmt.Fprintf(w, "%d clients, %d requests (%d errors) in %.1f s: %.2f req/s, %.1f tok/s\n",
			res.Clients, res.Requests, res.Errors, res.WallS, res.RequestsPerS, res.TokensPerS)
		fmt.Fprintf(w, "TTFT p50 %.3f s p99 %.3f s   TPOT p50 %.4f s p99 %.4f s   peak KV reserved %s live %s\n",
			res.TTFTP50S, res.TTFTP99S, res.TPOTP50S, res.TPOTP99S, mib(res.PeakKVReserved), mib(res.PeakKVLive))
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
