package main

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/engine"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
	"github.com/ovtoolkit/ovrun/runtime/ovexec"
	"github.com/ovtoolkit/ovrun/tracing"
)

// Continuous batching in ovrun serve: the flags, the choice between the
// batched and the sequential engine, and the batched engine's Prometheus
// series.
var (
	batchingFlag       = &cli.StringFlag{Name: "batching", Value: "auto", Usage: "continuous batching `MODE`: on (every step one inference over all sequences decoding: on paged graphs with chunked prompts; on static graphs, NPU or --attention static, a graph per rung and batch size 1, 2, 4 .. --max-seqs, one token per sequence a step), off (a sequence per request on the --policy ladder), auto (on where graphs are paged: the CPU with ovrun's extension, unless --policy or --prefill is given)"}
	maxBatchTokensFlag = &cli.IntFlag{Name: "max-batch-tokens", Value: 256, Usage: "with batching, `N` tokens per step at most: one for each sequence decoding, the rest prompt chunks of newly admitted ones (at least --max-seqs)"}
	prefixCacheFlag    = &cli.StringFlag{Name: "prefix-cache", Value: "64MiB", Usage: "with batching, KV `SIZE` of finished requests kept for prompts that start with the same tokens (a system prompt, a chat's history), least recently used out first; 0: none"}
)

// batchFlags go on ovrun serve.
var batchFlags = []cli.Flag{batchingFlag, maxBatchTokensFlag, prefixCacheFlag}

// staticGraphs reports whether comp's graphs are all static (the NPU, or
// --attention static): batching then steps static batched graphs.
func staticGraphs(comp *ovexec.Compiler) bool {
	return comp.AttentionFor(0) == model.AttentionStatic && !comp.SharedGraphs()
}

// useBatching reads --batching: whether serve batches on comp.
func useBatching(c *cli.Context, comp *ovexec.Compiler) (bool, error) {
	asked := c.IsSet(servePolicyFlag.Name) || c.IsSet(prefillFlag.Name)
	switch batchingFlag.Get(c) {
	case "off":
		return false, nil
	case "auto":
		return comp.Paged() && !asked, nil
	case "on":
		if !comp.Paged() && !staticGraphs(comp) {
			why := "--attention is not paged"
			if err := comp.PagedUnavailable(); err != nil {
				why = err.Error()
			}
			return false, fmt.Errorf("--batching on needs paged attention (%s) or static graphs (--attention static): give --batching off, or auto", why)
		}
		if asked {
			return false, fmt.Errorf("--batching on schedules its own prompts and KV: --policy and --prefill apply with --batching off")
		}
		return true, nil
	}
	return false, fmt.Errorf("--batching %q: want auto, on or off", batchingFlag.Get(c))
}

// batchConfig reads the batching flags for comp's graphs.
func batchConfig(c *cli.Context, comp *ovexec.Compiler, ladder runtime.Ladder) (engine.BatchConfig, error) {
	if staticGraphs(comp) {
		return staticBatchConfig(c, comp, ladder)
	}
	seqs, tokens := maxSeqsFlag.Get(c), maxBatchTokensFlag.Get(c)
	if err := cliutil.CheckInt(maxBatchTokensFlag.Name, tokens, seqs, 8192); err != nil {
		return engine.BatchConfig{}, fmt.Errorf("%w (at least --max-seqs %d, so every sequence decoding advances every step)", err, seqs)
	}
	size, err := cliutil.ParseSize(prefixCacheFlag.Name, prefixCacheFlag.Get(c))
	if err != nil {
		return engine.BatchConfig{}, err
	}
	shape := comp.KVShape()
	blockBytes := int64(shape.Block) * shape.TokenBytes()
	blocks := size / blockBytes
	if max := int64(1 << 20); blocks > max {
		return engine.BatchConfig{}, fmt.Errorf("--prefix-cache %s: want at most %d blocks of %d KiB", prefixCacheFlag.Get(c), max, blockBytes>>10)
	}
	pool := (int64(seqs)*int64(shape.Slots(ladder.Max())) + blocks*int64(shape.Block)) * shape.TokenBytes()
	if err := runtime.CheckMemory("the kv block pool (--max-seqs x the largest rung + --prefix-cache)", pool); err != nil {
		return engine.BatchConfig{}, err
	}
	spec := comp.Spec(model.GraphSpec{Capacity: ladder.Max(), Chunk: tokens, Shared: true})
	return engine.BatchConfig{Ladder: ladder, MaxSeqs: seqs, MaxBatchTokens: tokens, Shape: shape,
		Attention: spec.Attention, KVPrecision: spec.KVPrecision, PrefixCacheBlocks: int(blocks)}, nil
}

// staticBatchConfig is batchConfig for static graphs: a cache of each
// rung's capacity per sequence slot, no prefix cache, one token per
// sequence a step.
func staticBatchConfig(c *cli.Context, comp *ovexec.Compiler, ladder runtime.Ladder) (engine.BatchConfig, error) {
	seqs := maxSeqsFlag.Get(c)
	for _, f := range []cli.Flag{prefixCacheFlag, maxBatchTokensFlag} {
		if name := f.Names()[0]; c.IsSet(name) {
			return engine.BatchConfig{}, fmt.Errorf("--%s applies to paged graphs; static batched graphs take one token per sequence a step and share no prefix", name)
		}
	}
	shape := comp.KVShape()
	var slots int64
	for _, cap := range ladder {
		slots += int64(seqs) * int64(cap)
	}
	if err := runtime.CheckMemory("the static batch caches (--max-seqs caches of every rung)", slots*shape.TokenBytes()); err != nil {
		return engine.BatchConfig{}, err
	}
	spec := comp.Spec(model.GraphSpec{Capacity: ladder.Max(), Chunk: 1})
	return engine.BatchConfig{Ladder: ladder, MaxSeqs: seqs, MaxBatchTokens: seqs, Shape: shape,
		Attention: model.AttentionStatic, KVPrecision: spec.KVPrecision}, nil
}

// batchMetrics are the batched engine's Prometheus series: what every step
// carried, the KV block pool, the prefix cache and the rungs' compiles.
type batchMetrics struct {
	stats      func() engine.BatchStats
	tokenBytes int64 // KV bytes of one token
	seqs       prometheus.Histogram
	tokens     prometheus.Histogram
	stepTime   prometheus.Histogram
	blocks     *prometheus.Desc
	kvBytes    *prometheus.Desc
	reserved   *prometheus.Desc
	live       *prometheus.Desc
	prefix     *prometheus.Desc
	evictions  *prometheus.Desc
	compiles   *prometheus.Desc
	compileS   *prometheus.Desc
	rungs      *rungMetrics
}

func newBatchMetrics() *batchMetrics {
	return &batchMetrics{
		seqs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ovrun_batch_sequences",
			Help: "Sequences one step (inference) carried.", Buckets: prometheus.ExponentialBuckets(1, 2, 9)}),
		tokens: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ovrun_batch_tokens",
			Help: "Tokens one step carried: a decode token per sequence decoding, plus prompt chunks.", Buckets: prometheus.ExponentialBuckets(1, 2, 13)}),
		stepTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ovrun_batch_step_seconds",
			Help: "Time of one step's inference.", Buckets: prometheus.ExponentialBuckets(0.002, 2, 12)}),
		blocks: prometheus.NewDesc("ovrun_kv_blocks",
			"KV pool blocks by state: used (held by sequences), cached (prefix cache), free.", []string{"state"}, nil),
		kvBytes: prometheus.NewDesc("ovrun_kv_pool_bytes",
			"The KV pool: reserved address space, and the part of it backed by memory (committed).", []string{"kind"}, nil),
		reserved: prometheus.NewDesc("ovrun_kv_reserved_bytes",
			"KV cache bytes backed by memory: the pool's committed pages (it commits a block's pages when one is first written).", nil, nil),
		live: prometheus.NewDesc("ovrun_kv_live_bytes",
			"KV cache bytes in the blocks the sequences decoding now hold.", nil, nil),
		prefix: prometheus.NewDesc("ovrun_prefix_cache_tokens_total",
			"Prompt tokens whose KV came from the prefix cache (hit) or was computed (miss).", []string{"result"}, nil),
		evictions: prometheus.NewDesc("ovrun_prefix_cache_evictions_total",
			"Cached KV blocks dropped for room.", nil, nil),
		compiles: prometheus.NewDesc("ovrun_compiles_total",
			"Graph compiles of the shared ladder by kind, rung capacity and outcome.", []string{"kind", "capacity", "outcome"}, nil),
		compileS: prometheus.NewDesc("ovrun_compile_seconds_total",
			"Seconds the shared ladder spent compiling, by kind.", []string{"kind"}, nil),
		rungs: newRungMetrics(),
	}
}

// step records one step (engine.BatchConfig.OnStep).
func (m *batchMetrics) step(s engine.StepInfo) {
	m.seqs.Observe(float64(s.Seqs))
	m.tokens.Observe(float64(s.Tokens))
	m.stepTime.Observe(s.Dur.Seconds())
}

func (m *batchMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range []prometheus.Collector{m.seqs, m.tokens, m.stepTime} {
		c.Describe(ch)
	}
	for _, d := range []*prometheus.Desc{m.blocks, m.kvBytes, m.reserved, m.live, m.prefix, m.evictions, m.compiles, m.compileS} {
		ch <- d
	}
	m.rungs.Describe(ch)
}

func (m *batchMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range []prometheus.Collector{m.seqs, m.tokens, m.stepTime} {
		c.Collect(ch)
	}
	if m.stats == nil {
		return
	}
	s := m.stats()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(m.blocks, float64(s.BlocksUsed), "used")
	gauge(m.blocks, float64(s.BlocksCached), "cached")
	gauge(m.blocks, float64(s.BlocksFree), "free")
	gauge(m.kvBytes, float64(s.KVReservedBytes), "reserved")
	if s.KVCommittedBytes >= 0 {
		gauge(m.kvBytes, float64(s.KVCommittedBytes), "committed")
		gauge(m.reserved, float64(s.KVCommittedBytes))
	}
	gauge(m.live, float64(s.LiveTokens)*float64(m.tokenBytes))
	counter(m.prefix, float64(s.PrefixHitTokens), "hit")
	counter(m.prefix, float64(s.PrefixMissTokens), "miss")
	counter(m.evictions, float64(s.PrefixEvictions))
	// Static graphs compile a variant per batch size: summed per capacity.
	var secs float64
	type key struct {
		capacity int
		outcome  string
	}
	compiles := map[key]int{}
	ready := 0
	for _, r := range s.Rungs {
		secs += r.CompileTotal.Seconds()
		if r.State == engine.RungReady {
			ready++
		}
		ok := r.Compiles
		if r.State == engine.RungFailed {
			compiles[key{r.Capacity, "error"}] += r.Tries
			ok -= r.Tries
		}
		if ok > 0 {
			compiles[key{r.Capacity, "ok"}] += ok
		}
	}
	for k, n := range compiles {
		counter(m.compiles, float64(n), "batch", fmt.Sprint(k.capacity), k.outcome)
	}
	counter(m.compileS, secs, "batch")
	m.rungs.collectRungs(ch, ready, int(s.Released)) // from this snapshot: Stats reads the pool's pagemap
	m.rungs.Collect(ch)
}

// newBatchedEngine starts the batched engine of ovrun serve with its
// metrics registered on reg and, when obs exports traces, a trace per
// request and a span per step.
func newBatchedEngine(ctx context.Context, comp *ovexec.Compiler, cfg engine.BatchConfig, obs *observer, reg prometheus.Registerer) (*engine.Batched, engine.Engine, error) {
	m := newBatchMetrics()
	cfg.OnStep = m.step
	if obs.tp != nil {
		spans := engine.StepSpans(obs.tp.Tracer(tracing.ScopeName))
		cfg.OnStep = func(s engine.StepInfo) { m.step(s); spans(s) }
	}
	b, err := engine.NewBatched(ctx, comp, cfg)
	if err != nil {
		return nil, nil, err
	}
	m.stats, m.tokenBytes = b.Stats, cfg.Shape.TokenBytes()
	if cfg.CompileCost != nil {
		m.rungs.budgetsOf = b.Budgets
	}
	reg.MustRegister(m)
	var eng engine.Engine = b
	if obs.tp != nil {
		eng = engine.Traced(b, obs.tp.Tracer(tracing.ScopeName))
	}
	return b, eng, nil
}
