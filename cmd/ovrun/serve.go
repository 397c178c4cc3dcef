package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/chat"
	"github.com/ovtoolkit/ovrun/engine"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
	"github.com/ovtoolkit/ovrun/serve"
	"github.com/ovtoolkit/ovrun/tokenizer"
)

// rungIdleFlag frees the shared ladder's idle rungs (runtime/idle.go).
var rungIdleFlag = &cli.DurationFlag{Name: "rung-idle", Usage: "free a rung's graph (never the first rung's) that no request has used for `DURATION` (its memory returned; ovrun_rungs in /metrics); it is compiled again, or imported with --cache-dir, ahead of the next request that grows toward it (by deadline with --compile-cost). With --batching off or --attention static (each variant of a rung and batch size apart); 0 keeps every graph"}

var (
	addrFlag             = &cli.StringFlag{Name: "addr", Value: "127.0.0.1:8080", Usage: "listen on `HOST:PORT` (port 0: any free port, printed at start)"}
	serveLadderFlag      = &cli.StringFlag{Name: "ladder", Value: "256,512,1024,2048", Usage: "ascending context `CAPACITIES` every sequence grows through"}
	servePolicyFlag      = &cli.StringFlag{Name: "policy", Value: "grow-one-ahead", Usage: "ladder `POLICY` of each sequence: " + strings.Join(runtime.PolicyNames(), ", "), Action: policyFlag.Action}
	maxSeqsFlag          = &cli.IntFlag{Name: "max-seqs", Value: 8, Usage: "`N` sequences decoding at once (with batching: in one step)"}
	queueFlag            = &cli.IntFlag{Name: "queue", Value: 16, Usage: "`N` requests waiting beyond --max-seqs; more are answered 429"}
	timeoutFlag          = &cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "per-request `DEADLINE`, queue included"}
	defaultMaxFlag       = &cli.IntFlag{Name: "max-tokens", Value: 256, Usage: "`N` tokens per answer when a request names no max_tokens"}
	modelNameFlag        = &cli.StringFlag{Name: "model-name", Usage: "the model `ID` /v1/models lists (default: the file or folder name)"}
	graceFlag            = &cli.DurationFlag{Name: "grace", Value: 30 * time.Second, Usage: "on SIGTERM/Ctrl-C, how long in-flight requests may `LAST` before they are cancelled"}
	maxBodyFlag          = &cli.StringFlag{Name: "max-body", Value: "1MiB", Usage: "largest request body, a `SIZE` such as 512KiB; more is answered 413"}
	readTimeoutFlag      = &cli.DurationFlag{Name: "read-timeout", Value: serve.DefaultLimits.ReadTimeout, Usage: "`TIME` a client has to send its request, headers and body"}
	writeTimeFlag        = &cli.DurationFlag{Name: "write-timeout", Value: serve.DefaultLimits.WriteTimeout, Usage: "`TIME` a client has to take each piece of an answer before it is dropped"}
	idleTimeoutFlag      = &cli.DurationFlag{Name: "idle-timeout", Value: serve.DefaultLimits.IdleTimeout, Usage: "keep-alive connections with no request for `TIME` are closed"}
	maxConnsFlag         = &cli.IntFlag{Name: "max-conns", Value: serve.DefaultLimits.MaxConns, Usage: "`N` open connections at most; at the cap the oldest one not serving a request is closed"}
	allowedHosts         = &cli.StringSliceFlag{Name: "allowed-hosts", Usage: "host `NAME` clients may reach the server by, besides IP addresses, localhost and this machine's name (.example.com: any name under it; *: any); repeat or separate by commas"}
	allowOrigin          = &cli.StringSliceFlag{Name: "allow-origin", Usage: "browser `ORIGIN` (scheme://host:port) allowed to call cross-origin, with CORS (*: any); repeat or separate by commas"}
	apiKeyFlag           = &cli.StringFlag{Name: "api-key", EnvVars: []string{"OVRUN_API_KEY"}, Usage: "require `KEY` as Authorization: Bearer KEY on every endpoint but /healthz (what OpenAI clients send as api_key)"}
	controlInContentFlag = &cli.BoolFlag{Name: "control-tokens-in-content", Usage: "let text in chat messages that names a control token (<|im_end|>) become that token, as llama.cpp's server does; by default it stays text"}
	serveCommand         = &cli.Command{
		Name:  "serve",
		Usage: "serve the model over an OpenAI-compatible HTTP API, on the ladder",
		Description: `Endpoints: POST /v1/completions and /v1/chat/completions (stream: true for
server-sent events; max_tokens, temperature, top_p, top_k, seed, stop), GET /v1/models,
GET /healthz (200 once the first rung is compiled) and GET /metrics
(Prometheus: requests, queue time, time to first token, time per output
token, tokens, active and queued sequences, tokenizer regex overruns). Clients such as the openai
Python package and curl work unchanged:

   ovrun serve --model SmolLM2-135M-Instruct.Q4_1.gguf --addr 127.0.0.1:8080
   curl -s localhost:8080/v1/chat/completions -d '{"messages":[{"role":"user","content":"Hi"}]}'

Sampling: temperature and top_p default to 1 as in the OpenAI API (temperature
0 is greedy); top_k, llama.cpp's server's field, defaults to 40 and keeps
every token at 0 or less.

With batching (--batching auto, on the CPU; on), every step is one inference
over all the sequences decoding: the next token of each, plus chunks of the
prompts of newly admitted ones, --max-batch-tokens in all. Every sequence
keeps its KV in blocks of one pool shared by the rungs' graphs, so a sequence
crossing into a larger rung copies nothing, and prompts that start with the
same tokens as an earlier request (a system prompt, a chat's history) reuse
its blocks (--prefix-cache). /metrics adds what each step carried, the KV
blocks and the prefix cache's hits; traces add a span per step, linked to the
requests it carried:

   ovrun serve --model SmolLM2-135M-Instruct.Q4_1.gguf --max-seqs 16 --max-batch-tokens 512 --prefix-cache 256MiB

On static graphs (NPU, or --attention static) --batching on steps the
sequences of each rung together through a graph compiled for 1, 2, 4 ..
--max-seqs sequences, one token each (prompts a token a step); the variant
the traffic needs next, a larger batch or the next rung, compiles ahead:

   ovrun serve --model SmolLM2-135M-Instruct.Q4_1.gguf --attention static --batching on --max-seqs 8

Without batching (--batching off, or auto where graphs are not paged: NPU, GPU,
--attention static), each request is a sequence decoding on the --ladder under --policy, its KV
cache sized to its own context; all sequences share one ladder of compiled
rungs. The first rung is compiled before the server reports ready, each
larger rung once, when the schedule says (one ahead of the sequences
reaching it under grow-one-ahead), and every rung is kept for the requests
to come. At most --max-seqs sequences
decode at once, --queue more wait, the rest get 429; a prompt longer than
the largest rung is a 400; a client that disconnects cancels its sequence.
--otlp-endpoint / --trace-out give one trace per request (compile, prefill,
decode per rung, boundary waits, KV), flushed at shutdown.

With --compile-cost (a profile from ovtrace compile; --batching off, or
static graphs) each rung (each static variant) is compiled when the earliest
sequence that can reach it is about to: when its time left, at the live
decode rate, falls to the predicted compile plus the queue before it, plus
25%. A prompt whose rung is not compiled waits for it in the queue, not in
a slot; one whose --timeout would pass first gets 503 with the expected
time as Retry-After. /metrics shows each rung's profile, prediction,
window and actual compile, launches by reason and missed deadlines; plan a
server with ovrun plan --serve (docs/planning-a-server.md):

   ovrun serve --model SmolLM2-135M-Instruct.Q4_1.gguf --attention static --batching off --compile-cost cost.json --rung-idle 10m

Safety: a body over --max-body is a 413, before it is read; at most
--max-seqs + --queue requests are read, encoded, queued or decoding at
once, so memory stays bounded whatever clients send. Slow clients are bounded by --read-timeout,
--write-timeout, --idle-timeout and --max-conns. A request whose Host is not
this machine (DNS rebinding) or that a browser sends cross-origin is a 403,
unless --allowed-hosts / --allow-origin name it; with --api-key (or
OVRUN_API_KEY) every endpoint but /healthz wants the key:

   OVRUN_API_KEY=s3cret ovrun serve --model SmolLM2-135M-Instruct.Q4_1.gguf --allow-origin http://localhost:3000
   curl -s localhost:8080/v1/models -H 'Authorization: Bearer s3cret'

On SIGTERM or Ctrl-C, queued requests get 503, sequences decoding have
--grace to finish, then are cancelled after their step; the exit is 0.`,
		Flags: append(append(compileFlags(),
			addrFlag, serveLadderFlag, servePolicyFlag, maxSeqsFlag, queueFlag, timeoutFlag, defaultMaxFlag,
			modelNameFlag, graceFlag, maxBodyFlag, readTimeoutFlag, writeTimeFlag, idleTimeoutFlag, maxConnsFlag,
			allowedHosts, allowOrigin, apiKeyFlag, controlInContentFlag, prefillChunkFlag, prefillFlag, compileCostFlag, rungIdleFlag, quietFlag,
		), append(batchFlags, traceFlags...)...),
		Action: serveAction,
	}
)

func serveAction(c *cli.Context) error {
	ladder, policy, err := ladderAndPolicy(c, serveLadderFlag, servePolicyFlag)
	if err != nil {
		return err
	}
	prefill, err := prefillMode(c)
	if err != nil {
		return err
	}
	if maxSeqsFlag.Get(c) < 1 || maxSeqsFlag.Get(c) > 256 {
		return fmt.Errorf("--max-seqs %d: want 1..256", maxSeqsFlag.Get(c))
	}
	if queueFlag.Get(c) < 0 || queueFlag.Get(c) > 1<<16 {
		return fmt.Errorf("--queue %d: want 0..65536", queueFlag.Get(c))
	}
	if err := checkCompileFlags(c); err != nil {
		return err
	}
	limits, err := serveLimits(c)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addrFlag.Get(c))
	if err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	defer ln.Close()
	ck, comp, err := openModel(c)
	if err != nil {
		return err
	}
	defer ck.Close()
	defer comp.Close()
	// The tokenizer and chat template are read while the engine is set up
	// and the first rung compiles; the server needs them only to listen.
	var (
		tok      *tokenizer.Tokenizer
		tmpl     *chat.Template
		textErr  error
		textRead = make(chan struct{})
	)
	go func() { defer close(textRead); tok, tmpl, textErr = textModel(c.Context, ck) }()
	defer func() { <-textRead }() // ck stays open while it is read
	batching, err := useBatching(c, comp)
	if err != nil {
		return err
	}
	var bcfg engine.BatchConfig
	if batching {
		if bcfg, err = batchConfig(c, comp, ladder); err != nil {
			return err
		}
	}
	if rungIdleFlag.Get(c) < 0 {
		return fmt.Errorf("--rung-idle %v: want 0 (keep every rung) or a duration", rungIdleFlag.Get(c))
	}
	paged := batching && bcfg.Attention != model.AttentionStatic
	if paged && rungIdleFlag.Get(c) > 0 {
		return fmt.Errorf("--rung-idle frees graphs a rung or a static batch variant holds alone: give --batching off or --attention static (paged batching serves every rung from one pool and, on the CPU, one compiled graph)")
	}
	if paged && compileCostFlag.Get(c) != "" {
		return fmt.Errorf("--compile-cost budgets graphs compiled per rung: give --batching off or --attention static (paged batching compiles one graph for every rung, docs/design.md §9)")
	}
	profile, err := loadCompileCost(c, comp, ladder)
	if err != nil {
		return err
	}
	bcfg.CompileCost, bcfg.RungIdle = profile, rungIdleFlag.Get(c)
	name := modelNameFlag.Get(c)
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(modelFlag.Get(c)), ".gguf")
	}
	obs, err := startObserver(c)
	if err != nil {
		return err
	}
	defer obs.finish(nil) // flush every request's trace
	// The engine outlives the first signal: sequences in flight go on
	// compiling their rungs during --grace; it ends with the deferred Close,
	// after the server's Shutdown.
	ectx, stopEngine := context.WithCancel(context.WithoutCancel(c.Context))
	defer stopEngine()
	t0 := time.Now()
	reg := prometheus.NewRegistry()
	var (
		eng  engine.Engine
		warm func(context.Context) error
		what string
	)
	if batching {
		b, traced, err := newBatchedEngine(ectx, comp, bcfg, obs, reg)
		if err != nil {
			return err
		}
		defer b.Close()
		eng, warm = traced, b.Warm
		what = fmt.Sprintf("continuous batching: %d sequences, %d tokens a step", bcfg.MaxSeqs, bcfg.MaxBatchTokens)
		if bcfg.Attention == model.AttentionStatic {
			what = fmt.Sprintf("continuous batching on static graphs: %d sequences, one token each a step", bcfg.MaxSeqs)
		}
	} else {
		l, err := runtime.NewCompiledLadder(ectx, comp, runtime.LadderConfig{Ladder: ladder, Policy: policy, CompileCost: profile, RungIdle: rungIdleFlag.Get(c),
			Shape: comp.KVShape(), PrefillChunk: prefillChunk(c, comp), Prefill: prefill, KeepRungs: true,
			Background: runtime.BackgroundOptions{Nice: defaultCompileNice}})
		if err != nil {
			return err
		}
		defer l.Close()
		// Each request is a sequence on the shared ladder; the hooks feed
		// the ladder's Prometheus series and give one trace per request.
		start, shape := time.Now(), comp.KVShape()
		metrics := newEngineMetrics()
		metrics.compilesOf = func() []runtime.CompileRecord { return l.Compiles(start) }
		if profile != nil {
			metrics.rungs.budgetsOf = func() runtime.BudgetStats { return l.BudgetStats(start) }
		}
		metrics.rungs.rungsOf = l.RungCounts
		seq := engine.NewSequential(l, engine.SequentialConfig{
			Progress: func(promptTokens int) (func(runtime.Progress), func()) { return metrics.sequence(shape, promptTokens) },
			OnSummary: func(s *runtime.Summary, origin time.Time) {
				metrics.record(s)
				obs.emit(s, origin)
			},
		})
		reg.MustRegister(metrics)
		eng, warm, what = seq, seq.Warm, string(policy)
	}
	wctx, stopWarm := context.WithCancel(c.Context)
	defer stopWarm()
	warmed := make(chan error, 1)
	go func() { warmed <- warm(wctx) }()
	if <-textRead; textErr != nil {
		stopWarm()
		<-warmed
		return textErr
	}
	srv, err := serve.New(serve.Config{Engine: eng, Tokenizer: tok, Template: tmpl, ModelName: name, Registry: reg,
		MaxSeqs: maxSeqsFlag.Get(c), MaxQueue: queueFlag.Get(c), Timeout: timeoutFlag.Get(c), DefaultMaxTokens: defaultMaxFlag.Get(c),
		Limits: limits, ControlInContent: controlInContentFlag.Get(c),
		Access: serve.Access{Hosts: splitList(allowedHosts.Get(c)), Origins: splitList(allowOrigin.Get(c)), Key: apiKeyFlag.Get(c)}})
	if err != nil {
		stopWarm()
		<-warmed
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logf := func(format string, a ...any) {
		if !quietFlag.Get(c) {
			fmt.Fprintf(c.App.ErrWriter, "ovrun serve: "+format+"\n", a...)
		}
	}
	logf("listening on http://%s (model %s, ladder %v, %s); compiling rung %d", ln.Addr(), name, []int(ladder), what, ladder[0])
	if err := <-warmed; err != nil {
		srv.Shutdown(context.Background())
		return fmt.Errorf("compile the first rung: %w", err)
	}
	logf("ready after %.2f s", time.Since(t0).Seconds())
	select {
	case err := <-served:
		return err
	case <-c.Context.Done():
	}
	logf("stopping: finishing requests in flight (up to %s)", graceFlag.Get(c))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Context), graceFlag.Get(c))
	defer cancel()
	if n := srv.Shutdown(ctx); n > 0 {
		logf("cancelled %d sequences still decoding after --grace %s", n, graceFlag.Get(c))
	}
	return nil // the engine is closed by the deferred calls, after every sequence has ended
}

// serveLimits reads the flags that bound what one client may cost.
func serveLimits(c *cli.Context) (serve.Limits, error) {
	body, err := cliutil.ParseSize("max-body", maxBodyFlag.Get(c))
	if err != nil {
		return serve.Limits{}, err
	}
	if body < 1<<10 || body > 1<<30 {
		return serve.Limits{}, fmt.Errorf("--max-body %s: want 1KiB..1GiB", maxBodyFlag.Get(c))
	}
	for _, f := range []*cli.DurationFlag{readTimeoutFlag, writeTimeFlag, idleTimeoutFlag} {
		if d := f.Get(c); d < 100*time.Millisecond || d > 24*time.Hour {
			return serve.Limits{}, fmt.Errorf("--%s %s: want 100ms..24h", f.Name, d)
		}
	}
	if err := cliutil.CheckInt("max-conns", maxConnsFlag.Get(c), 1, 1<<20); err != nil {
		return serve.Limits{}, err
	}
	return serve.Limits{MaxBody: body, ReadTimeout: readTimeoutFlag.Get(c), WriteTimeout: writeTimeFlag.Get(c),
		IdleTimeout: idleTimeoutFlag.Get(c), MaxConns: maxConnsFlag.Get(c)}, nil
}

// splitList reads a repeatable flag whose values may also be separated by commas.
func splitList(vs []string) []string {
	var out []string
	for _, v := range vs {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}
