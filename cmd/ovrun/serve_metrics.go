package main

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ovtoolkit/ovrun/runtime"
)

// engineMetrics are the ladder's Prometheus series in ovrun serve: KV
// reserved and live over the sequences decoding now, compiles by kind, rung
// and outcome, and boundary waits. The server adds its request series.
type engineMetrics struct {
	compilesOf   func() []runtime.CompileRecord // the ladder's compiles so far
	rungs        *rungMetrics
	compilesDesc *prometheus.Desc
	compileDesc  *prometheus.Desc
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
		rungs: newRungMetrics(),
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
	m.rungs.Describe(ch)
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
	m.rungs.Collect(ch)
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
