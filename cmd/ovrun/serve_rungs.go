package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ovtoolkit/ovrun/ladder"
	"github.com/ovtoolkit/ovrun/runtime"
)

// rungMetrics are the series of an engine's rungs that both engines of
// ovrun serve report: graphs compiled now and freed after --rung-idle, and
// with --compile-cost the budgets (per rung, or per static variant:
// capacity and batch), launches by reason and misses by kind.
type rungMetrics struct {
	rungsOf   func() (compiled, released int) // nil where the caller reports them (collectRungs)
	budgetsOf func() runtime.BudgetStats      // nil without --compile-cost

	rungs, releases, budget, budgetErr, launches, misses *prometheus.Desc
}

func newRungMetrics() *rungMetrics {
	return &rungMetrics{
		rungs: prometheus.NewDesc("ovrun_rungs",
			"Graphs of the ladder compiled now (rungs; static batched variants, a rung and batch size each).", nil, nil),
		releases: prometheus.NewDesc("ovrun_rung_releases_total",
			"Graphs freed after --rung-idle without a request.", nil, nil),
		budget: prometheus.NewDesc("ovrun_compile_budget_seconds",
			"Per graph with --compile-cost, its latest launch: the profile's figure, the prediction (profile x the correction learnt from earlier compiles), the window (time left before a sequence needed it, at launch) and the actual compile. batch is 0 for a sequential ladder's rung.", []string{"capacity", "batch", "figure"}, nil),
		budgetErr: prometheus.NewDesc("ovrun_compile_budget_error_ratio",
			"Per compiled graph with --compile-cost: actual / predicted - 1.", []string{"capacity", "batch"}, nil),
		launches: prometheus.NewDesc("ovrun_compile_launches_total",
			"Budgeted compiles by why they were launched: deadline (a sequence's time left fell to the predicted compile plus a margin), admission (a prompt needs the graph), boundary (a sequence reached it before any rule launched it), batch_size (a static batched rung is full), one_ahead or two_ahead (ovrun run's rules).", []string{"reason"}, nil),
		misses: prometheus.NewDesc("ovrun_compile_budget_overruns_total",
			"Budgeted compiles that went wrong, by kind: actual (took longer than predicted), missed (predicted at launch to exceed the time left), waited (a sequence reached the graph before it was ready: a deadline missed in fact).", []string{"kind"}, nil),
	}
}

func (m *rungMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.rungs, m.releases, m.budget, m.budgetErr, m.launches, m.misses} {
		ch <- d
	}
}

func (m *rungMetrics) Collect(ch chan<- prometheus.Metric) {
	if m.rungsOf != nil {
		compiled, released := m.rungsOf()
		m.collectRungs(ch, compiled, released)
	}
	if m.budgetsOf == nil {
		return
	}
	stats := m.budgetsOf()
	for _, b := range stats.Budgets {
		c, n := fmt.Sprint(b.Capacity), fmt.Sprint(b.Batch)
		gauge := func(v float64, figure string) {
			ch <- prometheus.MustNewConstMetric(m.budget, prometheus.GaugeValue, v, c, n, figure)
		}
		gauge(b.ProfileS, "profile")
		gauge(b.PredictedS, "predicted")
		gauge(b.WindowS, "window")
		if b.ActualS > 0 {
			gauge(b.ActualS, "actual")
			if b.PredictedS > 0 {
				ch <- prometheus.MustNewConstMetric(m.budgetErr, prometheus.GaugeValue, b.Error, c, n)
			}
		}
	}
	for _, kind := range []string{runtime.MissActual, runtime.MissPredicted, runtime.MissWaited} {
		ch <- prometheus.MustNewConstMetric(m.misses, prometheus.CounterValue, float64(stats.Misses[kind]), kind)
	}
	for _, reason := range ladder.LaunchReasons {
		ch <- prometheus.MustNewConstMetric(m.launches, prometheus.CounterValue, float64(stats.Launches[reason]), reason)
	}
}

// collectRungs reports the graphs compiled now and freed so far.
func (m *rungMetrics) collectRungs(ch chan<- prometheus.Metric, compiled, released int) {
	ch <- prometheus.MustNewConstMetric(m.rungs, prometheus.GaugeValue, float64(compiled))
	ch <- prometheus.MustNewConstMetric(m.releases, prometheus.CounterValue, float64(released))
}
