package main

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/runtime"
)

// The mission's core link, through the binaries: ovtrace compile measures a
// profile, ovrun run --compile-cost budgets every successor with it, and a
// profile far beyond the decode windows makes the runtime launch two ahead
// without changing a single prediction. bench passes the profile through.
// Every rung compiles its own graph here (--graph-per-rung), as on the NPU;
// where one paged graph serves every rung, a rung that reuses it is
// budgeted at 0 and never overruns.
func TestCompileCostEndToEnd(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	dir := t.TempDir()
	ovtrace := buildOvtrace(t, dir)
	ladder := "32,64,128,256"
	cost := filepath.Join(dir, "cost.json")
	if out, err := exec.Command(ovtrace, "compile", "--model", tiny, "--ladder", ladder, "--reps", "1",
		"--precision", "f32", "--json", cost, "--quiet").CombinedOutput(); err != nil {
		t.Fatalf("ovtrace compile: %v\n%s", err, out)
	}

	run := func(name string, extra ...string) *runtime.Summary {
		t.Helper()
		js := filepath.Join(dir, name+".json")
		args := append([]string{"run", "--model", tiny, "--ladder", ladder, "--policy", "grow-one-ahead",
			"--prompt-tokens", "8", "--decode-tokens", "240", "--precision", "f32", "--json", js, "-q"}, extra...)
		if _, stderr, code := ovrun(t, nil, args...); code != 0 {
			t.Fatalf("ovrun %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
		return readSummary(t, js)
	}
	plain := run("plain")
	if len(plain.Budgets) != 0 {
		t.Errorf("a run without --compile-cost has budgets: %+v", plain.Budgets)
	}

	measured := run("measured", "--compile-cost", cost, "--graph-per-rung")
	var caps []int
	for _, b := range measured.Budgets {
		caps = append(caps, b.Capacity)
		if b.PredictedS <= 0 || b.ActualS <= 0 || b.WindowS == 0 || !b.Measured {
			t.Errorf("budget %+v: want predicted, actual and window filled from a measured rung", b)
		}
		if want := max(0, b.PredictedS-b.WindowS); math.Abs(b.MissedS-want) > 1e-9 {
			t.Errorf("budget %+v: deadline missed by %v, want predicted - window = %v", b, b.MissedS, want)
		}
	}
	slices.Sort(caps)
	if !slices.Equal(caps, []int{64, 128, 256}) {
		t.Errorf("budgets for capacities %v, want every successor 64, 128, 256", caps)
	}
	if !slices.Equal(measured.Predictions, plain.Predictions) {
		t.Errorf("--compile-cost changed the predictions")
	}

	// Costs 1000x the measured ones cannot fit any decode window.
	prof, err := compilecost.Load(cost)
	if err != nil {
		t.Fatal(err)
	}
	// Every kind is scaled: which one a budget reads (first or successor
	// compile) depends on what the process compiled before.
	scale := func(v []float64) {
		for j := range v {
			v[j] *= 1000
		}
	}
	for i := range prof.Rungs {
		r := &prof.Rungs[i]
		r.MedianS *= 1000
		r.SuccessorMedianS *= 1000
		scale(r.CompileS)
		scale(r.SuccessorS)
		scale(r.ImportS)
		for k := range r.Prefill {
			p := &r.Prefill[k]
			p.FirstMedianS *= 1000
			p.SuccessorMedianS *= 1000
			scale(p.FirstS)
			scale(p.SuccessorS)
		}
	}
	prof.Fit = compilecost.Fit{}
	prof.Fits = nil
	slow := filepath.Join(dir, "slow.json")
	if err := prof.Save(slow); err != nil {
		t.Fatal(err)
	}
	scaled := run("scaled", "--compile-cost", slow, "--graph-per-rung")
	twoAhead := 0
	for _, b := range scaled.Budgets {
		if b.Lookahead == 2 {
			twoAhead++
		}
		// A budget opened before any compile finished takes the profile
		// at its word and predicts a miss; one opened after has learnt
		// that the profile is about 1000x too slow.
		switch {
		case b.Correction == 1 && b.MissedS <= 0:
			t.Errorf("budget %+v: a 1000x profile must predict a missed deadline", b)
		case b.Correction != 1 && b.Correction > 0.01:
			t.Errorf("budget %+v: after compiles 1000x faster than the profile, a correction of %v", b, b.Correction)
		}
	}
	if twoAhead == 0 {
		t.Errorf("no rung launched two ahead with a 1000x profile: %+v", scaled.Budgets)
	}
	if !slices.ContainsFunc(scaled.Notes, func(n string) bool { return strings.Contains(n, "two ahead") }) {
		t.Errorf("notes %q do not say a rung was launched two ahead", scaled.Notes)
	}
	if !slices.Equal(scaled.Predictions, plain.Predictions) {
		t.Errorf("launching two ahead changed the predictions")
	}

	// One paged graph for every rung: a rung that reuses it has nothing to
	// compile, so its budget is 0 and it cannot overrun.
	reused := run("reused", "--compile-cost", slow)
	for _, b := range reused.Budgets {
		if b.Reused && (b.PredictedS != 0 || b.OverrunS != 0 || b.MissedS != 0) {
			t.Errorf("budget %+v: a reused rung is predicted at 0 and never overruns", b)
		}
	}
	if !slices.ContainsFunc(reused.Budgets, func(b runtime.Budget) bool { return b.Reused }) {
		t.Errorf("budgets %+v: no rung reused the paged graph", reused.Budgets)
	}
	if !slices.Equal(reused.Predictions, plain.Predictions) {
		t.Errorf("reusing the graph changed the predictions")
	}

	// bench hands the profile to every run.
	out := filepath.Join(dir, "bench")
	if _, stderr, code := ovrun(t, nil, "bench", "--model", tiny, "--ladder", ladder, "--arms", "grow-eager,grow-one-ahead",
		"--pairs", "2", "--allow-small", "--prompt-tokens", "8", "--decode-tokens", "120", "--precision", "f32",
		"--compile-cost", slow, "--run-flag=--graph-per-rung", "--out", out, "-q"); code != 0 {
		t.Fatalf("ovrun bench: exit %d: %s", code, stderr)
	}
	runs, err := filepath.Glob(filepath.Join(out, "runs", "*grow-one-ahead.json"))
	if err != nil || len(runs) == 0 {
		t.Fatalf("no grow-one-ahead runs in %s (%v)", out, err)
	}
	for _, r := range runs {
		s := readSummary(t, r)
		if len(s.Budgets) == 0 || !slices.ContainsFunc(s.Budgets, func(b runtime.Budget) bool { return b.Lookahead == 2 }) {
			t.Errorf("%s: budgets %+v, want the profile's budgets with a two-ahead launch", r, s.Budgets)
		}
	}
}

// buildOvtrace builds the ovtrace binary into dir.
func buildOvtrace(t *testing.T, dir string) string {
	t.Helper()
	ovtrace := filepath.Join(dir, "ovtrace")
	if out, err := exec.Command("go", "build", "-o", ovtrace, "../ovtrace").CombinedOutput(); err != nil {
		t.Fatalf("build ovtrace: %v\n%s", err, out)
	}
	return ovtrace
}

func readSummary(t *testing.T, path string) *runtime.Summary {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s runtime.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &s
}

func TestHugePagesMismatch(t *testing.T) {
	on, off := true, false
	for _, c := range []struct {
		profile *bool
		run     bool
		want    string
	}{
		{nil, true, ""}, // an older profile says nothing
		{&on, true, ""},
		{&off, false, ""},
		{&off, true, "measured with huge pages off and this run has them on"},
		{&on, false, "measured with huge pages on and this run has them off"},
	} {
		got := hugePagesMismatch("cost.json", &compilecost.Profile{HugePages: c.profile}, c.run)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("profile %v, run %v: %q, want %q", c.profile, c.run, got, c.want)
		}
	}
}

// TestCompileCostUnderDecode: ovtrace compile --under-decode measures every
// rung but the first as the runtime compiles it in the background (beside
// the rung below decoding), on static graphs (--attention static, the NPU's
// form); ovrun run --compile-cost budgets with those figures and corrects
// them online: a budget opened after earlier compiles finished is the
// profile's figure times the median of their actual/profile ratios, and
// every compiled budget reports its error.
func TestCompileCostUnderDecode(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	dir := t.TempDir()
	ovtrace := buildOvtrace(t, dir)
	ladder := "32,64,128,256,512"
	cost := filepath.Join(dir, "cost.json")
	if out, err := exec.Command(ovtrace, "compile", "--model", tiny, "--attention", "static", "--ladder", ladder, "--reps", "1",
		"--under-decode", "--prefill-chunk", "0", "--precision", "f32", "--json", cost, "--quiet").CombinedOutput(); err != nil {
		t.Fatalf("ovtrace compile: %v\n%s", err, out)
	}
	prof, err := compilecost.Load(cost)
	if err != nil {
		t.Fatal(err)
	}
	if prof.Attention != "static" {
		t.Fatalf("profile attention %q, want static", prof.Attention)
	}
	for _, r := range prof.Rungs {
		first := r.Capacity == 32
		if first != (len(r.UnderDecodeS) == 0) || first != (len(r.UnderDecodeTokensPerS) == 0) {
			t.Fatalf("rung %d: under_decode_s %v, tokens/s %v: want them for every rung but the first", r.Capacity, r.UnderDecodeS, r.UnderDecodeTokensPerS)
		}
		if !first && (r.UnderDecodeMedianS <= 0 || r.UnderDecodeTokensPerS[0] <= 0) {
			t.Fatalf("rung %d: under-decode median %v, decode %v tok/s", r.Capacity, r.UnderDecodeMedianS, r.UnderDecodeTokensPerS)
		}
	}
	if _, ok := prof.Fits[compilecost.UnderDecodeKind.String()]; !ok {
		t.Fatalf("fits %v: none for the under-decode kind", prof.Fits)
	}

	js := filepath.Join(dir, "run.json")
	if _, stderr, code := ovrun(t, nil, "run", "--model", tiny, "--attention", "static", "--graph-per-rung", "--ladder", ladder,
		"--prompt-tokens", "8", "--decode-tokens", "480", "--precision", "f32", "--compile-cost", cost, "--json", js, "-q"); code != 0 {
		t.Fatalf("ovrun run: exit %d: %s", code, stderr)
	}
	s := readSummary(t, js)
	if len(s.Budgets) != 4 {
		t.Fatalf("budgets %+v, want one per successor rung", s.Budgets)
	}
	corrected := 0
	for _, b := range s.Budgets {
		if b.Basis != compilecost.UnderDecodeKind.String() || b.ProfileS <= 0 || b.ActualS <= 0 {
			t.Fatalf("budget %+v: want the under-decode figure and an actual compile", b)
		}
		if want := b.ProfileS * b.Correction; math.Abs(b.PredictedS-want) > 1e-9 {
			t.Fatalf("budget %+v: predicted %v, want profile x correction %v", b, b.PredictedS, want)
		}
		if want := b.ActualS/b.PredictedS - 1; math.Abs(b.Error-want) > 1e-9 {
			t.Fatalf("budget %+v: error %v, want %v", b, b.Error, want)
		}
		if b.Correction != 1 {
			corrected++
		}
	}
	if corrected == 0 {
		t.Fatalf("budgets %+v: none corrected from the compiles before it", s.Budgets)
	}
	// The last rung launched once some below it had compiled: its
	// correction is the median ratio of those (a prefix in launch order).
	last := s.Budgets[len(s.Budgets)-1]
	var ratios []float64
	learnt := false
	for _, b := range s.Budgets[:len(s.Budgets)-1] {
		ratios = append(ratios, b.ActualS/b.ProfileS)
		learnt = learnt || math.Abs(last.Correction-compilecost.Median(ratios)) < 1e-9
	}
	if !learnt {
		t.Fatalf("last budget %+v: correction %v is the median of no prefix of %v", last, last.Correction, ratios)
	}

	// compile-once refuses an under-decode measurement it cannot make.
	out, err := exec.Command(ovtrace, "compile-once", "--model", tiny, "--capacity", "64", "--under-decode").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--after CAPACITY:1") || strings.Count(strings.TrimSpace(string(out)), "\n") > 0 {
		t.Fatalf("compile-once --under-decode without --after: %v\n%s", err, out)
	}
}

func TestAttentionMismatch(t *testing.T) {
	for _, c := range []struct {
		profile string
		run     []string
		want    string
	}{
		{"", []string{"paged"}, ""}, // an older profile says nothing
		{"static", []string{"static", "static"}, ""},
		{"static, bounded", []string{"static", "bounded"}, ""},
		{"static", []string{"paged"}, "measured static graphs and this run compiles paged ones"},
		{"paged", []string{"static", "static"}, "ovtrace compile --attention static"},
	} {
		got := attentionMismatch("cost.json", &compilecost.Profile{Attention: c.profile}, c.run)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("profile %q, run %v: %q, want %q", c.profile, c.run, got, c.want)
		}
	}
}

// TestServeCompileCost: ovrun serve --compile-cost budgets the shared
// ladder's background compiles by deadline (static graphs, a graph per
// rung, as on the NPU). A profile 40x too slow launches each rung as soon
// as the decode rate is measured, long before it is needed; one 40x too
// fast launches it a step or two before the boundary, so the request waits
// and /metrics counts the missed deadline. The greedy answer is the same
// with either profile and without one. With batching serve says that the
// batched engine compiles by its own rules.
func TestServeCompileCost(t *testing.T) {
	g := testenv.SmolLM2(t)
	dir := t.TempDir()
	profile := func(name string, s float64) string {
		var rungs []compilecost.Rung
		for _, c := range []int{64, 128, 256} {
			rungs = append(rungs, compilecost.Rung{Capacity: c, CompileS: []float64{s}, SuccessorS: []float64{s}, UnderDecodeS: []float64{s}})
		}
		return saveStaticProfile(t, filepath.Join(dir, name+".json"), rungs...)
	}
	// SmolLM2's static rungs compile in about 2 s here.
	slow, fast := profile("slow", 2*40), profile("fast", 2.0/40)
	if _, stderr, code := ovrun(t, nil, "serve", "--model", g, "--addr", "127.0.0.1:0", "--compile-cost", slow); code == 0 || !strings.Contains(stderr, "--batching off") {
		t.Fatalf("serve --compile-cost with batching: exit %d: %s", code, stderr)
	}
	type served struct {
		text    string
		metrics string
	}
	serveOnce := func(extra ...string) served {
		cmd, base, _ := startServe(t, nil, append([]string{"--model", g, "--precision", "f32", "--attention", "static", "--batching", "off",
			"--ladder", "64,128,256"}, extra...)...)
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		body := `{"prompt":"Once upon a time","max_tokens":200,"temperature":0}`
		resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(out.Choices) != 1 {
			t.Fatalf("completion: %d %v", resp.StatusCode, err)
		}
		resp, err = http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		m, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return served{out.Choices[0].Text, string(m)}
	}
	plain, early, late := serveOnce(), serveOnce("--compile-cost", slow), serveOnce("--compile-cost", fast)
	if early.text != plain.text || late.text != plain.text {
		t.Errorf("the greedy answer changed with the budgets:\nnone %q\nslow %q\nfast %q", plain.text, early.text, late.text)
	}
	figure := func(m, name string) float64 {
		re := regexp.MustCompile(`ovrun_compile_budget_seconds\{batch="0",capacity="128",figure="` + name + `"\} (\S+)`)
		v := re.FindStringSubmatch(m)
		if v == nil {
			t.Fatalf("no %s figure of rung 128 in /metrics:\n%s", name, grepLines(m, "ovrun_compile_"))
		}
		f, _ := strconv.ParseFloat(v[1], 64)
		return f
	}
	for _, name := range []string{"profile", "predicted"} {
		if v := figure(early.metrics, name); math.Abs(v-80) > 1e-6 {
			t.Errorf("rung 128's %s figure with the slow profile: %v, want 80", name, v)
		}
	}
	for _, want := range []string{
		`ovrun_compile_budget_seconds{batch="0",capacity="128",figure="actual"}`,
		`ovrun_compile_budget_error_ratio{batch="0",capacity="128"}`,
		`ovrun_compile_launches_total{reason="deadline"} 2`,
	} {
		if !strings.Contains(early.metrics, want) {
			t.Errorf("/metrics with the slow profile lacks %q", want)
		}
	}
	if !regexp.MustCompile(`ovrun_compile_budget_overruns_total\{kind="waited"\} [1-9]`).MatchString(late.metrics) {
		t.Errorf("/metrics with the fast profile counts no missed deadline:\n%s", grepLines(late.metrics, "ovrun_compile_"))
	}
	window := func(m string) float64 { return figure(m, "window") }
	t.Logf("slow profile:\n%s\nfast profile:\n%s", grepLines(early.metrics, "ovrun_compile_"), grepLines(late.metrics, "ovrun_compile_"))
	if we, wl := window(early.metrics), window(late.metrics); !(we > 5*wl) || we < 0.2 {
		t.Errorf("rung 128 launched %.3f s before it was needed with the slow profile, %.3f s with the fast one", we, wl)
	}
}

// grepLines keeps the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestServeAdmissionRetryAfter: a prompt that starts on a rung not
// compiled waits for it in the queue; where the profile says it will be
// ready only after the request's --timeout, the server answers 503 at once
// with that time as Retry-After, the compile goes on, and a later request
// gets the rung.
func TestServeAdmissionRetryAfter(t *testing.T) {
	g := testenv.SmolLM2(t)
	cost := saveStaticProfile(t, filepath.Join(t.TempDir(), "cost.json"),
		compilecost.Rung{Capacity: 64, CompileS: []float64{2}}, compilecost.Rung{Capacity: 256, CompileS: []float64{40}})
	_, base, _ := startServe(t, nil, "--model", g, "--precision", "f32", "--attention", "static", "--batching", "off",
		"--ladder", "64,256", "--compile-cost", cost, "--timeout", "20s")
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = strconv.Itoa(1000 + i)
	}
	body := `{"prompt":[` + strings.Join(ids, ",") + `],"max_tokens":4,"temperature":0}`
	post := func() (*http.Response, string) {
		resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	resp, msg := post()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "40" || !strings.Contains(msg, "expected in 40.0 s") {
		t.Fatalf("a prompt on rung 256 (40 s predicted, --timeout 20s): %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), msg)
	}
	// The compile (about 2 s in fact) went on: a request that retries
	// soon finds the rung compiled, or waits for it within its deadline.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, msg = post(); resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the compile: %d %s", resp.StatusCode, msg)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// saveStaticProfile writes a compile-cost profile of SmolLM2's static
// graphs with these rungs to path (Save validates it) and returns path.
func saveStaticProfile(t *testing.T, path string, rungs ...compilecost.Rung) string {
	t.Helper()
	prof := &compilecost.Profile{Model: "smollm2", Device: "CPU", Attention: "static", Rungs: rungs}
	if err := prof.Save(path); err != nil {
		t.Fatal(err)
	}
	return path
}
