package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/schema"
	"github.com/ovtoolkit/ovrun/runtime"
)

// fakeRunner writes a plausible run summary for every run it is asked for
// and records the run ids in order. failAt (1-based call number) makes that
// call fail like a non-zero exit; cancelAt makes it cancel the campaign's
// context, as Ctrl-C does, and return the context's error.
type fakeRunner struct {
	calls    []string
	failAt   int
	cancelAt int
	cancel   context.CancelFunc
	// cancelAfterAt interrupts run n after it wrote its complete summary
	// (Ctrl-C while the run process exports its trace or exits).
	cancelAfterAt int
}

var _ Runner = (*fakeRunner)(nil)

func (f *fakeRunner) Run(ctx context.Context, cfg *Config, spec RunSpec) error {
	f.calls = append(f.calls, spec.ID())
	n := len(f.calls)
	if n == f.cancelAt {
		f.cancel()
		return ctx.Err()
	}
	if n == f.failAt {
		return errors.New("exit status 1: ovrun: compile of rung 64 failed")
	}
	// Deterministic values: one-ahead saves a second of foreground compile.
	fg := 2.0 + 0.01*float64(spec.Pair)
	if spec.Arm != cfg.Control() {
		fg -= 1
	}
	arm, err := ParseArm(spec.Arm)
	if err != nil {
		return err
	}
	s := runtime.Summary{
		Policy: string(arm.Policy), PrefillMode: string(arm.Prefill), TTFTS: fg + 0.5, Model: cfg.Model, Ladder: cfg.Ladder, PromptTokens: cfg.PromptTokens, DecodeTokens: cfg.DecodeTokens,
		DecodedTokens: cfg.DecodeTokens, TeacherForced: cfg.TeacherForced, Seed: cfg.Seed, Precision: cfg.Precision,
		ForegroundCompileS: fg, CriticalPathS: fg + 1, DecodeS: 1, KVReservedPeakBytes: 1 << 20, PeakRSSBytes: 100 << 20,
		OpenVINOVersion: "fake", FinishReason: "length",
		Rungs: []runtime.RungSummary{{Capacity: cfg.Ladder[0], Foreground: true, FirstStep: 1, LastStep: 10}},
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := os.WriteFile(spec.JSONPath, b, 0o644); err != nil {
		return err
	}
	if n == f.cancelAfterAt {
		f.cancel()
		return ctx.Err()
	}
	return nil
}

func testConfig() *Config {
	return &Config{Model: "/models/tiny", Ladder: []int{32, 64, 128}, Arms: []string{"grow-eager", "grow-one-ahead"},
		Pairs: 6, PromptTokens: 8, DecodeTokens: 100, Seed: 1}
}

func planIDs(cfg *Config) []string {
	var ids []string
	for _, s := range Plan(cfg) {
		ids = append(ids, s.ID())
	}
	return ids
}

func readReport(t *testing.T, dir string) *Report {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

func TestCampaignComplete(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	f := &fakeRunner{}
	var events []Event
	rep, err := Run(context.Background(), cfg, Options{Dir: dir, Runner: f, Progress: func(e Event) { events = append(events, e) }})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.calls, planIDs(cfg)) {
		t.Errorf("runs %v, want the plan %v", f.calls, planIDs(cfg))
	}
	if rep.Partial || len(rep.Comparisons) != len(Endpoints) {
		t.Errorf("partial %v, %d comparisons", rep.Partial, len(rep.Comparisons))
	}
	if c := rep.comparison("grow-one-ahead", "foreground_compile_s"); c == nil || c.N != 6 || c.TreatmentWins != 6 || !near(c.PSignFlip, 0.03125) {
		t.Errorf("foreground compile comparison %+v", c)
	}
	if len(events) != 14 || events[0].Index != 1 || events[13].Total != 14 || !events[0].Warmup || events[2].Pair != 1 {
		t.Errorf("progress events %+v", events)
	}
	if events[0].MeanRun != 0 || events[5].MeanRun <= 0 {
		t.Errorf("ETA: first run %v, sixth %v", events[0].MeanRun, events[5].MeanRun)
	}
	for _, name := range []string{"campaign.json", "report.json", "report.md", PlotTimeline, PlotKV, PlotEndpoints} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, p := range []string{PlotTimeline, PlotKV, PlotEndpoints} {
		if !strings.Contains(string(md), "]("+p+")") {
			t.Errorf("report.md does not reference %s", p)
		}
	}
}

// A campaign interrupted after k runs keeps them; --resume runs only the rest.
func TestCampaignResumeAfterInterrupt(t *testing.T) {
	for _, k := range []int{0, 1, 2, 5, 13} {
		t.Run(fmt.Sprintf("after %d runs", k), func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			first := &fakeRunner{cancelAt: k + 1, cancel: cancel}
			_, err := Run(ctx, cfg, Options{Dir: dir, Runner: first})
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "--resume") {
				t.Fatalf("interrupted campaign returned %v", err)
			}
			r := readReport(t, dir)
			if !r.Partial || !strings.Contains(r.Status, "interrupted") {
				t.Errorf("partial report: partial %v status %q", r.Partial, r.Status)
			}
			if got := r.Runs[k].Error; got != "interrupted" {
				t.Errorf("run %d error %q, want interrupted", k+1, got)
			}

			// Without --resume the folder is refused.
			if _, err := Run(context.Background(), cfg, Options{Dir: dir, Runner: &fakeRunner{}}); !errors.Is(err, ErrCampaignExists) {
				t.Errorf("second run without --resume: %v, want ErrCampaignExists", err)
			}

			second := &fakeRunner{}
			rep, err := Run(context.Background(), cfg, Options{Dir: dir, Runner: second, Resume: true})
			if err != nil {
				t.Fatal(err)
			}
			if want := planIDs(cfg)[k:]; !slices.Equal(second.calls, want) {
				t.Errorf("resume ran %v, want only %v", second.calls, want)
			}
			reused := 0
			for _, rr := range rep.Runs {
				if rr.Reused {
					reused++
				}
			}
			if reused != k || rep.Partial {
				t.Errorf("reused %d (want %d), partial %v", reused, k, rep.Partial)
			}
		})
	}
}

func TestCampaignResumeRefusesAnotherCampaign(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	if _, err := Run(context.Background(), cfg, Options{Dir: dir, Runner: &fakeRunner{}}); err != nil {
		t.Fatal(err)
	}
	other := testConfig()
	other.Pairs, other.DecodeTokens = 8, 200
	f := &fakeRunner{}
	_, err := Run(context.Background(), other, Options{Dir: dir, Runner: f, Resume: true})
	if !errors.Is(err, ErrConfigChanged) || !strings.Contains(err.Error(), "pairs: 6 vs 8") || !strings.Contains(err.Error(), "decode-tokens: 100 vs 200") {
		t.Errorf("resume with another campaign: %v", err)
	}
	if len(f.calls) != 0 {
		t.Errorf("runs started: %v", f.calls)
	}
}

// Summaries that are incomplete (killed, interrupted, failed) or made by
// another arm are run again on resume.
func TestCampaignResumeRerunsIncompleteSummaries(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	if _, err := Run(context.Background(), cfg, Options{Dir: dir, Runner: &fakeRunner{}}); err != nil {
		t.Fatal(err)
	}
	ids := planIDs(cfg)
	path := func(id string) string { return filepath.Join(dir, "runs", id+".json") }
	os.WriteFile(path(ids[3]), []byte(`{"policy": "grow-`), 0o644) // cut short
	edit := func(id string, fn func(*runtime.Summary)) {
		b, _ := os.ReadFile(path(id))
		var s runtime.Summary
		json.Unmarshal(b, &s)
		fn(&s)
		b, _ = json.Marshal(s)
		os.WriteFile(path(id), b, 0o644)
	}
	edit(ids[5], func(s *runtime.Summary) { s.FinishReason = "interrupted" })
	edit(ids[7], func(s *runtime.Summary) { s.Policy = "lazy" })
	edit(ids[8], func(s *runtime.Summary) { s.Model = "/models/other" })
	edit(ids[9], func(s *runtime.Summary) { s.Error = "boom"; s.FinishReason = "error" })
	os.Remove(path(ids[11]))
	f := &fakeRunner{}
	if _, err := Run(context.Background(), cfg, Options{Dir: dir, Runner: f, Resume: true}); err != nil {
		t.Fatal(err)
	}
	if want := []string{ids[3], ids[5], ids[7], ids[8], ids[9], ids[11]}; !slices.Equal(f.calls, want) {
		t.Errorf("resume ran %v, want %v", f.calls, want)
	}
}

// --resume reads summaries without a schema (written before summaries
// carried one) and with this version's, and stops at one a newer ovrun
// wrote rather than run its slot again; report.json says its own schema
// first and every summary's.
func TestCampaignResumeChecksSchemas(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	if _, err := Run(context.Background(), cfg, Options{Dir: dir, Runner: &fakeRunner{}}); err != nil {
		t.Fatal(err)
	}
	ids := planIDs(cfg)
	path := func(id string) string { return filepath.Join(dir, "runs", id+".json") }
	setSchema := func(id, schema string) {
		b, _ := os.ReadFile(path(id))
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		m["schema"] = schema
		b, _ = json.Marshal(m)
		os.WriteFile(path(id), b, 0o644)
	}
	setSchema(ids[2], runtime.SummarySchema)
	f := &fakeRunner{}
	if _, err := Run(context.Background(), cfg, Options{Dir: dir, Runner: f, Resume: true}); err != nil || len(f.calls) != 0 {
		t.Fatalf("resume of a complete campaign: %v, ran %v", err, f.calls)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"schema\": \"" + ReportSchema + "\","; !strings.HasPrefix(string(b), want) {
		t.Errorf("report.json starts %.40q, want %q", b, want)
	}
	for _, rr := range readReport(t, dir).Runs {
		if rr.Summary == nil || rr.Summary.Schema != runtime.SummarySchema {
			t.Errorf("run %s in report.json: summary %v, want schema %s", rr.SummaryFile, rr.Summary, runtime.SummarySchema)
		}
	}

	setSchema(ids[4], "ovrun.run/2")
	_, err = Run(context.Background(), cfg, Options{Dir: dir, Runner: f, Resume: true})
	if !errors.Is(err, schema.ErrNewer) || !strings.Contains(err.Error(), ids[4]+".json: schema ovrun.run/2 is newer than this ovrun reads") {
		t.Errorf("resume over a newer summary: %v", err)
	}
	if len(f.calls) != 0 {
		t.Errorf("runs started: %v", f.calls)
	}
}

func TestCampaignStopsAtAFailedRun(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	f := &fakeRunner{failAt: 4}
	_, err := Run(context.Background(), cfg, Options{Dir: dir, Runner: f})
	if !errors.Is(err, ErrRunFailed) || !strings.Contains(err.Error(), "run 4/14 (01-2-grow-one-ahead) failed") ||
		!strings.Contains(err.Error(), "compile of rung 64 failed") || strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q", err)
	}
	if len(f.calls) != 4 {
		t.Errorf("%d runs after a failure at run 4", len(f.calls))
	}
	r := readReport(t, dir)
	if !r.Partial || !strings.Contains(r.Runs[3].Error, "compile of rung 64 failed") || r.Runs[4].Error != "not run" {
		t.Errorf("report: partial %v, run 4 %q, run 5 %q", r.Partial, r.Runs[3].Error, r.Runs[4].Error)
	}
	if len(r.Comparisons) != 0 {
		t.Errorf("%d comparisons without a complete pair", len(r.Comparisons))
	}
}

func TestCampaignKeepGoing(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	f := &fakeRunner{failAt: 4} // pair 1's treatment
	rep, err := Run(context.Background(), cfg, Options{Dir: dir, Runner: f, KeepGoing: true})
	if !errors.Is(err, ErrRunFailed) || !strings.Contains(err.Error(), "1 of 14 runs failed") {
		t.Errorf("error %v", err)
	}
	if len(f.calls) != 14 {
		t.Errorf("%d runs, want all 14", len(f.calls))
	}
	c := rep.comparison("grow-one-ahead", "critical_path_s")
	if !rep.Partial || c == nil || c.N != 5 || !slices.Equal(c.Pairs, []int{2, 3, 4, 5, 6}) {
		t.Errorf("partial %v, comparison %+v: want pairs 2-6", rep.Partial, c)
	}
}

// A run whose complete summary was written before the interrupt reached it
// is kept as finished, and --resume does not run it again.
func TestCampaignKeepsARunFinishedBeforeTheInterrupt(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := Run(ctx, cfg, Options{Dir: dir, Runner: &fakeRunner{cancelAfterAt: 2, cancel: cancel}})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "after run 2/") {
		t.Fatalf("interrupted campaign returned %v", err)
	}
	if r := readReport(t, dir); !r.Partial || r.Runs[1].Error != "" || r.Runs[1].Summary == nil {
		t.Errorf("run 2: error %q, summary kept %v", r.Runs[1].Error, r.Runs[1].Summary != nil)
	}
	second := &fakeRunner{}
	if _, err := Run(context.Background(), cfg, Options{Dir: dir, Runner: second, Resume: true}); err != nil {
		t.Fatal(err)
	}
	if want := planIDs(cfg)[2:]; !slices.Equal(second.calls, want) {
		t.Errorf("resume ran %v, want only %v", second.calls, want)
	}
}

// cacheRunner is a fakeRunner that records each run's cache folder and
// leaves a file in it, as a run exporting a rung would.
type cacheRunner struct {
	fakeRunner
	dirs []string
}

func (f *cacheRunner) Run(ctx context.Context, cfg *Config, spec RunSpec) error {
	f.dirs = append(f.dirs, spec.CacheDir)
	if spec.CacheDir != "" {
		if err := os.MkdirAll(spec.CacheDir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(spec.CacheDir, spec.ID()+".blob"), []byte("x"), 0o644); err != nil {
			return err
		}
	}
	return f.fakeRunner.Run(ctx, cfg, spec)
}

// A warm campaign gives every run the campaign's cache folder (the warm-up
// runs fill it and it stays); a cold one a fresh folder per run, removed
// after it; no --cache, none.
func TestCampaignCacheFolders(t *testing.T) {
	for _, mode := range []string{"", CacheCold, CacheWarm} {
		t.Run(orNone(mode), func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig()
			cfg.Cache = mode
			r := &cacheRunner{}
			if _, err := Run(context.Background(), cfg, Options{Dir: dir, Runner: r}); err != nil {
				t.Fatal(err)
			}
			for i, d := range r.dirs {
				sl := Plan(cfg)[i]
				switch mode {
				case "":
					if d != "" {
						t.Fatalf("run %s got cache %s without --cache", sl.ID(), d)
					}
				case CacheWarm:
					if d != filepath.Join(dir, CacheDirName) {
						t.Fatalf("run %s: cache %s, want the campaign's", sl.ID(), d)
					}
				case CacheCold:
					if d != filepath.Join(dir, "runs", sl.ID()+".cache") {
						t.Fatalf("run %s: cache %s, want its own", sl.ID(), d)
					}
					if _, err := os.Stat(d); err == nil {
						t.Fatalf("run %s: cold cache %s left behind", sl.ID(), d)
					}
				}
			}
			if mode == CacheWarm {
				blobs, _ := filepath.Glob(filepath.Join(dir, CacheDirName, "*.blob"))
				if len(blobs) != len(r.dirs) {
					t.Fatalf("warm cache holds %d files, want one per run (%d)", len(blobs), len(r.dirs))
				}
			}
			if got := strings.Join(cfg.RunArgs("lazy", "r.json", "/c"), " "); !strings.Contains(got, "--cache-dir /c") {
				t.Errorf("run args %q lack the cache folder", got)
			}
		})
	}
	cfg := testConfig()
	cfg.Cache = "tepid"
	if err := cfg.Validate(false); err == nil || !strings.Contains(err.Error(), "--cache") {
		t.Errorf("--cache tepid: %v", err)
	}
	cfg = testConfig()
	cfg.RunFlags = []string{"--cache-dir=/x"}
	if err := cfg.Validate(false); err == nil {
		t.Error("--run-flag=--cache-dir accepted: the bench sets it")
	}
}
