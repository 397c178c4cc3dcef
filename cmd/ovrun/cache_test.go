package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/runtime"
)

// cachedRun runs ovrun run with --cache-dir and returns its summary.
func cachedRun(t *testing.T, name string, args ...string) *runtime.Summary {
	t.Helper()
	out := filepath.Join(t.TempDir(), name+".json")
	args = append(append([]string{"run"}, args...), "--json", out, "--quiet")
	if _, stderr, code := ovrun(t, nil, args...); code != 0 {
		t.Fatalf("%s: exit %d: %s", name, code, stderr)
	}
	return readSummary(t, out)
}

// cacheEntries lists the cache through the binary.
func cacheEntries(t *testing.T, dir string) []cacheEntry {
	t.Helper()
	stdout, stderr, code := ovrun(t, nil, "cache", "ls", "--cache-dir", dir, "--json")
	if code != 0 {
		t.Fatalf("cache ls: exit %d: %s", code, stderr)
	}
	var es []cacheEntry
	if err := json.Unmarshal([]byte(stdout), &es); err != nil {
		t.Fatalf("cache ls --json: %v\n%s", err, stdout)
	}
	return es
}

// TestRungCacheOnSmolLM2: the real GGUF through the binary. The second run
// of a two-rung ladder (auto makes its first rung a shared graph for this
// prompt, the second a decode graph) imports both rungs and predicts the
// tokens of the first; a flipped byte in one blob and a truncated other blob are noticed,
// discarded with a note and compiled again, with the same tokens and exit 0.
func TestRungCacheOnSmolLM2(t *testing.T) {
	g := testenv.SmolLM2(t)
	cache := t.TempDir()
	// --graph-per-rung: an entry per rung (paged rungs would share one).
	args := []string{"--model", g, "--ladder", "64,128", "--policy", "grow-one-ahead", "--prompt-tokens", "24", "--decode-tokens", "64", "--cache-dir", cache, "--graph-per-rung"}
	cold := cachedRun(t, "cold", args...)
	for _, r := range cold.Rungs {
		if r.CompileSource != runtime.OriginCompiled || r.ExportS <= 0 {
			t.Errorf("cold run, rung %d: %s, export_s %.3f; want compiled and exported", r.Capacity, r.CompileSource, r.ExportS)
		}
	}
	warm := cachedRun(t, "warm", args...)
	for _, r := range warm.Rungs {
		if r.CompileSource != runtime.OriginImported || r.ImportS <= 0 {
			t.Errorf("warm run, rung %d: %s, import_s %.3f; want imported", r.Capacity, r.CompileSource, r.ImportS)
		}
	}
	if !slices.Equal(warm.Predictions, cold.Predictions) || len(cold.Predictions) != 65 {
		t.Fatalf("warm run predicts %v, the cold one %v", warm.Predictions, cold.Predictions)
	}

	es := cacheEntries(t, cache)
	if len(es) != 2 {
		t.Fatalf("%d cache entries, want 2", len(es))
	}
	for _, e := range es {
		blob := filepath.Join(cache, e.Key+".blob")
		b, err := os.ReadFile(blob)
		if err != nil {
			t.Fatal(err)
		}
		if e.Capacity == 64 {
			b[len(b)/2] ^= 0x01
		} else {
			b = b[:len(b)/3]
		}
		if err := os.WriteFile(blob, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	damaged := cachedRun(t, "damaged", args...)
	notes := strings.Join(damaged.Notes, "\n")
	for _, want := range []string{"graph shared-c64-t", "rung cache: discarded entry", "CRC-32C", "graph decode-c128: rung cache: discarded entry", "truncated"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes do not mention %q:\n%s", want, notes)
		}
	}
	for _, r := range damaged.Rungs {
		if r.CompileSource != runtime.OriginCompiled {
			t.Errorf("damaged run, rung %d: %s, want compiled", r.Capacity, r.CompileSource)
		}
	}
	if !slices.Equal(damaged.Predictions, cold.Predictions) {
		t.Fatalf("after discarding damaged entries the run predicts %v, want %v", damaged.Predictions, cold.Predictions)
	}
	if again := cachedRun(t, "repaired", args...); again.Rungs[0].CompileSource != runtime.OriginImported {
		t.Errorf("the entries compiled again were not stored: %s", again.Rungs[0].CompileSource)
	}
}

// TestRungCacheWithCompileWorkers: compile workers key and store the
// graphs they compile; a later run, in workers or in process, imports them
// (the keys agree), and a damaged entry a worker found is compiled again.
func TestRungCacheWithCompileWorkers(t *testing.T) {
	g := testenv.SmolLM2(t)
	cache := t.TempDir()
	args := []string{"--model", g, "--ladder", "64,128", "--policy", "grow-one-ahead", "--prompt-tokens", "24", "--decode-tokens", "64", "--cache-dir", cache, "--graph-per-rung"}
	worker := append(slices.Clone(args), "--compile-in", "worker")
	cold := cachedRun(t, "cold, workers", worker...)
	for _, r := range cold.Rungs {
		if r.CompileSource != runtime.OriginCompiled || r.ExportS <= 0 || r.ImportS <= 0 {
			t.Errorf("cold run, rung %d: %s, export_s %.3f, import_s %.3f; want compiled, exported by the worker and imported", r.Capacity, r.CompileSource, r.ExportS, r.ImportS)
		}
	}
	if es := cacheEntries(t, cache); len(es) != 2 {
		t.Fatalf("workers left %d cache entries, want 2", len(es))
	}
	for _, tc := range []struct {
		name string
		args []string
	}{{"warm, workers", worker}, {"warm, in process", args}} {
		warm := cachedRun(t, tc.name, tc.args...)
		for _, r := range warm.Rungs {
			if r.CompileSource != runtime.OriginImported {
				t.Errorf("%s run, rung %d: %s; want imported", tc.name, r.Capacity, r.CompileSource)
			}
		}
		if !slices.Equal(warm.Predictions, cold.Predictions) {
			t.Fatalf("%s run predicts %v, the cold one %v", tc.name, warm.Predictions, cold.Predictions)
		}
	}
	for _, e := range cacheEntries(t, cache) {
		if e.Capacity != 64 {
			continue
		}
		blob := filepath.Join(cache, e.Key+".blob")
		b, err := os.ReadFile(blob)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0x01
		if err := os.WriteFile(blob, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	damaged := cachedRun(t, "damaged, workers", worker...)
	if notes := strings.Join(damaged.Notes, "\n"); !strings.Contains(notes, "graph shared-c64-t") || !strings.Contains(notes, "compiling it again") {
		t.Errorf("notes do not say the damaged entry was compiled again:\n%s", notes)
	}
	if r := damaged.Rungs[0]; r.CompileSource != runtime.OriginCompiled || r.CompileAttempts != 1 {
		t.Errorf("damaged run, rung 64: %s after %d attempts; want compiled again in one attempt", r.CompileSource, r.CompileAttempts)
	}
	if !slices.Equal(damaged.Predictions, cold.Predictions) {
		t.Fatalf("after the damaged entry the run predicts %v, want %v", damaged.Predictions, cold.Predictions)
	}
}

// TestCacheCommands: --cache-max evicts the least recently used entries,
// and cache ls, prune and clear work through the binary, touching nothing
// but entries.
func TestCacheCommands(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	cache := t.TempDir()
	mine := filepath.Join(cache, "mine.txt")
	if err := os.WriteFile(mine, []byte("not an entry"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name, ladder string, extra ...string) *runtime.Summary {
		return cachedRun(t, name, append([]string{"--model", tiny, "--ladder", ladder, "--prompt-tokens", "4", "--decode-tokens", "2", "--prefill", "decode", "--cache-dir", cache, "--graph-per-rung"}, extra...)...)
	}
	run("a", "16")
	run("b", "32")
	es := cacheEntries(t, cache)
	if len(es) != 2 || es[0].Capacity != 32 || es[1].Capacity != 16 || es[0].Bytes <= 0 || es[0].Device != "CPU" || !filepath.IsAbs(es[0].Model) {
		t.Fatalf("entries %+v, want capacity 32 then 16 (most recent first), with sizes and the model's path", es)
	}
	// Room for two entries: a third evicts the least recently used (16).
	capBytes := es[0].Bytes + es[1].Bytes + es[1].Bytes/2
	s := run("c", "48", "--cache-max", formatBytes(capBytes))
	if notes := strings.Join(s.Notes, "\n"); !strings.Contains(notes, "evicted entry "+es[1].Key[:12]) {
		t.Errorf("notes do not mention the eviction of the capacity-16 entry:\n%s", notes)
	}
	es = cacheEntries(t, cache)
	if len(es) != 2 || es[0].Capacity != 48 || es[1].Capacity != 32 {
		t.Fatalf("after eviction: %+v, want capacities 48 and 32", es)
	}

	stdout, stderr, code := ovrun(t, nil, "cache", "ls", "--cache-dir", cache)
	if code != 0 || !strings.Contains(stdout, "decode-c48") || !strings.Contains(stdout, "2 entries") {
		t.Errorf("cache ls: exit %d, %s%s", code, stdout, stderr)
	}
	stdout, stderr, code = ovrun(t, nil, "cache", "prune", "--cache-dir", cache, "--max-size", formatBytes(es[0].Bytes))
	if code != 0 || !strings.Contains(stdout, "removed 1 entries") {
		t.Errorf("cache prune: exit %d, %s%s", code, stdout, stderr)
	}
	if es = cacheEntries(t, cache); len(es) != 1 || es[0].Capacity != 48 {
		t.Errorf("after prune: %+v, want the capacity-48 entry", es)
	}
	stdout, stderr, code = ovrun(t, nil, "cache", "clear", "--cache-dir", cache)
	if code != 0 || !strings.Contains(stdout, "removed 1 entries") {
		t.Errorf("cache clear: exit %d, %s%s", code, stdout, stderr)
	}
	if b, err := os.ReadFile(mine); err != nil || string(b) != "not an entry" {
		t.Errorf("clear touched a file that is not an entry: %v", err)
	}
	if es = cacheEntries(t, cache); len(es) != 0 {
		t.Errorf("after clear: %+v", es)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cache", "ls", "--cache-dir", filepath.Join(cache, "absent")}, "no such file"},
		{[]string{"cache", "ls", "--cache-dir", mine}, "not a folder"},
		{[]string{"cache", "prune", "--cache-dir", cache}, "give --max-size"},
		{[]string{"cache", "prune", "--cache-dir", cache, "--max-size", "lots"}, "--max-size"},
		{[]string{"cache", "prune", "--cache-dir", cache, "--older-than", "-3h"}, "--older-than"},
		{[]string{"run", "--model", tiny, "--prompt-tokens", "4", "--cache-dir", cache, "--cache-max", "8 apples"}, "--cache-max"},
		{[]string{"run", "--model", tiny, "--prompt-tokens", "4", "--ladder", "16", "--decode-tokens", "1", "--cache-dir", mine}, "rung cache: output folder " + mine + ": not a directory"},
	} {
		_, stderr, code := ovrun(t, nil, tc.args...)
		assertOneLineError(t, stderr, code, tc.want)
	}
}

func formatBytes(n int64) string { return strconv.FormatInt(n, 10) }

// TestBudgetsUseImportForCachedRungs: with a warm cache and a profile that
// measured imports, the runtime budgets the cached successor rung at its
// import, and says so.
func TestBudgetsUseImportForCachedRungs(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	dir := t.TempDir()
	cost := filepath.Join(dir, "cost.json")
	prof := compilecost.Profile{Model: "tiny", Device: "CPU", Rungs: []compilecost.Rung{
		{Capacity: 16, CompileS: []float64{2}, ImportS: []float64{0.125}},
		{Capacity: 32, CompileS: []float64{3}, ImportS: []float64{0.25}},
	}}
	if err := prof.Save(cost); err != nil {
		t.Fatal(err)
	}
	args := []string{"--model", tiny, "--ladder", "16,32", "--policy", "grow-one-ahead", "--prompt-tokens", "4", "--decode-tokens", "20",
		"--cache-dir", filepath.Join(dir, "cache"), "--compile-cost", cost}
	for i, want := range []struct {
		predicted float64
		imported  bool
	}{{3, false}, {0.25, true}} {
		s := cachedRun(t, fmt.Sprint("run", i), args...)
		if len(s.Budgets) != 1 || s.Budgets[0].Capacity != 32 || s.Budgets[0].PredictedS != want.predicted || s.Budgets[0].Imported != want.imported {
			t.Errorf("run %d: budgets %+v; want rung 32 predicted at %v s (imported %v)", i, s.Budgets, want.predicted, want.imported)
		}
	}
}

// TestConcurrentRunsShareACache: three processes filling one cache folder
// at once all finish with the same tokens, and leave whole entries that a
// fourth run imports.
func TestConcurrentRunsShareACache(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	cache := t.TempDir()
	args := []string{"--model", tiny, "--ladder", "16,32", "--policy", "grow-one-ahead", "--prompt-tokens", "4", "--decode-tokens", "20", "--cache-dir", cache}
	sums := make([]*runtime.Summary, 3)
	done := make(chan int)
	for i := range sums {
		go func() {
			defer func() { done <- i }()
			out := filepath.Join(t.TempDir(), "run.json")
			if _, stderr, code := ovrun(t, nil, append(append([]string{"run"}, args...), "--json", out, "--quiet")...); code != 0 {
				t.Errorf("run %d: exit %d: %s", i, code, stderr)
				return
			}
			sums[i] = readSummary(t, out)
		}()
	}
	for range sums {
		<-done
	}
	if t.Failed() {
		return
	}
	for i, s := range sums[1:] {
		if !slices.Equal(s.Predictions, sums[0].Predictions) {
			t.Errorf("run %d predicts %v, run 0 %v", i+1, s.Predictions, sums[0].Predictions)
		}
	}
	if es := cacheEntries(t, cache); len(es) != 2 {
		t.Fatalf("%d entries after three concurrent runs, want 2: %+v", len(es), es)
	}
	last := cachedRun(t, "after", args...)
	for _, r := range last.Rungs {
		if r.CompileSource != runtime.OriginImported {
			t.Errorf("rung %d: %s after the concurrent runs, want imported", r.Capacity, r.CompileSource)
		}
	}
	if len(last.Notes) != 0 {
		t.Errorf("notes %q, want none (no damaged entry)", last.Notes)
	}
}
