package compilecost

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
)

// base is the hand-computed scenario: ladder 100/200/400, a 50-token prompt
// and 300 decoded tokens, so steps 0-49 run on 100, 50-149 on 200 and
// 150-299 on 400 (decode windows of 5, 10 and 15 s at 0.1 s a step).
// Every compile takes 10 s, prefill 2 s, a migrate 1 s, and a token's KV
// is 1000 bytes.
func base(policy string) SimConfig {
	return SimConfig{
		Ladder:          []int{100, 200, 400},
		PromptTokens:    50,
		DecodeTokens:    300,
		Policy:          policy,
		CompileS:        func(int) float64 { return 10 },
		DecodeStepS:     func(int) float64 { return 0.1 },
		PrefillS:        2,
		MigrateS:        func(int, int, int) float64 { return 1 },
		KVBytesPerToken: 1000,
	}
}

// stepLiveTokenS is Σ over the 300 steps of 0.1 s × tokens held after the
// step (51..350): 0.1 × 300 × 200.5.
const stepLiveTokenS = 0.1 * 300 * 200.5

type wantRung struct {
	capacity                 int
	compileStart, compileEnd float64
	foreground, ready        bool
	wait, migrate            float64
	migrateBytes             int64
	first, last              int
	decodeStart, decodeEnd   float64
}

type wantSim struct {
	fg, critical, decode, wait, migrate, background, overlapped float64
	reservedAvg, liveAvg                                        float64
	reservedPeak                                                int64
	rungs                                                       []wantRung
}

func TestSimulatePolicies(t *testing.T) {
	tests := []struct {
		name string
		cfg  SimConfig
		want wantSim
	}{
		{
			// Compile 400 [0,10], prefill [10,12], 300 steps [12,42], all at 400.
			name: "direct", cfg: base(PolicyDirect),
			want: wantSim{
				fg: 10, critical: 42, decode: 30,
				reservedAvg: 400e3, reservedPeak: 400e3, liveAvg: stepLiveTokenS / 30 * 1000,
				rungs: []wantRung{{400, 0, 10, true, true, 0, 0, 0, 0, 299, 12, 42}},
			},
		},
		{
			// Three compiles [0,30], prefill [30,32]; 100 decodes [32,37],
			// repack [37,38], 200 [38,48], repack [48,49], 400 [49,64].
			// One max buffer throughout.
			name: "pyramid", cfg: base(PolicyPyramid),
			want: wantSim{
				fg: 30, critical: 64, decode: 30, migrate: 2,
				reservedAvg: 400e3, reservedPeak: 400e3,
				liveAvg: (stepLiveTokenS + 1*100 + 1*200) / 32 * 1000,
				rungs: []wantRung{
					{100, 0, 10, true, true, 0, 0, 0, 0, 49, 32, 37},
					{200, 10, 20, true, true, 0, 1, 100e3, 50, 149, 38, 48},
					{400, 20, 30, true, true, 0, 1, 200e3, 150, 299, 49, 64},
				},
			},
		},
		{
			// Same timeline as pyramid; KV sized to the rung, both buffers
			// during a copy: 100k×5 + 300k×1 + 200k×10 + 600k×1 + 400k×15 over 32 s.
			name: "grow-eager", cfg: base(PolicyGrowEager),
			want: wantSim{
				fg: 30, critical: 64, decode: 30, migrate: 2,
				reservedAvg:  (100e3*5 + 300e3*1 + 200e3*10 + 600e3*1 + 400e3*15) / 32,
				reservedPeak: 600e3,
				liveAvg:      (stepLiveTokenS + 1*100 + 1*200) / 32 * 1000,
				rungs: []wantRung{
					{100, 0, 10, true, true, 0, 0, 0, 0, 49, 32, 37},
					{200, 10, 20, true, true, 0, 1, 100e3, 50, 149, 38, 48},
					{400, 20, 30, true, true, 0, 1, 200e3, 150, 299, 49, 64},
				},
			},
		},
		{
			// 100 [0,10] in the foreground; 200 compiles [10,20] while prefill
			// [10,12] and 100's window [12,17] run: the boundary at 17 waits
			// 3 s. Bind 200 at 20, migrate [20,21], 400 compiles [20,30]
			// while 200 decodes [21,31]: ready. Migrate [31,32], 400 [32,47].
			// Overlap: [12,17] + [21,30] = 14 s.
			name: "grow-one-ahead", cfg: base(PolicyGrowOneAhead),
			want: wantSim{
				fg: 10, critical: 47, decode: 30, wait: 3, migrate: 2, background: 20, overlapped: 14,
				reservedAvg:  (100e3*5 + 100e3*3 + 300e3*1 + 200e3*10 + 600e3*1 + 400e3*15) / 35,
				reservedPeak: 600e3,
				liveAvg:      (stepLiveTokenS + 3*100 + 1*100 + 1*200) / 35 * 1000,
				rungs: []wantRung{
					{100, 0, 10, true, true, 0, 0, 0, 0, 49, 12, 17},
					{200, 10, 20, false, false, 3, 1, 100e3, 50, 149, 21, 31},
					{400, 20, 30, false, true, 0, 1, 200e3, 150, 299, 32, 47},
				},
			},
		},
		{
			// Every boundary compiles: 200 [17,27], migrate [27,28], decode
			// [28,38]; 400 [38,48], migrate [48,49], decode [49,64].
			name: "lazy", cfg: base(PolicyLazy),
			want: wantSim{
				fg: 10, critical: 64, decode: 30, wait: 20, migrate: 2,
				reservedAvg:  (100e3*5 + 100e3*10 + 300e3*1 + 200e3*10 + 200e3*10 + 600e3*1 + 400e3*15) / 52,
				reservedPeak: 600e3,
				liveAvg:      (stepLiveTokenS + 10*100 + 1*100 + 10*200 + 1*200) / 52 * 1000,
				rungs: []wantRung{
					{100, 0, 10, true, true, 0, 0, 0, 0, 49, 12, 17},
					{200, 17, 27, true, false, 10, 1, 100e3, 50, 149, 28, 38},
					{400, 38, 48, true, false, 10, 1, 200e3, 150, 299, 49, 64},
				},
			},
		},
		{
			// As one-ahead without migrates: wait 3 at 17, 200 decodes
			// [20,30] while 400 compiles [20,30] (ready exactly on time),
			// 400 [30,45]. Overlap [12,17] + [20,30] = 15 s. No double peak.
			name: "grow-remap", cfg: base(PolicyGrowRemap),
			want: wantSim{
				fg: 10, critical: 45, decode: 30, wait: 3, background: 20, overlapped: 15,
				reservedAvg:  (100e3*5 + 100e3*3 + 200e3*10 + 400e3*15) / 33,
				reservedPeak: 400e3,
				liveAvg:      (stepLiveTokenS + 3*100) / 33 * 1000,
				rungs: []wantRung{
					{100, 0, 10, true, true, 0, 0, 0, 0, 49, 12, 17},
					{200, 10, 20, false, false, 3, 0, 0, 50, 149, 20, 30},
					{400, 20, 30, false, true, 0, 0, 0, 150, 299, 30, 45},
				},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkSim(t, Simulate(tc.cfg), tc.want)
		})
	}
}

const simTol = 1e-9

func checkSim(t *testing.T, got SimResult, want wantSim) {
	t.Helper()
	if got.Error != "" {
		t.Fatalf("Simulate error: %s", got.Error)
	}
	totals := []struct {
		name      string
		got, want float64
	}{
		{"ForegroundCompileS", got.ForegroundCompileS, want.fg},
		{"CriticalPathS", got.CriticalPathS, want.critical},
		{"DecodeS", got.DecodeS, want.decode},
		{"BoundaryWaitS", got.BoundaryWaitS, want.wait},
		{"MigrateS", got.MigrateS, want.migrate},
		{"BackgroundCompileS", got.BackgroundCompileS, want.background},
		{"OverlappedS", got.OverlappedS, want.overlapped},
		{"KVReservedAvgBytes", got.KVReservedAvgBytes, want.reservedAvg},
		{"KVLiveAvgBytes", got.KVLiveAvgBytes, want.liveAvg},
	}
	for _, f := range totals {
		if !near(f.got, f.want, simTol) {
			t.Errorf("%s = %.12g, want %.12g", f.name, f.got, f.want)
		}
	}
	if got.KVReservedPeakBytes != want.reservedPeak {
		t.Errorf("KVReservedPeakBytes = %d, want %d", got.KVReservedPeakBytes, want.reservedPeak)
	}
	if want.rungs == nil {
		return
	}
	if len(got.Rungs) != len(want.rungs) {
		t.Fatalf("%d rungs, want %d: %+v", len(got.Rungs), len(want.rungs), got.Rungs)
	}
	for i, w := range want.rungs {
		g := got.Rungs[i]
		ok := g.Capacity == w.capacity && g.Foreground == w.foreground && g.ReadyAtBoundary == w.ready &&
			g.MigrateBytes == w.migrateBytes && g.FirstStep == w.first && g.LastStep == w.last
		for _, pair := range [][2]float64{
			{g.CompileStartS, w.compileStart}, {g.CompileEndS, w.compileEnd}, {g.WaitS, w.wait},
			{g.MigrateS, w.migrate}, {g.DecodeStartS, w.decodeStart}, {g.DecodeEndS, w.decodeEnd},
		} {
			ok = ok && near(pair[0], pair[1], simTol)
		}
		if !ok {
			t.Errorf("rung %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

// TestSimulateTwoAhead: 200 compiles in 2 s but 400 takes 15 s, longer
// than 200's window (1 s migrate + 10 s decode), so one-ahead waits 4 s.
// Fixed two-ahead launches 400 when 100 is bound, right after 200's
// compile ([12,27]); the runtime's rule (automatic) launches it after 8
// steps of 100 ([12.8,27.8]), when 15 s > 100 slots x 0.1 s; either way the
// boundary at 28 finds it ready.
func TestSimulateTwoAhead(t *testing.T) {
	cfg := base(PolicyGrowOneAhead)
	cfg.CompileS = func(c int) float64 { return map[int]float64{100: 10, 200: 2, 400: 15}[c] }
	reserved := func(wait, total float64) float64 {
		return (100e3*5 + 300e3*1 + 200e3*10 + 200e3*wait + 600e3*1 + 400e3*15) / total
	}
	// One ahead: 200 [10,12]; 100 decodes [12,17]; migrate [17,18]; 400
	// compiles [17,32] while 200 decodes [18,28]; wait 4; migrate [32,33];
	// 400 decodes [33,48]. Overlap [12,12]+[18,28] = 10.
	oneAhead := wantSim{
		fg: 10, critical: 48, decode: 30, wait: 4, migrate: 2, background: 17, overlapped: 10,
		reservedAvg: reserved(4, 36), reservedPeak: 600e3,
		liveAvg: (stepLiveTokenS + 100 + 4*200 + 200) / 36 * 1000,
		rungs: []wantRung{
			{100, 0, 10, true, true, 0, 0, 0, 0, 49, 12, 17},
			{200, 10, 12, false, true, 0, 1, 100e3, 50, 149, 18, 28},
			{400, 17, 32, false, false, 4, 1, 200e3, 150, 299, 33, 48},
		},
	}
	// Two ahead: 400 compiles [12,27]; 200 decodes [18,28]; no wait;
	// migrate [28,29]; 400 decodes [29,44]. Overlap [12,17]+[18,27] = 14.
	twoAhead := wantSim{
		fg: 10, critical: 44, decode: 30, migrate: 2, background: 17, overlapped: 14,
		reservedAvg: reserved(0, 32), reservedPeak: 600e3,
		liveAvg: (stepLiveTokenS + 100 + 200) / 32 * 1000,
		rungs: []wantRung{
			{100, 0, 10, true, true, 0, 0, 0, 0, 49, 12, 17},
			{200, 10, 12, false, true, 0, 1, 100e3, 50, 149, 18, 28},
			{400, 12, 27, false, true, 0, 1, 200e3, 150, 299, 29, 44},
		},
	}
	// The rule: 400 launches after 8 steps of 100, [12.8,27.8]; overlap
	// [12.8,17]+[18,27.8] = 14 as before.
	ruleTwoAhead := twoAhead
	ruleTwoAhead.rungs = slices.Clone(twoAhead.rungs)
	ruleTwoAhead.rungs[2].compileStart, ruleTwoAhead.rungs[2].compileEnd = 12.8, 27.8
	tests := []struct {
		name      string
		lookahead int
		want      wantSim
		wantL400  int
		noteHas   string
	}{
		{name: "fixed one ahead waits", lookahead: 1, want: oneAhead, wantL400: 1, noteHas: "rung 400: not ready at boundary; waited 4.00 s"},
		{name: "automatic goes two ahead", lookahead: 0, want: ruleTwoAhead, wantL400: 2, noteHas: "rung 400: one-ahead deadline misses by 4.00 s; launching two ahead"},
		{name: "fixed two ahead", lookahead: 2, want: twoAhead, wantL400: 2},
		{name: "fixed three ahead is capped by the ladder", lookahead: 3, want: twoAhead, wantL400: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			c.Lookahead = tc.lookahead
			got := Simulate(c)
			checkSim(t, got, tc.want)
			if len(got.Rungs) == 3 {
				if l := got.Rungs[2].Lookahead; l != tc.wantL400 {
					t.Errorf("rung 400 lookahead = %d, want %d", l, tc.wantL400)
				}
				d := got.Rungs[2].Deadline
				if d == nil || d.Met || !near(d.SlackS, -4, simTol) || !near(d.DecodeS, 11, simTol) || d.CompileS != 15 {
					t.Errorf("rung 400 deadline = %+v, want 15 s compile in an 11 s window", d)
				}
			}
			if tc.noteHas != "" && !strings.Contains(strings.Join(got.Notes, "\n"), tc.noteHas) {
				t.Errorf("notes %q lack %q", got.Notes, tc.noteHas)
			}
		})
	}
}

// TestSimulateBackgroundSlowdown doubles decode step time while a compile
// runs: 100 decodes 40 slowed steps [12,20] and 10 more by 21; 200 decodes 45
// slowed steps [22,31] and 55 more by 36.5; 400 decodes [37.5,52.5].
func TestSimulateBackgroundSlowdown(t *testing.T) {
	cfg := base(PolicyGrowOneAhead)
	cfg.BackgroundSlowdown = 2
	checkSim(t, Simulate(cfg), wantSim{
		fg: 10, critical: 52.5, decode: 9 + 14.5 + 15, migrate: 2, background: 20, overlapped: 8 + 9,
		reservedAvg:  (100e3*9 + 300e3*1 + 200e3*14.5 + 600e3*1 + 400e3*15) / 40.5,
		reservedPeak: 600e3,
		liveAvg: (0.2*sumTokens(51, 90) + 0.1*sumTokens(91, 100) + 100 +
			0.2*sumTokens(101, 145) + 0.1*sumTokens(146, 200) + 200 + 0.1*sumTokens(201, 350)) / 40.5 * 1000,
		rungs: []wantRung{
			{100, 0, 10, true, true, 0, 0, 0, 0, 49, 12, 21},
			{200, 10, 20, false, true, 0, 1, 100e3, 50, 149, 22, 36.5},
			{400, 21, 31, false, true, 0, 1, 200e3, 150, 299, 37.5, 52.5},
		},
	})
}

// sumTokens returns a + (a+1) + ... + b.
func sumTokens(a, b int) float64 { return float64((a + b) * (b - a + 1) / 2) }

func TestSimulateStops(t *testing.T) {
	tests := []struct {
		name         string
		policy       string
		prompt, dec  int
		wantSteps    int
		wantReason   string
		wantRungs    []int
		wantLastStep []int
		wantCritical float64
	}{
		{name: "largest rung fills", policy: PolicyGrowOneAhead, prompt: 50, dec: 1000,
			wantSteps: 350, wantReason: "capacity", wantRungs: []int{100, 200, 400}, wantLastStep: []int{49, 149, 349},
			wantCritical: 47 + 50*0.1},
		{name: "short decode compiles only reached rungs", policy: PolicyGrowOneAhead, prompt: 50, dec: 100,
			wantSteps: 100, wantReason: "length", wantRungs: []int{100, 200}, wantLastStep: []int{49, 99},
			wantCritical: 31 - 5},
		{name: "eager compiles the whole ladder", policy: PolicyGrowEager, prompt: 50, dec: 100,
			wantSteps: 100, wantReason: "length", wantRungs: []int{100, 200, 400}, wantLastStep: []int{49, 99, -1},
			wantCritical: 30 + 2 + 5 + 1 + 5},
		{name: "no decode tokens ends at prefill", policy: PolicyGrowOneAhead, prompt: 50, dec: 0,
			wantSteps: 0, wantReason: "length", wantRungs: []int{100}, wantLastStep: []int{-1},
			wantCritical: 12},
		{name: "prompt of capacity-1 starts on the smallest rung", policy: PolicyGrowOneAhead, prompt: 99, dec: 2,
			wantSteps: 2, wantReason: "length", wantRungs: []int{100, 200}, wantLastStep: []int{0, 1},
			// 100 [0,10]; 200 compiles [10,20]; step 0 [12,12.1]; wait to 20; migrate; step 1.
			wantCritical: 21.1},
		{name: "prompt of capacity starts on the next rung", policy: PolicyGrowOneAhead, prompt: 100, dec: 300,
			wantSteps: 300, wantReason: "length", wantRungs: []int{200, 400}, wantLastStep: []int{99, 299},
			// 200 [0,10], prefill to 12, decode [12,22]; 400 ready at 20; migrate [22,23]; decode [23,43].
			wantCritical: 43},
		{name: "direct decodes to the largest capacity", policy: PolicyDirect, prompt: 50, dec: 1000,
			wantSteps: 350, wantReason: "capacity", wantRungs: []int{400}, wantLastStep: []int{349},
			wantCritical: 12 + 35},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base(tc.policy)
			cfg.PromptTokens, cfg.DecodeTokens = tc.prompt, tc.dec
			got := Simulate(cfg)
			if got.Error != "" {
				t.Fatal(got.Error)
			}
			if got.Steps != tc.wantSteps || got.FinishReason != tc.wantReason {
				t.Errorf("steps %d reason %q, want %d %q", got.Steps, got.FinishReason, tc.wantSteps, tc.wantReason)
			}
			if len(got.Rungs) != len(tc.wantRungs) {
				t.Fatalf("rungs %+v, want capacities %v", got.Rungs, tc.wantRungs)
			}
			for i, r := range got.Rungs {
				if r.Capacity != tc.wantRungs[i] || r.LastStep != tc.wantLastStep[i] {
					t.Errorf("rung %d = capacity %d last step %d, want %d %d", i, r.Capacity, r.LastStep, tc.wantRungs[i], tc.wantLastStep[i])
				}
			}
			if !near(got.CriticalPathS, tc.wantCritical, simTol) {
				t.Errorf("critical path %v, want %v", got.CriticalPathS, tc.wantCritical)
			}
		})
	}
}

func TestSimulateNoDecodeAverages(t *testing.T) {
	cfg := base(PolicyGrowEager)
	cfg.DecodeTokens = 0
	got := Simulate(cfg)
	if got.KVReservedAvgBytes != 100e3 || got.KVLiveAvgBytes != 50e3 || got.KVReservedPeakBytes != 100e3 {
		t.Errorf("averages with no decode: reserved %v live %v peak %d", got.KVReservedAvgBytes, got.KVLiveAvgBytes, got.KVReservedPeakBytes)
	}
}

// TestSimulateInvariants checks, over policies and cost shapes, that the
// foreground timeline adds up and that overlap never exceeds background work.
func TestSimulateInvariants(t *testing.T) {
	costs := []struct {
		name    string
		compile func(int) float64
		step    func(int) float64
	}{
		{"constant", func(int) float64 { return 10 }, func(int) float64 { return 0.1 }},
		{"growing", func(c int) float64 { return 1 + 0.05*float64(c) }, func(c int) float64 { return 0.01 + 1e-4*float64(c) }},
		{"free compiles", func(int) float64 { return 0 }, func(int) float64 { return 0.05 }},
	}
	for _, policy := range Policies() {
		for _, c := range costs {
			for _, slow := range []float64{0, 1.3} {
				cfg := base(policy)
				cfg.Ladder = []int{64, 128, 256, 512, 1024}
				cfg.PromptTokens, cfg.DecodeTokens = 40, 900
				cfg.CompileS, cfg.DecodeStepS, cfg.BackgroundSlowdown = c.compile, c.step, slow
				cfg.MigrateS = func(from, to, live int) float64 { return 1e-3 * float64(live) }
				got := Simulate(cfg)
				if got.Error != "" {
					t.Fatalf("%s/%s: %s", policy, c.name, got.Error)
				}
				sum := got.ForegroundCompileS + got.PrefillS + got.DecodeS + got.BoundaryWaitS + got.MigrateS
				if !near(got.CriticalPathS, sum, 1e-9) {
					t.Errorf("%s/%s/%v: critical path %v != fg+prefill+decode+wait+migrate %v", policy, c.name, slow, got.CriticalPathS, sum)
				}
				if got.OverlappedS > got.BackgroundCompileS+1e-9 {
					t.Errorf("%s/%s: overlapped %v > background %v", policy, c.name, got.OverlappedS, got.BackgroundCompileS)
				}
				if got.KVLiveAvgBytes > got.KVReservedAvgBytes+1e-6 || float64(got.KVReservedPeakBytes) < got.KVReservedAvgBytes-1e-6 {
					t.Errorf("%s/%s: live avg %v, reserved avg %v, peak %d out of order", policy, c.name, got.KVLiveAvgBytes, got.KVReservedAvgBytes, got.KVReservedPeakBytes)
				}
				if got.Steps != 900 {
					t.Errorf("%s/%s: %d steps", policy, c.name, got.Steps)
				}
			}
		}
	}
}

func TestSimulateInvalid(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *SimConfig)
		wantMsg string
	}{
		{name: "unknown policy", mutate: func(c *SimConfig) { c.Policy = "eager" }, wantMsg: `unknown policy "eager"`},
		{name: "empty ladder", mutate: func(c *SimConfig) { c.Ladder = nil }, wantMsg: "empty"},
		{name: "descending ladder", mutate: func(c *SimConfig) { c.Ladder = []int{200, 100} }, wantMsg: "strictly ascend"},
		{name: "no prompt", mutate: func(c *SimConfig) { c.PromptTokens = 0 }, wantMsg: "prompt tokens 0"},
		{name: "prompt fills the largest rung", mutate: func(c *SimConfig) { c.PromptTokens = 400 }, wantMsg: "no room"},
		{name: "negative decode", mutate: func(c *SimConfig) { c.DecodeTokens = -1 }, wantMsg: "decode tokens -1"},
		{name: "nil compile cost", mutate: func(c *SimConfig) { c.CompileS = nil }, wantMsg: "required"},
		{name: "negative compile cost", mutate: func(c *SimConfig) { c.CompileS = func(int) float64 { return -1 } }, wantMsg: "compile time -1 for capacity 100"},
		{name: "NaN step cost", mutate: func(c *SimConfig) { c.DecodeStepS = func(int) float64 { return math.NaN() } }, wantMsg: "decode step time NaN"},
		{name: "negative prefill", mutate: func(c *SimConfig) { c.PrefillS = -2 }, wantMsg: "prefill"},
		{name: "fractional slowdown", mutate: func(c *SimConfig) { c.BackgroundSlowdown = 0.05 }, wantMsg: "slowdown"},
		{name: "negative lookahead", mutate: func(c *SimConfig) { c.Lookahead = -1 }, wantMsg: "lookahead"},
		{name: "negative KV size", mutate: func(c *SimConfig) { c.KVBytesPerToken = -8 }, wantMsg: "KV bytes"},
		{name: "negative migrate", mutate: func(c *SimConfig) { c.MigrateS = func(int, int, int) float64 { return -1 } }, wantMsg: "migrate time -1 from 100 to 200"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base(PolicyGrowOneAhead)
			tc.mutate(&cfg)
			got := Simulate(cfg)
			if !strings.Contains(got.Error, tc.wantMsg) {
				t.Fatalf("Error = %q, want mention of %q", got.Error, tc.wantMsg)
			}
			if got.Rungs != nil || got.CriticalPathS != 0 {
				t.Errorf("invalid config produced a timeline: %+v", got)
			}
			if _, err := Deadlines(cfg); err == nil {
				t.Errorf("Deadlines accepted the config")
			}
		})
	}
}

func TestSimulateNilMigrateIsFree(t *testing.T) {
	cfg := base(PolicyGrowEager)
	cfg.MigrateS = nil
	got := Simulate(cfg)
	// 30 s of compiles, 2 s prefill, 30 s decode; the peak still counts
	// the instant both buffers exist.
	if !near(got.CriticalPathS, 62, simTol) || got.MigrateS != 0 || got.KVReservedPeakBytes != 600e3 {
		t.Errorf("critical %v migrate %v peak %d", got.CriticalPathS, got.MigrateS, got.KVReservedPeakBytes)
	}
}

func TestDeadlines(t *testing.T) {
	tests := []struct {
		name   string
		policy string
		want   []Deadline
	}{
		{name: "one-ahead: prefill+5 s for 200, migrate+10 s for 400", policy: PolicyGrowOneAhead, want: []Deadline{
			{Capacity: 200, CompileS: 10, DecodeS: 7, SlackS: -3, Met: false},
			{Capacity: 400, CompileS: 10, DecodeS: 11, SlackS: 1, Met: true},
		}},
		{name: "remap has no migrate lead-in", policy: PolicyGrowRemap, want: []Deadline{
			{Capacity: 200, CompileS: 10, DecodeS: 7, SlackS: -3, Met: false},
			{Capacity: 400, CompileS: 10, DecodeS: 10, SlackS: 0, Met: true},
		}},
		{name: "direct has no successors", policy: PolicyDirect, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Deadlines(base(tc.policy))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i, w := range tc.want {
				g := got[i]
				if g.Capacity != w.Capacity || g.Met != w.Met || !near(g.CompileS, w.CompileS, simTol) ||
					!near(g.DecodeS, w.DecodeS, simTol) || !near(g.SlackS, w.SlackS, simTol) {
					t.Errorf("deadline %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func TestSimResultJSON(t *testing.T) {
	b, err := json.Marshal(Simulate(base(PolicyGrowOneAhead)))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Contains(s, "NaN") || strings.Contains(s, "Inf") {
		t.Errorf("non-finite number in %s", s)
	}
	for _, key := range []string{"policy", "ladder", "prompt_tokens", "decode_tokens", "foreground_compile_s", "critical_path_s",
		"decode_s", "boundary_wait_s", "successor_compile_overlapped_s", "kv_reserved_avg_bytes", "kv_reserved_peak_bytes",
		"kv_live_avg_bytes", "rungs", "compile_start_s", "compile_end_s", "foreground", "ready_at_boundary", "wait_s",
		"migrate_s", "migrate_bytes", "first_step", "last_step", "tokens_per_s", "finish_reason", "notes"} {
		if !strings.Contains(s, `"`+key+`"`) {
			t.Errorf("JSON lacks %q", key)
		}
	}
}

// TestSimulateReuseGraphs: with reused graphs only the first rung compiles
// (grow-eager: no boundary waits after it), and after a shared first rung
// the first decode graph too; pyramid's up-front compiles shrink alike.
func TestSimulateReuseGraphs(t *testing.T) {
	reuse := func(policy, prefill string) SimConfig {
		c := base(policy)
		c.ReuseGraphs, c.Prefill = true, prefill
		return c
	}
	compiles := func(r SimResult) (n int) {
		for _, g := range r.Rungs {
			if g.CompileS > 0 {
				n++
			}
		}
		return n
	}
	for _, tc := range []struct {
		cfg          SimConfig
		compiles     int
		fg, critical float64
	}{
		// Compile 100 [0,10], prefill [10,12], 300 steps and two 1 s migrates [12,44]: 200 and 400 reuse it.
		{reuse(PolicyGrowEager, PrefillGraph), 1, 10, 44},
		{reuse(PolicyPyramid, PrefillGraph), 1, 10, 44},
		// The shared first rung (the prompt in its chunks), then the decode graph of 200 in the background.
		{reuse(PolicyGrowOneAhead, PrefillShared), 1, 10, 0},
	} {
		r := Simulate(tc.cfg)
		if r.Error != "" {
			t.Fatalf("%s %s: %s", tc.cfg.Policy, tc.cfg.Prefill, r.Error)
		}
		if n := compiles(r); n != tc.compiles {
			t.Errorf("%s %s: %d rungs compile, want %d", tc.cfg.Policy, tc.cfg.Prefill, n, tc.compiles)
		}
		if tc.critical > 0 && (math.Abs(r.ForegroundCompileS-tc.fg) > 1e-9 || math.Abs(r.CriticalPathS-tc.critical) > 1e-9 || r.BoundaryWaitS != 0) {
			t.Errorf("%s %s: foreground %.2f, critical %.2f, wait %.2f; want %.2f, %.2f, 0", tc.cfg.Policy, tc.cfg.Prefill,
				r.ForegroundCompileS, r.CriticalPathS, r.BoundaryWaitS, tc.fg, tc.critical)
		}
	}
	auto := base(PolicyGrowOneAhead)
	auto.ReuseGraphs, auto.Prefill, auto.SharedGraphs, auto.SharedPenalty = true, PrefillAuto, true, 0.01
	if r := Simulate(auto); r.PrefillUsed != PrefillShared || compiles(r) != 2 || r.Rungs[len(r.Rungs)-1].CompileS != 0 {
		t.Errorf("auto, shared first rung: prefill %s, %d compiles, last rung %.2f s; want shared, 2 (it and the decode graph), 0", r.PrefillUsed, compiles(r), r.Rungs[len(r.Rungs)-1].CompileS)
	}
}
