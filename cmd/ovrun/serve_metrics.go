package main

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ovtoolkit/ovrun/ladder"
	"github.com/ovtoolkit/ovrun/runtime"
)

// engineMetrics are the ladder's Prometheus series in ovrun serve: KV
// reserved and live over the sequences decoding now, compiles by kind, rung
// and outcome, and boundary waits. The server adds its request series.
type engineMetrics struct {
	compilesOf   func() []runtime.CompileRecord           // the ladder's compiles so far
	budgetsOf    func() []runtime.Budget                  // its compile budgets (--compile-cost)
	countsOf     func() (launches, misses map[string]int) // its budgeted launches by reason, misses by kind
	rungsOf      func() (compiled, released int)
	rungsDesc    *prometheus.Desc
	releasesDesc *prometheus.Desc
	compilesDesc *prometheus.Desc
	compileDesc  *prometheus.Desc
	budgetDesc   *prometheus.Desc
	budgetErr    *prometheus.Desc
	launchesDesc *prometheus.Desc
	overruns     *prometheus.Desc
	boundaryWait prometheus.Histogram
	kvReserved   prometheus.Gauge
	kvLive       prometheus.Gauge

	mu   sync.Mutex
	seqs map[int64]kvLevel // per active sequence
	next int64
}

type kvLevel struct{ reserved, live int64 }

func newEngineMetrics() *engineMetrics {
	return &engineMetrics{
		compilesDesc: prometheus.NewDesc("ovrun_compiles_total",
			"Graph compiles of the shared ladder by kind, rung capacity and outcome.", []string{"kind", "capacity", "outcome"}, nil),
		compileDesc: prometheus.NewDesc("ovrun_compile_seconds_total",
			"Seconds the shared ladder spent compiling, by kind.", []string{"kind"}, nil),
		budgetDesc: prometheus.NewDesc("ovrun_compile_budget_seconds",
			"Per rung with --compile-cost, its latest launch: the profile's figure, the prediction (profile x the correction learnt from earlier compiles), the window (time left before a sequence needed the rung, at launch) and the actual compile.", []string{"capacity", "figure"}, nil),
		rungsDesc: prometheus.NewDesc("ovrun_rungs",
			"Rungs of the shared ladder whose graphs are compiled now.", nil, nil),
		releasesDesc: prometheus.NewDesc("ovrun_rung_releases_total",
			"Rungs freed after --rung-idle without a request.", nil, nil),
		launchesDesc: prometheus.NewDesc("ovrun_compile_launches_total",
			"Budgeted background compiles by why they were launched: deadline (a sequence's time left fell to the predicted compile plus a margin), admission (a prompt needs the rung), boundary (a sequence reached it before any rule launched it), one_ahead or two_ahead (ovrun run's rules).", []string{"reason"}, nil),
		budgetErr: prometheus.NewDesc("ovrun_compile_budget_error_ratio",
			"Per compiled rung with --compile-cost: actual / predicted - 1.", []string{"capacity"}, nil),
		overruns: prometheus.NewDesc("ovrun_compile_budget_overruns_total",
			"Budgeted compiles that went wrong, by kind: actual (took longer than predicted), missed (predicted at launch to exceed the time left), waited (a sequence reached the rung before it was ready: a deadline missed in fact).", []string{"kind"}, nil),
		boundaryWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ovrun_boundary_wait_seconds",
			Help: "Time a sequence waited at a rung boundary for the next rung's graph.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
		kvReserved: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovrun_kv_reserved_bytes",
			Help: "KV cache bytes reserved by the sequences decoding now (their rungs' capacity)."}),
		kvLive: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovrun_kv_live_bytes",
			Help: "KV cache bytes holding tokens of the sequences decoding now."}),
		seqs: map[int64]kvLevel{},
	}
}

func (m *engineMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.compilesDesc
	ch <- m.compileDesc
	ch <- m.budgetDesc
	ch <- m.rungsDesc
	ch <- m.releasesDesc
	ch <- m.budgetErr
	ch <- m.launchesDesc
	ch <- m.overruns
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect reports the live gauges and, from the ladder's own records, its
// compiles so far (each rung is compiled once, however many requests).
func (m *engineMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
	m.collectBudgets(ch)
	if m.rungsOf != nil {
		compiled, released := m.rungsOf()
		ch <- prometheus.MustNewConstMetric(m.rungsDesc, prometheus.GaugeValue, float64(compiled))
		ch <- prometheus.MustNewConstMetric(m.releasesDesc, prometheus.CounterValue, float64(released))
	}
	if m.compilesOf == nil {
		return
	}
	type key struct{ kind, capacity, outcome string }
	counts, secs := map[key]float64{}, map[string]float64{}
	for _, c := range m.compilesOf() {
		counts[key{c.Kind, fmt.Sprint(c.Capacity), c.Outcome()}]++
		secs[c.Kind] += c.CompileS
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(m.compilesDesc, prometheus.CounterValue, n, k.kind, k.capacity, k.outcome)
	}
	for k, v := range secs {
		ch <- prometheus.MustNewConstMetric(m.compileDesc, prometheus.CounterValue, v, k)
	}
}

// collectBudgets reports the ladder's compile budgets, when it has them.
func (m *engineMetrics) collectBudgets(ch chan<- prometheus.Metric) {
	if m.budgetsOf == nil {
		return
	}
	for _, b := range m.budgetsOf() {
		c := fmt.Sprint(b.Capacity)
		ch <- prometheus.MustNewConstMetric(m.budgetDesc, prometheus.GaugeValue, b.ProfileS, c, "profile")
		ch <- prometheus.MustNewConstMetric(m.budgetDesc, prometheus.GaugeValue, b.PredictedS, c, "predicted")
		ch <- prometheus.MustNewConstMetric(m.budgetDesc, prometheus.GaugeValue, b.WindowS, c, "window")
		if b.ActualS > 0 {
			ch <- prometheus.MustNewConstMetric(m.budgetDesc, prometheus.GaugeValue, b.ActualS, c, "actual")
			if b.PredictedS > 0 {
				ch <- prometheus.MustNewConstMetric(m.budgetErr, prometheus.GaugeValue, b.Error, c)
			}
		}
	}
	launches, misses := m.countsOf()
	for _, kind := range []string{runtime.MissActual, runtime.MissPredicted, runtime.MissWaited} {
		ch <- prometheus.MustNewConstMetric(m.overruns, prometheus.CounterValue, float64(misses[kind]), kind)
	}
	for _, reason := range ladder.LaunchReasons {
		ch <- prometheus.MustNewConstMetric(m.launchesDesc, prometheus.CounterValue, float64(launches[reason]), reason)
	}
}

func (m *engineMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.boundaryWait, m.kvReserved, m.kvLive}
}

// sequence registers a sequence and returns its progress callback and the
// function that removes it.
func (m *engineMetrics) sequence(shape runtime.KVShape, prompt int) (func(runtime.Progress), func()) {
	m.mu.Lock()
	id := m.next
	m.next++
	m.mu.Unlock()
	update := func(p runtime.Progress) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.seqs[id] = kvLevel{reserved: shape.BufferBytes(p.Capacity), live: int64(prompt+p.Step) * shape.TokenBytes()}
		m.publish()
	}
	return update, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.seqs, id)
		m.publish()
	}
}

// publish sets the KV gauges to the sums over open sequences; m.mu is held.
func (m *engineMetrics) publish() {
	var r, l int64
	for _, s := range m.seqs {
		r += s.reserved
		l += s.live
	}
	m.kvReserved.Set(float64(r))
	m.kvLive.Set(float64(l))
}

// record adds a finished sequence's boundary waits.
func (m *engineMetrics) record(s *runtime.Summary) {
	for _, r := range s.Rungs {
		if r.FirstStep >= 0 && r.WaitS > 0 {
			m.boundaryWait.Observe(r.WaitS)
		}
	}
}
