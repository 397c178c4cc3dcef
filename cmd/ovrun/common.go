package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/ov"
	"github.com/ovtoolkit/ovrun/rungcache"
	"github.com/ovtoolkit/ovrun/runtime"
	"github.com/ovtoolkit/ovrun/runtime/ovexec"
)

// Flags shared by the commands that compile.
var (
	modelFlag   = cliutil.ModelFlag(true)
	weightsFlag = &cli.StringFlag{Name: "weights", Value: "native", Usage: "`FORMAT` of the weights in the compiled graphs: native keeps quantized and 16-bit weights compressed and exact (decompressed inside the matrix multiplications), rounded is native with the float minimum of Q4_1/Q4_K blocks rounded to an integer zero point (OpenVINO GenAI's form of a GGUF file: faster on CPU, each weight off by up to half a quantization step), f32 expands every weight to f32 constants, kernel multiplies Q4_1, Q4_0 and Q8_0 weights in ovrun's own kernel (exact; the weights stay in the file's blocks, read in place: less memory and a faster start than native), kernel-q8 is kernel with the activations quantized to 8 bits per 32 as llama.cpp does (fastest on CPUs without VNNI, not exact)",
		Action: func(_ *cli.Context, v string) error { _, err := model.ParseWeightFormat(v); return err }}
	deviceFlag    = cliutil.DeviceFlag()
	attentionFlag = &cli.StringFlag{Name: "attention", Value: string(model.AttentionAuto), Usage: "`FORM` of attention over the KV cache: paged reads only the live blocks of 32 slots through OpenVINO's PagedAttention operation (CPU only, with ovrun's extension library that make build puts next to libopenvino; the cache in the inference precision), bounded reads only the live prefix (position rounded up to 64 slots, a dynamic shape inside the graph), static reads every slot of the capacity (fully static graph, as NPU needs), auto is paged on the CPU where it can run, else static while the whole past cache takes at most 24 MiB and bounded above; bounded on GPU, static on NPU",
		Action: func(_ *cli.Context, v string) error {
			if _, err := model.ParseAttention(v); err != nil {
				return fmt.Errorf("--attention: %w", err)
			}
			return nil
		}}
	precisionFlag   = cliutil.PrecisionFlag()
	kvPrecisionFlag = &cli.StringFlag{Name: "kv-precision", Value: "auto", Usage: "`TYPE` the KV cache is stored in: f32, bf16, f16, or auto (on the CPU the inference precision, so a bf16 run's attention reads its cache without converting it every step and the cache takes half the memory; f32 on other devices)",
		Action: func(_ *cli.Context, v string) error {
			if _, err := ovexec.ParseKVPrecision(v); err != nil {
				return fmt.Errorf("--kv-precision: %w", err)
			}
			return nil
		}}
	threadsFlag  = &cli.IntFlag{Name: "infer-threads", Usage: "INFERENCE_NUM_THREADS for the compiled graphs (0: OpenVINO decides)"}
	cacheDirFlag = &cli.StringFlag{Name: "cache-dir", Usage: "compiled-rung cache `DIR` or s3://BUCKET/PREFIX: a graph compiled before with the same weights, graph, device, precision, properties, OpenVINO and device driver is imported instead of compiled, and a compiled one is stored there (checked by CRC-32C before an import, least recently used evicted past --cache-max); a bucket is shared between machines, read through the local folder --cache-local-dir, with the endpoint, region and credentials of the AWS environment (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_PROFILE; path-style with a custom endpoint); a bucket that cannot be reached is a note and the run goes on with the local folder; off by default so compile costs are real", EnvVars: []string{"OVRUN_CACHE_DIR"},
		Action: func(_ *cli.Context, v string) error { return checkCacheDir(v) }}
	cacheLocalDirFlag = &cli.StringFlag{Name: "cache-local-dir", Usage: "with --cache-dir s3://..., the local `DIR` a graph from the bucket is kept in, so later imports read it here (default: ovrun/rungs in the user's cache folder, $XDG_CACHE_HOME or ~/.cache); its size is capped by --cache-max", EnvVars: []string{rungcache.LocalDirEnv}}
	cacheMaxFlag      = &cli.StringFlag{Name: "cache-max", Value: "8GiB", Usage: "`SIZE` cap of the --cache-dir folder, or of the local folder in front of a bucket (e.g. 512MiB, 8GiB); least recently used entries are evicted past it (a bucket is pruned by ovrun cache prune)",
		Action: func(_ *cli.Context, v string) error { _, err := cliutil.ParseSize("cache-max", v); return err }}
	propFlag         = cliutil.PropFlag()
	jsonFlag         = &cli.StringFlag{Name: "json", Usage: "write a machine-readable summary to `FILE`"}
	quietFlag        = cliutil.QuietFlag()
	promptIDsFlag    = &cli.StringFlag{Name: "prompt-ids", Usage: "prompt token ids, comma-separated (`1,2,3`)"}
	promptTokensFlag = &cli.IntFlag{Name: "prompt-tokens", Usage: "a seeded random prompt of `N` tokens"}
	seedFlag         = &cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of the random prompt (and teacher-forced tokens)"}
	prefillChunkFlag = &cli.IntFlag{Name: "prefill-chunk", Value: runtime.DefaultPrefillChunk, Usage: "tokens per prefill call (static shape of the prefill graph, the most a shared or paged graph takes per call; when not given, 512 where the graphs attend paged); 0 feeds the prompt through the decode graph"}
	prefillFlag      = &cli.StringFlag{Name: "prefill", Value: string(runtime.DefaultPrefill), Usage: "`MODE` of the prompt: graph compiles the prefill graph before the first token, decode feeds the prompt through the first rung's decode graph, shared compiles every rung as one graph that takes 1 to --prefill-chunk tokens per call (the prompt in chunks, then decoding; CPU, GPU; decode steps slower by a cost per layer that narrow models feel most: 20-40% for SmolLM2, about 5% for a 0.5B model), auto makes the first rung shared where the prompt is worth more than that slowdown, estimated from the model's layers and weight bytes, over the tokens the rung decodes (CPU, GPU, not on chat and serve's kept ladders), and otherwise feeds the prompt through the decode graph until the measured step time says compiling the prefill graph is faster for the rest",
		Action: func(_ *cli.Context, v string) error { _, err := runtime.ParsePrefillMode(v); return err }}
	ladderFlag       = &cli.StringFlag{Name: "ladder", Value: "1024,2048,4096,8192", Usage: "ascending context `CAPACITIES`"}
	decodeTokensFlag = &cli.IntFlag{Name: "decode-tokens", Value: 256, Usage: "decode `STEPS`"}
	teacherFlag      = &cli.BoolFlag{Name: "teacher-forced", Usage: "feed a seeded token stream (identical for every policy) instead of the model's own predictions"}
	compileCostFlag  = &cli.StringFlag{Name: "compile-cost", Usage: "compile-cost profile `FILE` from ovtrace compile: per-rung budgets (predicted, corrected online from the compiles that finish); run launches one ahead, two ahead when one ahead cannot make it; serve launches each rung (or static batch variant) when the earliest sequence's time left falls to its predicted compile, and holds a prompt whose rung compiles in the queue"}
	outDirFlag       = &cli.StringFlag{Name: "out", Usage: "output `DIR`", Required: true}
)

// cacheLockWaitFlag bounds the wait for a --cache-dir lock another process
// holds (waitForCacheLock): a cache never hangs nor fails a run.
var cacheLockWaitFlag = &cli.DurationFlag{Name: "cache-lock-wait", Value: rungcache.DefaultLockWait, Usage: "wait at most `DURATION` for the --cache-dir lock another process holds (saying so after a second), then go on without the cache"}

// Where graphs compile (docs/design.md §4, "A compile in a worker").
var (
	compileInFlag = &cli.StringFlag{Name: "compile-in", Value: runtime.CompileInProcess, Usage: "`WHERE` graphs compile: process (this process's threads) or worker (a child process per graph, whose every thread gets --compile-cpus and --compile-nice; a crash, --compile-timeout or --compile-memory ends only the child, and the compile is retried once like any failed compile)",
		Action: func(_ *cli.Context, v string) error { return checkCompileIn(v) }}
	compileTimeoutFlag = &cli.DurationFlag{Name: "compile-timeout", Value: defaultCompileTimeout, Usage: "with --compile-in worker, kill a compile worker that runs longer than `DURATION` (0: no limit)"}
	compileMemoryFlag  = &cli.IntFlag{Name: "compile-memory", Usage: "with --compile-in worker, kill a compile worker whose resident memory grows past `MIB` MiB (0: no limit)"}
)

// defaultCompileTimeout is far above any compile measured here (the 0.5B
// shape's largest graph compiles in seconds on two cores, the seed's NPU
// first rung in about a minute): it only ends a compiler that hangs.
const defaultCompileTimeout = 30 * time.Minute

func checkCompileIn(v string) error {
	_, err := runtime.ParseCompileIn(v)
	return err
}

// workerOptions reads --compile-in and the worker's limits: nil compiles
// in this process.
func workerOptions(c *cli.Context) (*ovexec.WorkerOptions, error) {
	if err := checkCompileIn(compileInFlag.Get(c)); err != nil {
		return nil, err
	}
	timeout, mem := compileTimeoutFlag.Get(c), compileMemoryFlag.Get(c)
	if timeout < 0 {
		return nil, fmt.Errorf("--%s %s: want a duration of 0 (no limit) or more", compileTimeoutFlag.Name, timeout)
	}
	if err := cliutil.CheckInt(compileMemoryFlag.Name, mem, 0, 1<<30); err != nil {
		return nil, err
	}
	if compileInFlag.Get(c) != runtime.CompileInWorker {
		return nil, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--%s %s: find the ovrun executable to start workers: %w", compileInFlag.Name, runtime.CompileInWorker, err)
	}
	return &ovexec.WorkerOptions{Exe: exe, Args: []string{compileWorkerName}, Timeout: timeout, MemoryMiB: mem}, nil
}

// prefillChunk is --prefill-chunk, or where it is not given and comp's
// graphs attend paged, runtime.PagedPrefillChunk.
func prefillChunk(c *cli.Context, comp *ovexec.Compiler) int {
	if !c.IsSet(prefillChunkFlag.Name) && comp.Paged() {
		return runtime.PagedPrefillChunk
	}
	return prefillChunkFlag.Get(c)
}

// prefillMode reads --prefill; a prefill graph needs --prefill-chunk above
// 1, and so does a shared graph, which also needs a device that compiles
// dynamic shapes and an attention form other than static.
func prefillMode(c *cli.Context) (runtime.PrefillMode, error) {
	m, err := runtime.ParsePrefillMode(prefillFlag.Get(c))
	if err != nil {
		return "", fmt.Errorf("--prefill: %w", err)
	}
	chunk := prefillChunkFlag.Get(c)
	switch {
	case m == runtime.PrefillGraph && chunk <= 1:
		return "", fmt.Errorf("--prefill graph needs a prefill graph: --prefill-chunk %d is not above 1", chunk)
	case m == runtime.PrefillShared && chunk <= 1:
		return "", fmt.Errorf("--prefill shared takes up to --prefill-chunk tokens per call: %d is not above 1", chunk)
	case m == runtime.PrefillShared && !runtime.DynamicShapes(deviceFlag.Get(c)):
		return "", fmt.Errorf("--prefill shared needs dynamic shapes, which --device %s does not compile (use --prefill graph or decode)", deviceFlag.Get(c))
	case m == runtime.PrefillShared && attentionFlag.Get(c) == string(model.AttentionStatic):
		return "", errors.New("--prefill shared needs a dynamic token axis, which --attention static's fully static graphs lack (use --attention bounded or paged, or --prefill graph or decode)")
	}
	return m, nil
}

// attentionOf reads --attention.
func attentionOf(c *cli.Context) (model.Attention, error) {
	a, err := model.ParseAttention(attentionFlag.Get(c))
	if err != nil {
		return "", fmt.Errorf("--attention: %w", err)
	}
	return a, nil
}

var graphPerRungFlag = &cli.BoolFlag{Name: "graph-per-rung", Usage: "compile a graph for every rung even where one compiled graph serves them all: paged graphs (--attention auto on the CPU) are compiled once, for the model's whole context, and every later rung is a new infer request on that graph, so a rung boundary waits for no compile; with this flag each rung compiles its own, as static graphs (NPU) must"}

func compileFlags() []cli.Flag {
	return []cli.Flag{modelFlag, deviceFlag, precisionFlag, weightsFlag, attentionFlag, kvPrecisionFlag, threadsFlag, cacheDirFlag, cacheLocalDirFlag, cacheMaxFlag, cacheLockWaitFlag, propFlag,
		compileInFlag, compileTimeoutFlag, compileMemoryFlag, graphPerRungFlag}
}

func ovOptions(c *cli.Context) (ovexec.Options, error) {
	o := ovexec.Options{
		Device:       strings.ToUpper(deviceFlag.Get(c)),
		InferThreads: threadsFlag.Get(c),
		CacheDir:     cacheDirFlag.Get(c),
		Properties:   map[string]string{},
		GraphPerRung: graphPerRungFlag.Get(c),
	}
	var err error
	if o.CacheMax, err = cliutil.ParseSize(cacheMaxFlag.Name, cacheMaxFlag.Get(c)); err != nil {
		return o, err
	}
	if d := cacheLockWaitFlag.Get(c); d <= 0 {
		return o, fmt.Errorf("--%s %s: want a positive duration such as 30s or 5m", cacheLockWaitFlag.Name, d)
	}
	if err := checkCacheDir(o.CacheDir); err != nil {
		return o, err
	}
	if d := cacheLocalDirFlag.Get(c); d != "" {
		// The caches are opened deep inside the compilers, and in compile
		// workers, which inherit the environment.
		os.Setenv(rungcache.LocalDirEnv, d)
	}
	if o.Precision, err = cliutil.ParsePrecision(precisionFlag.Get(c)); err != nil {
		return o, err
	}
	if o.Weights, err = model.ParseWeightFormat(weightsFlag.Get(c)); err != nil {
		return o, err
	}
	if o.Attention, err = attentionOf(c); err != nil {
		return o, err
	}
	if o.KVPrecision, err = ovexec.ParseKVPrecision(kvPrecisionFlag.Get(c)); err != nil {
		return o, fmt.Errorf("--kv-precision: %w", err)
	}
	if o.Properties, err = cliutil.ParseProps(propFlag.Get(c)); err != nil {
		return o, err
	}
	o.Worker, err = workerOptions(c)
	return o, err
}

// openModel loads OpenVINO and the checkpoint, in that order, so a missing
// library is reported before any work.
// adjust, when given, changes the options the flags give.
func openModel(c *cli.Context, adjust ...func(*ovexec.Options)) (*model.Checkpoint, *ovexec.Compiler, error) {
	opts, err := ovOptions(c)
	if err != nil {
		return nil, nil, err
	}
	for _, f := range adjust {
		f(&opts)
	}
	t := time.Now()
	if err := ov.Load(); err != nil {
		return nil, nil, err
	}
	startup.OpenVINOS = time.Since(t).Seconds()
	if opts.CacheDir != "" {
		waitForCacheLock(c, cacheLockWaitFlag.Get(c), " (--"+cacheLockWaitFlag.Name+")")
	}
	t = time.Now()
	ck, err := model.Load(modelFlag.Get(c))
	if err != nil {
		return nil, nil, err
	}
	startup.ModelS = time.Since(t).Seconds()
	t = time.Now()
	comp, err := ovexec.NewCompiler(ck, opts)
	if err != nil {
		ck.Close()
		return nil, nil, err
	}
	startup.WeightsS = time.Since(t).Seconds()
	if why := comp.PagedUnavailable(); why != nil && comp.Attention() == model.AttentionAuto && strings.EqualFold(comp.Options().Device, "CPU") {
		// Auto falls back to the slower forms: say why, once.
		fmt.Fprintf(c.App.ErrWriter, "ovrun: note: %v; --attention auto uses static and bounded graphs\n", why)
	}
	return ck, comp, nil
}

// startupTimes are the seconds a process spent before its first graph:
// from the process's start to main, loading OpenVINO, reading the model and
// laying out its weights (NewCompiler). --json reports them as "startup".
type startupTimes struct {
	ProcessS  float64 `json:"process_s"`
	OpenVINOS float64 `json:"openvino_s"`
	ModelS    float64 `json:"model_s"`
	WeightsS  float64 `json:"weights_s"`
}

// startup is this process's startupTimes, filled by openModel.
var startup startupTimes

// waitForCacheLock sets how the rung caches this process opens wait for a
// lock another process holds: at most limit, saying so on stderr (hint
// ends the line), and not past Ctrl-C, so that a run interrupted while
// waiting still writes what it did. A bucket that cannot be reached (or
// answers again) is a note on stderr the moment it happens.
func waitForCacheLock(c *cli.Context, limit time.Duration, hint string) {
	rungcache.SetLockWait(rungcache.LockWait{
		Limit:   limit,
		Waiting: func(msg string) { fmt.Fprintf(c.App.ErrWriter, "ovrun: %s%s\n", msg, hint) },
		Done:    c.Context.Done(),
	})
	rungcache.SetNotice(func(msg string) { fmt.Fprintf(c.App.ErrWriter, "ovrun: note: %s\n", msg) })
}

// checkCacheDir checks the form of a --cache-dir that names a bucket
// (s3://bucket/prefix); a folder is checked when it is opened.
func checkCacheDir(dir string) error {
	if !rungcache.IsStoreURL(dir) {
		return nil
	}
	if err := rungcache.CheckStoreURL(dir); err != nil {
		return fmt.Errorf("--cache-dir: %w", err)
	}
	return nil
}

// prompt resolves --prompt-ids or --prompt-tokens.
func prompt(c *cli.Context, vocab int) ([]int64, error) {
	ids, n := promptIDsFlag.Get(c), promptTokensFlag.Get(c)
	switch {
	case ids != "" && n > 0:
		return nil, fmt.Errorf("give --prompt-ids or --prompt-tokens, not both")
	case ids != "":
		return parseIDs(promptIDsFlag.Name, ids, vocab)
	case n > 0:
		return runtime.SeededTokens(seedFlag.Get(c), n, vocab), nil
	}
	return nil, fmt.Errorf("give a prompt: --prompt-ids 1,2,3 or --prompt-tokens N")
}

// parseIDs reads comma-separated token ids given to --flag.
func parseIDs(flag, s string, vocab int) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--%s: %q is not a token id", flag, f)
		}
		if v < 0 || v >= int64(vocab) {
			return nil, fmt.Errorf("--%s: token %d is outside the vocabulary [0, %d)", flag, v, vocab)
		}
		out = append(out, v)
	}
	return out, nil
}

// ladderAndPolicy reads a --ladder and a --policy flag.
func ladderAndPolicy(c *cli.Context, ladderF, policyF *cli.StringFlag) (runtime.Ladder, runtime.Policy, error) {
	caps, err := cliutil.ParseInts(ladderF.Name, ladderF.Get(c))
	if err != nil {
		return nil, "", err
	}
	ladder, err := runtime.NewLadder(caps)
	if err != nil {
		return nil, "", err
	}
	policy, err := runtime.ParsePolicy(policyF.Get(c))
	return ladder, policy, err
}

// describeRun stamps a run summary with what the run was given and ran on:
// model, device, precision asked and in effect, seed, OpenVINO version.
func describeRun(c *cli.Context, comp *ovexec.Compiler, sum *runtime.Summary) {
	sum.Model = modelFlag.Get(c)
	sum.Device = comp.Options().Device
	sum.Precision = comp.Options().Precision
	sum.PrecisionUsed = comp.EffectivePrecision()
	specs := make([]model.GraphSpec, len(sum.Rungs))
	for i, r := range sum.Rungs {
		specs[i] = model.GraphSpec{Capacity: r.Capacity, Chunk: 1, Shared: r.Shared}
	}
	sum.Attention = comp.DescribeAttention(specs...)
	sum.KVPrecision = comp.KVPrecision()
	sum.Weights = string(comp.Weights().Format())
	sum.Seed = seedFlag.Get(c)
	sum.OpenVINOVersion, _ = ov.Version()
	sum.CompileIn = compileIn(comp)
}

// compileIn says where comp compiles: process or worker.
func compileIn(comp *ovexec.Compiler) string {
	if comp.Options().Worker != nil {
		return runtime.CompileInWorker
	}
	return runtime.CompileInProcess
}
