package compilecost

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/traffic"
	"github.com/ovtoolkit/ovrun/ladder"
)

// serveCfg is a served load on caps with a 0.1 s decode step (10 tok/s,
// the prompt at the same rate), compile times by capacity and the given
// requests.
func serveCfg(caps []int, compile map[int]float64, reqs ...traffic.Request) ServeConfig {
	return ServeConfig{Ladder: caps, MaxSeqs: 4, Queue: QueueUnbounded, Arrivals: reqs,
		CompileS:        func(c int) float64 { return compile[c] },
		DecodeStepS:     func(int) float64 { return 0.1 },
		KVBytesPerToken: 100}
}

func simulate(t *testing.T, cfg ServeConfig) ServeResult {
	t.Helper()
	res, err := SimulateServe(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func near9(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// checks compares named figures of a result with hand-computed ones.
func checks(t *testing.T, res ServeResult, want map[string]float64) {
	t.Helper()
	got := map[string]float64{
		"makespan": res.MakespanS, "ttft_p50": res.TTFTP50S, "ttft_p99": res.TTFTP99S,
		"boundary_waits": float64(res.BoundaryWaits), "boundary_wait_s": res.BoundaryWaitS,
		"admission_waits": float64(res.AdmissionWaits), "admission_wait_s": res.AdmissionWaitS,
		"compile_s": res.CompileS, "compiles": float64(res.Compiles), "tokens": float64(res.Tokens),
		"deadline": float64(res.Launches[ladder.ReasonDeadline]), "admission": float64(res.Launches[ladder.ReasonAdmission]),
		"boundary": float64(res.Launches[ladder.ReasonBoundary]), "peak_kv": float64(res.PeakKVReservedBytes),
		"refused": float64(res.Refused), "releases": float64(res.RungReleases), "peak_seqs": float64(res.PeakSeqs),
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Fatalf("no figure %q", k)
		}
		if !near9(g, w) {
			t.Errorf("%s = %.6g, want %.6g", k, g, w)
		}
	}
}

// TestServeOneRequest follows one request of a 1-token prompt and 21
// answer tokens (the prompt's and 20 decode steps, input positions 1..20)
// over rungs 16 and 32, a step 0.1 s: the prompt ends at 0.1 s, step i at
// 0.1 + 0.1i. The rate is known after 8 steps (t 0.9, next position 9),
// when 7 steps (0.7 s) are left before position 16 needs rung 32.
func TestServeOneRequest(t *testing.T) {
	one := traffic.Request{Prompt: 1, Answer: 21}
	t.Run("deadline missed", func(t *testing.T) {
		// A 2 s compile is due at once (0.7 <= 2 x 1.25): launched at 0.9,
		// ready at 2.9; position 16 is reached at 1.6 (step 15 ends), so the
		// sequence waits 1.3 s and its last 5 steps end at 3.4.
		res := simulate(t, serveCfg([]int{16, 32}, map[int]float64{32: 2}, one))
		checks(t, res, map[string]float64{"makespan": 3.4, "ttft_p50": 0.1, "boundary_waits": 1, "boundary_wait_s": 1.3,
			"deadline": 1, "boundary": 0, "compile_s": 2, "tokens": 21, "peak_kv": 3200})
		if r := res.Rungs[1]; !near9(r.ReadyS, 2.9) || r.BoundaryWaits != 1 {
			t.Errorf("rung 32: %+v", r)
		}
	})
	t.Run("deadline met", func(t *testing.T) {
		// A 0.5 s compile is due when 0.625 s are left: after step 9
		// (0.6 s left) at 1.0, ready at 1.5, before the boundary at 1.6.
		res := simulate(t, serveCfg([]int{16, 32}, map[int]float64{32: 0.5}, one))
		checks(t, res, map[string]float64{"makespan": 2.1, "boundary_waits": 0, "deadline": 1, "compile_s": 0.5})
		if r := res.Rungs[1]; !near9(r.ReadyS, 1.5) {
			t.Errorf("rung 32 ready at %v, want 1.5", r.ReadyS)
		}
	})
	t.Run("boundary before the rate is known", func(t *testing.T) {
		// A 10-token prompt (1 s) leaves 6 steps on rung 16, fewer than
		// ladder.RateSteps: no deadline, so position 16 launches rung 32 at
		// 1.6 and waits its whole 2 s compile; 5 steps follow.
		res := simulate(t, serveCfg([]int{16, 32}, map[int]float64{32: 2}, traffic.Request{Prompt: 10, Answer: 12}))
		checks(t, res, map[string]float64{"makespan": 4.1, "ttft_p50": 1, "boundary_waits": 1, "boundary_wait_s": 2, "boundary": 1, "deadline": 0})
	})
	t.Run("intermediate rungs launch with a due one", func(t *testing.T) {
		// After step 8 rung 32 (0.1 s) is not due with 0.7 s left, rung 64
		// (5 s, queued behind 0.1 s) is with 2.3 s left: both launch at 0.9,
		// 64 ready at 6.0; position 32 is reached at 3.2 (2.8 s wait) and 28
		// steps follow.
		res := simulate(t, serveCfg([]int{16, 32, 64}, map[int]float64{32: 0.1, 64: 5}, traffic.Request{Prompt: 1, Answer: 60}))
		checks(t, res, map[string]float64{"makespan": 8.8, "deadline": 2, "boundary_waits": 1, "boundary_wait_s": 2.8, "compiles": 2})
	})
	t.Run("solo pace once decoding stops", func(t *testing.T) {
		// Launched at 0.9 as above, the compile runs at its under-decode
		// pace (2 s) while the sequence decodes, 0.7 s or 35% of it, then
		// at its solo pace (1 s) for the rest while the sequence waits:
		// ready at 2.25, a 0.65 s wait.
		cfg := serveCfg([]int{16, 32}, map[int]float64{32: 2}, one)
		cfg.CompileSoloS = func(int) float64 { return 1 }
		checks(t, simulate(t, cfg), map[string]float64{"makespan": 2.75, "boundary_wait_s": 0.65, "compile_s": 1.35})
	})
}

// TestServeAdmissionWait: a 20-token prompt starts on rung 32, which is
// compiled for it (2 s) while it waits without a slot; its prompt takes
// 2 s more, then one decode step.
func TestServeAdmissionWait(t *testing.T) {
	cfg := serveCfg([]int{16, 32}, map[int]float64{32: 2}, traffic.Request{Prompt: 20, Answer: 2})
	checks(t, simulate(t, cfg), map[string]float64{"admission": 1, "admission_waits": 1, "admission_wait_s": 2,
		"ttft_p50": 4, "makespan": 4.1, "boundary_waits": 0, "peak_kv": 3200})
}

// TestServeLateJoiners: a request arriving after another has compiled the
// rungs compiles nothing and waits for nothing; one arriving while the
// only slot is taken waits for it; two decoding at once share the cores.
func TestServeLateJoiners(t *testing.T) {
	t.Run("rungs already compiled", func(t *testing.T) {
		cfg := serveCfg([]int{16, 32}, map[int]float64{32: 0.5}, traffic.Request{Prompt: 1, Answer: 21}, traffic.Request{AtS: 5, Prompt: 1, Answer: 21})
		checks(t, simulate(t, cfg), map[string]float64{"makespan": 7.1, "deadline": 1, "compiles": 1, "boundary_waits": 0, "ttft_p99": 0.1})
	})
	t.Run("waits for the slot", func(t *testing.T) {
		// The first ends at 1.1; the second, arrived at 0.5, starts then.
		cfg := serveCfg([]int{64}, nil, traffic.Request{Prompt: 1, Answer: 11}, traffic.Request{AtS: 0.5, Prompt: 1, Answer: 11})
		cfg.MaxSeqs = 1
		checks(t, simulate(t, cfg), map[string]float64{"makespan": 2.2, "ttft_p50": 0.7, "peak_seqs": 1, "peak_kv": 6400})
	})
	for _, tc := range []struct {
		parallel, makespan, ttft float64
	}{{1, 2.2, 0.2}, {2, 1.1, 0.1}} {
		cfg := serveCfg([]int{64}, nil, traffic.Request{Prompt: 1, Answer: 11}, traffic.Request{Prompt: 1, Answer: 11})
		cfg.Parallel = tc.parallel
		checks(t, simulate(t, cfg), map[string]float64{"makespan": tc.makespan, "ttft_p99": tc.ttft, "peak_seqs": 2, "peak_kv": 12800})
	}
}

// TestServeQueueRefuses: with one slot and no queue, requests sent at
// once beyond the first are refused, as the server's 429.
func TestServeQueueRefuses(t *testing.T) {
	r := traffic.Request{Prompt: 1, Answer: 4}
	cfg := serveCfg([]int{64}, nil, r, r, r)
	cfg.MaxSeqs, cfg.Queue = 1, 0
	res := simulate(t, cfg)
	checks(t, res, map[string]float64{"refused": 2, "tokens": 4})
	if res.Answered != 1 || res.Requests != 3 {
		t.Errorf("answered %d of %d, want 1 of 3", res.Answered, res.Requests)
	}
}

// TestServeRungIdle: rung 32, last used at 2.1 s, is freed at the first
// check (every 0.25 s) a second later; a request at 10 s launches it
// again by deadline.
func TestServeRungIdle(t *testing.T) {
	cfg := serveCfg([]int{16, 32}, map[int]float64{32: 0.5}, traffic.Request{Prompt: 1, Answer: 21}, traffic.Request{AtS: 10, Prompt: 1, Answer: 21})
	cfg.RungIdleS = 1
	res := simulate(t, cfg)
	checks(t, res, map[string]float64{"releases": 1, "deadline": 2, "compiles": 2, "boundary_waits": 0, "makespan": 12.1})
	cfg.RungIdleS = 20
	checks(t, simulate(t, cfg), map[string]float64{"releases": 0, "deadline": 1})
}

// TestServeDeterministic: the same seed draws the same load and predicts
// the same outcome; another seed another load.
func TestServeDeterministic(t *testing.T) {
	cfg := serveCfg([]int{128, 256, 512}, map[int]float64{256: 2, 512: 3})
	cfg.Arrivals = nil
	cfg.Traffic = traffic.Mix{Rate: 2, Requests: 40, Prompt: []int{16, 100, 200}, Answer: []int{32, 200, 300}, Seed: 7}
	cfg.DecodeStepS = func(int) float64 { return 0.01 }
	a, b := simulate(t, cfg), simulate(t, cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs differ:\n%+v\n%+v", a, b)
	}
	if a.Answered != 40 || a.Tokens == 0 || a.Compiles == 0 || a.TTFTP99S < a.TTFTP50S {
		t.Errorf("implausible result %+v", a)
	}
	cfg.Traffic.Seed = 8
	if c := simulate(t, cfg); c.Tokens == a.Tokens && c.MakespanS == a.MakespanS {
		t.Errorf("seeds 7 and 8 predict the same load: %d tokens in %.3f s", c.Tokens, c.MakespanS)
	}
}

func TestServeConfigErrors(t *testing.T) {
	good := func() ServeConfig {
		c := serveCfg([]int{16, 32}, map[int]float64{32: 1})
		c.Arrivals = nil
		c.Traffic = traffic.Mix{Requests: 2, Prompt: []int{4}, Answer: []int{8}}
		return c
	}
	if _, err := SimulateServe(good()); err != nil {
		t.Fatalf("the base config: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*ServeConfig)
		want   string
	}{
		{"empty ladder", func(c *ServeConfig) { c.Ladder = nil }, "ladder"},
		{"no slots", func(c *ServeConfig) { c.MaxSeqs = 0 }, "max seqs 0"},
		{"negative queue", func(c *ServeConfig) { c.Queue = -2 }, "queue -2"},
		{"NaN rate", func(c *ServeConfig) { c.Traffic.Rate = math.NaN() }, "rate NaN"},
		{"negative rate", func(c *ServeConfig) { c.Traffic.Rate = -1 }, "rate -1"},
		{"no requests", func(c *ServeConfig) { c.Traffic.Requests = 0 }, "requests 0"},
		{"empty prompt mix", func(c *ServeConfig) { c.Traffic.Prompt = nil }, "prompt lengths: 0 given"},
		{"zero answer", func(c *ServeConfig) { c.Traffic.Answer = []int{0} }, "answer length 0"},
		{"too long", func(c *ServeConfig) { c.Traffic.Answer = []int{8, 29} }, "need 33 tokens; the largest rung holds 32"},
		{"too much work", func(c *ServeConfig) {
			c.Ladder = []int{1 << 20}
			c.Traffic.Requests = 1000
			c.Traffic.Answer = []int{1 << 19}
		}, "decode steps"},
		{"NaN compile", func(c *ServeConfig) { c.CompileS = func(int) float64 { return math.NaN() } }, "compile time NaN"},
		{"negative solo", func(c *ServeConfig) { c.CompileSoloS = func(int) float64 { return -1 } }, "solo compile time -1"},
		{"zero step", func(c *ServeConfig) { c.DecodeStepS = func(int) float64 { return 0 } }, "decode step time 0"},
		{"infinite prefill", func(c *ServeConfig) { c.PrefillTokensPerS = math.Inf(1) }, "prefill rate +Inf"},
		{"tiny parallel", func(c *ServeConfig) { c.Parallel = 0.05 }, "parallel 0.05"},
		{"negative KV", func(c *ServeConfig) { c.KVBytesPerToken = -1 }, "KV bytes per token -1"},
		{"NaN idle", func(c *ServeConfig) { c.RungIdleS = math.NaN() }, "rung idle NaN"},
		{"arrivals backwards", func(c *ServeConfig) {
			c.Arrivals = []traffic.Request{{AtS: 2, Prompt: 1, Answer: 1}, {AtS: 1, Prompt: 1, Answer: 1}}
		}, "arrival 1 at 1 s"},
		{"arrival too long", func(c *ServeConfig) { c.Arrivals = []traffic.Request{{Prompt: 30, Answer: 3}} }, "arrival 0: a prompt of 30 tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.change(&c)
			_, err := SimulateServe(c)
			if !errors.Is(err, ErrInvalidServeConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one wrapping ErrInvalidServeConfig and saying %q", err, tc.want)
			}
		})
	}
}
