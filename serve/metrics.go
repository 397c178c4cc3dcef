package serve

import "github.com/prometheus/client_golang/prometheus"

// metrics are the server's own Prometheus series; the engine adds its KV
// and compile series when it is a prometheus.Collector.
type metrics struct {
	requests     *prometheus.CounterVec
	tokens       *prometheus.CounterVec
	queueSeconds prometheus.Histogram
	ttft         prometheus.Histogram
	tpot         prometheus.Histogram
	active       prometheus.Gauge
	queued       prometheus.Gauge
	// Admission that knows the ladder (engine.Awaiter).
	rungWaiting  prometheus.Gauge
	rungWait     prometheus.Histogram
	rungExpected prometheus.Histogram
	rungRefused  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovrun_requests_total",
			Help: "Requests by endpoint and HTTP status (client_closed: the client went away)."}, []string{"endpoint", "code"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovrun_tokens_total",
			Help: "Prompt and completion tokens processed."}, []string{"kind"}),
		queueSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ovrun_queue_seconds",
			Help: "Time from arrival to a free sequence slot.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ovrun_time_to_first_token_seconds",
			Help: "Time from arrival to the first generated token.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}),
		tpot: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ovrun_time_per_output_token_seconds",
			Help: "Time between consecutive generated tokens.", Buckets: prometheus.ExponentialBuckets(0.002, 2, 12)}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovrun_active_sequences",
			Help: "Sequences decoding now."}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovrun_queued_requests",
			Help: "Requests waiting for a sequence slot."}),
		rungWaiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovrun_rung_waiting_requests",
			Help: "Requests waiting in the queue for the rung their prompt starts on to compile."}),
		rungWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ovrun_rung_wait_seconds",
			Help: "Time a request waited in the queue for the rung its prompt starts on.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}),
		rungExpected: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ovrun_rung_wait_expected_seconds",
			Help: "The wait predicted (--compile-cost) when a request began waiting for the rung its prompt starts on.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}),
		rungRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "ovrun_rung_wait_refused_total",
			Help: "Requests answered 503 with a Retry-After because the rung their prompt needs would be ready only after their deadline."}),
	}
	reg.MustRegister(m.requests, m.tokens, m.queueSeconds, m.ttft, m.tpot, m.active, m.queued,
		m.rungWaiting, m.rungWait, m.rungExpected, m.rungRefused)
	return m
}
