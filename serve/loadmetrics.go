package serve

import (
	"bufio"
	"context"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxMetricsBytes bounds a /metrics page the load test reads.
const maxMetricsBytes = 8 << 20

// scrape reads the server's /metrics into series -> value, a series named
// as the text format writes it (`ovrun_compile_seconds_total{kind="decode"}`).
func scrape(ctx context.Context, c *http.Client, base, key string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	authorize(req, key)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, statusError{resp.StatusCode}
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, maxMetricsBytes))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil || math.IsNaN(v) {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// labelled returns the series of metric name by the value of its label,
// e.g. labelled(m, "ovrun_compile_launches_total", "reason").
func labelled(m map[string]float64, name, label string) map[string]float64 {
	out := map[string]float64{}
	prefix := name + "{"
	for series, v := range m {
		rest, ok := strings.CutPrefix(series, prefix)
		if !ok {
			continue
		}
		for _, kv := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
			if k, val, ok := strings.Cut(kv, "="); ok && k == label {
				out[strings.Trim(val, `"`)] += v
			}
		}
	}
	return out
}

// fromMetrics fills the result's server figures from /metrics read before
// and after the test: the change of each counter and histogram.
func (r *LoadResult) fromMetrics(before, after map[string]float64) {
	r.Metrics = true
	delta := func(series string) float64 { return after[series] - before[series] }
	r.BoundaryWaits = int(delta("ovrun_boundary_wait_seconds_count"))
	r.BoundaryWaitS = delta("ovrun_boundary_wait_seconds_sum")
	r.AdmissionWaits = int(delta("ovrun_rung_wait_seconds_count"))
	r.AdmissionWaitS = delta("ovrun_rung_wait_seconds_sum")
	if n := delta("ovrun_time_to_first_token_seconds_count"); n > 0 {
		r.ServerTTFTMeanS = delta("ovrun_time_to_first_token_seconds_sum") / n
	}
	compiles := labelled(after, "ovrun_compiles_total", "kind")
	for k, v := range labelled(before, "ovrun_compiles_total", "kind") {
		compiles[k] -= v
	}
	for _, v := range compiles {
		r.Compiles += int(v)
	}
	secs, was := labelled(after, "ovrun_compile_seconds_total", "kind"), labelled(before, "ovrun_compile_seconds_total", "kind")
	for k, v := range secs {
		if d := v - was[k]; d > 0 {
			if r.CompileSByKind == nil {
				r.CompileSByKind = map[string]float64{}
			}
			r.CompileSByKind[k] = d
			r.CompileS += d
		}
	}
	now, then := labelled(after, "ovrun_compile_launches_total", "reason"), labelled(before, "ovrun_compile_launches_total", "reason")
	for k, v := range now {
		if r.Launches == nil {
			r.Launches = map[string]int{}
		}
		r.Launches[k] = int(v - then[k])
	}
}

// pollKV samples the server's KV gauges every 100 ms for their peaks.
func pollKV(ctx context.Context, c *http.Client, base, key string, res *LoadResult, mu *sync.Mutex) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			m, err := scrape(ctx, c, base, key)
			if err != nil {
				continue
			}
			mu.Lock()
			res.PeakKVReserved = max(res.PeakKVReserved, m["ovrun_kv_reserved_bytes"])
			res.PeakKVLive = max(res.PeakKVLive, m["ovrun_kv_live_bytes"])
			mu.Unlock()
		}
	}()
	return func() { cancel(); <-done }
}
