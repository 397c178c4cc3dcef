package main

// Regression tests for a hostile tester's findings, through the binary:
// a huge trace and a signal given to timeline, a held or read-only
// compiled-rung cache and swapped entries in it, a compile-cost fit that
// falls with capacity, and a prompt longer than --capacity.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/runtime"
)

// spanLines writes lines of OTLP/JSON requests of 512 spans named name to
// path until it holds at least size bytes; one line when oneLine.
func spanLines(t *testing.T, path, name string, size int, oneLine bool) {
	t.Helper()
	span := func(i int) string {
		return fmt.Sprintf(`{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"%016x","parentSpanId":"00000000000000aa","name":%q,`+
			`"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000000000000100",`+
			`"attributes":[{"key":"ovrun.capacity","value":{"intValue":"64"}},{"key":"ovrun.tokens_per_s","value":{"doubleValue":12.5}}]}`, i+1, name)
	}
	var spans []string
	for i := range 512 {
		spans = append(spans, span(i))
	}
	line := `{"resourceSpans":[{"scopeSpans":[{"spans":[` + strings.Join(spans, ",") + `]}]}]}`
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := 0
	if oneLine {
		body := strings.Join(spans, ",")
		f.WriteString(`{"resourceSpans":[{"scopeSpans":[{"spans":[` + body)
		for w = len(body); w < size; w += len(body) + 1 {
			f.WriteString("," + body)
		}
		f.WriteString("]}]}]}\n")
		return
	}
	for ; w < size; w += len(line) + 1 {
		f.WriteString(line + "\n")
	}
}

// TestTimelineOfAHugeTrace: a trace of one 40 MB line is refused as too
// large to plot, naming the limit, without growing past a few hundred MiB
// (it took 0.9 GiB, and a 170 MB one 3.5 GiB).
func TestTimelineOfAHugeTrace(t *testing.T) {
	dir := t.TempDir()
	trace, out := filepath.Join(dir, "huge.otlp.jsonl"), filepath.Join(dir, "t.svg")
	spanLines(t, trace, "decode", 40<<20, true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ovrunBin, "timeline", "--trace", trace, "--out", out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Run()
	if ctx.Err() != nil {
		t.Fatal("timeline did not finish")
	}
	assertOneLineError(t, stderr.String(), cmd.ProcessState.ExitCode(), "trace too large to plot: longer than 16.0 MiB")
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru.Maxrss > 512<<10 {
		t.Errorf("timeline grew to %d MiB", ru.Maxrss>>10)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("an SVG was written")
	}
}

// TestTimelineHonoursSIGTERM: a signal while a long trace is read ends
// the command with 130 and no picture.
func TestTimelineHonoursSIGTERM(t *testing.T) {
	dir := t.TempDir()
	trace, out := filepath.Join(dir, "long.otlp.jsonl"), filepath.Join(dir, "t.svg")
	spanLines(t, trace, "http.request", 40<<20, false) // seconds of reading, none of it drawn
	cmd := exec.Command(ovrunBin, "timeline", "--trace", trace, "--out", out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(time.Minute): // a hang guard: it read for seconds and ignored the signal
		cmd.Process.Kill()
		<-exited
		t.Fatal("timeline ignored SIGTERM")
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 || strings.TrimSpace(stderr.String()) != "ovrun: interrupted" {
		t.Errorf("exit %d, stderr %q; want 130 and \"ovrun: interrupted\"", code, stderr.String())
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("an SVG was written")
	}
}

// holdCacheLock holds dir's rung cache lock from this process, as a stuck
// ovrun would, until the test ends.
func holdCacheLock(t *testing.T, dir string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, ".rungcache.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
}

// TestHeldCacheLockIsWaitedForWithALimit: a run whose cache lock another
// process holds says so, waits --cache-lock-wait and goes on without the
// cache, with the tokens of a run without one.
func TestHeldCacheLockIsWaitedForWithALimit(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	cache := t.TempDir()
	holdCacheLock(t, cache)
	args := []string{"run", "--model", tiny, "--ladder", "16,32", "--prompt-tokens", "4", "--decode-tokens", "20", "-q"}
	plain := filepath.Join(t.TempDir(), "plain.json")
	if _, stderr, code := ovrunIn(t, time.Minute, "", nil, append(slices.Clone(args), "--json", plain)...); code != 0 {
		t.Fatalf("run without a cache: exit %d: %s", code, stderr)
	}
	js := filepath.Join(t.TempDir(), "run.json")
	_, stderr, code := ovrunIn(t, 2*time.Minute, "", nil, append(slices.Clone(args), "--cache-dir", cache, "--cache-lock-wait", "3s", "--json", js)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := fmt.Sprintf("ovrun: waiting for the rung cache lock held by pid %d", os.Getpid())
	if !strings.Contains(stderr, want) || !strings.Contains(stderr, "(--cache-lock-wait)") {
		t.Errorf("stderr %q does not say %q", stderr, want)
	}
	s := readSummary(t, js)
	if notes := strings.Join(s.Notes, "\n"); !strings.Contains(notes, "going on without the cache") {
		t.Errorf("notes do not say the run went on without the cache:\n%s", notes)
	}
	if p := readSummary(t, plain); !slices.Equal(s.Predictions, p.Predictions) {
		t.Errorf("predictions %v, without a cache %v", s.Predictions, p.Predictions)
	}
	_, stderr, code = ovrunIn(t, 20*time.Second, "", nil, append(slices.Clone(args), "--cache-dir", cache, "--cache-lock-wait", "-1s")...)
	assertOneLineError(t, stderr, code, "--cache-lock-wait -1s: want a positive duration")
}

// lockedBuffer is a bytes.Buffer safe to read while a command writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCtrlCWhileWaitingForTheCacheLock: Ctrl-C while a run or generate
// waits for a held cache lock ends it with 130 and the --json summary.
func TestCtrlCWhileWaitingForTheCacheLock(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"run", []string{"run", "--model", tiny, "--ladder", "16,32", "--prompt-tokens", "4", "--decode-tokens", "20", "-q"}},
		{"generate", []string{"generate", "--model", tiny, "--capacity", "32", "--prompt-tokens", "4", "--max-new-tokens", "4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			holdCacheLock(t, cache)
			js := filepath.Join(t.TempDir(), "out.json")
			cmd := exec.Command(ovrunBin, append(slices.Clone(tc.args), "--cache-dir", cache, "--json", js)...)
			var stderr lockedBuffer
			cmd.Stderr, cmd.Stdout = &stderr, io.Discard
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { cmd.Wait(); close(exited) }()
			for i := 0; i < 300 && !strings.Contains(stderr.String(), "waiting for the rung cache lock"); i++ {
				time.Sleep(100 * time.Millisecond)
			}
			cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-exited:
			case <-time.After(time.Minute): // a hang guard
				cmd.Process.Kill()
				<-exited
				t.Fatalf("still running a minute after SIGINT (stderr %q)", stderr.String())
			}
			if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(stderr.String(), "interrupted; what was done so far is in "+js) {
				t.Errorf("exit %d, stderr %q; want 130 and the summary named", code, stderr.String())
			}
			var out struct {
				FinishReason string `json:"finish_reason"`
				Error        string `json:"error"`
			}
			b, err := os.ReadFile(js)
			if err != nil || json.Unmarshal(b, &out) != nil {
				t.Fatalf("no summary: %v", err)
			}
			if out.FinishReason != "interrupted" {
				t.Errorf("summary: finish %q, error %q; want interrupted", out.FinishReason, out.Error)
			}
		})
	}
}

// TestSwappedCacheEntriesAreCompiledAgain: two entries' files exchanged,
// their metadata edited to match, are discarded with a note and compiled
// again, with the tokens of the first run; the next run imports them.
func TestSwappedCacheEntriesAreCompiledAgain(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	cache := t.TempDir()
	args := []string{"--model", tiny, "--ladder", "16,32", "--prompt-tokens", "4", "--decode-tokens", "20", "--prefill", "decode", "--cache-dir", cache, "--graph-per-rung"}
	cold := cachedRun(t, "cold", args...)
	es := cacheEntries(t, cache)
	if len(es) != 2 || es[0].Capacity == es[1].Capacity {
		t.Fatalf("entries %+v, want one per rung", es)
	}
	a, b := es[0].Key, es[1].Key
	for _, ext := range []string{".blob", ".json"} {
		pa, pb := filepath.Join(cache, a+ext), filepath.Join(cache, b+ext)
		x, _ := os.ReadFile(pa)
		y, _ := os.ReadFile(pb)
		if ext == ".json" { // the metadata names the key of its new place
			x, y = bytes.ReplaceAll(x, []byte(a), []byte(b)), bytes.ReplaceAll(y, []byte(b), []byte(a))
		}
		os.WriteFile(pa, y, 0o644)
		os.WriteFile(pb, x, 0o644)
	}
	swapped := cachedRun(t, "swapped", args...)
	if notes := strings.Join(swapped.Notes, "\n"); strings.Count(notes, "moved or swapped") != 2 {
		t.Errorf("notes do not say both entries were swapped:\n%s", notes)
	}
	for _, r := range swapped.Rungs {
		if r.CompileSource != runtime.OriginCompiled {
			t.Errorf("rung %d: %s after the swap, want compiled", r.Capacity, r.CompileSource)
		}
	}
	if !slices.Equal(swapped.Predictions, cold.Predictions) {
		t.Errorf("predictions %v after the swap, want %v", swapped.Predictions, cold.Predictions)
	}
	for _, r := range cachedRun(t, "again", args...).Rungs {
		if r.CompileSource != runtime.OriginImported {
			t.Errorf("rung %d: %s, want imported from the entries compiled again", r.Capacity, r.CompileSource)
		}
	}
}

// TestCacheLsOfAReadOnlyFolder: a cache folder the user may not write
// lists, with its lock file or without one.
func TestCacheLsOfAReadOnlyFolder(t *testing.T) {
	tiny := testenv.Synth(t, "tiny", "F32")
	root := t.TempDir()
	os.Chmod(filepath.Dir(root), 0o755)
	os.Chmod(root, 0o755)
	// As root the listing runs as nobody, from a copy of the binary it can
	// reach (root writes any folder).
	bin, cred := ovrunBin, (*syscall.Credential)(nil)
	if os.Geteuid() == 0 {
		bin = filepath.Join(root, "ovrun")
		b, err := os.ReadFile(ovrunBin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	for _, withLock := range []bool{true, false} {
		t.Run(fmt.Sprintf("lock file %v", withLock), func(t *testing.T) {
			cache := filepath.Join(root, fmt.Sprint("cache-", withLock))
			cachedRun(t, "fill", "--model", tiny, "--ladder", "16", "--prompt-tokens", "4", "--decode-tokens", "2", "--prefill", "decode", "--cache-dir", cache, "--graph-per-rung")
			if !withLock {
				os.Remove(filepath.Join(cache, ".rungcache.lock"))
			}
			os.Chmod(cache, 0o555)
			defer os.Chmod(cache, 0o755)
			before := snapshot(t, cache)
			cmd := exec.Command(bin, "cache", "ls", "--cache-dir", cache)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil || !strings.Contains(stdout.String(), "decode-c16") || !strings.Contains(stdout.String(), "1 entries") {
				t.Errorf("cache ls of a read-only folder: %v\n%s%s", err, stdout.String(), stderr.String())
			}
			if after := snapshot(t, cache); !slices.Equal(before, after) {
				t.Errorf("the folder changed:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// TestPlanNeverPredictsFreeCompiles: a profile whose medians fall with
// capacity (a line of negative slope), or a cost.json whose stored fit has
// a negative intercept, no longer extrapolates to 0 s compiles: every
// rung costs at least the smallest measured compile.
func TestPlanNeverPredictsFreeCompiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		fit  compilecost.Fit
	}{
		{"falling medians", compilecost.Fit{}},
		{"stored fit below zero", compilecost.Fit{Model: compilecost.FitLinear, A: -10, B: 0.001}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cost := filepath.Join(dir, "cost.json")
			p := compilecost.Profile{Model: "m", Device: "CPU", Rungs: []compilecost.Rung{
				{Capacity: 1024, CompileS: []float64{5}}, {Capacity: 2048, CompileS: []float64{3}},
			}, Fit: tc.fit}
			b, _ := json.Marshal(p)
			os.WriteFile(cost, b, 0o644)
			js := filepath.Join(dir, "plan.json")
			_, stderr, code := ovrunIn(t, 20*time.Second, "", nil, "plan", "--compile-cost", cost, "--decode-rate", "100", "--prompt-tokens", "4",
				"--decode-tokens", "8000", "--ladder", "1024,2048,4096,8192", "--policy", "grow-one-ahead", "--prefill", "decode", "--json", js)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var rep struct {
				Results []compilecost.SimResult `json:"results"`
			}
			if b, err := os.ReadFile(js); err != nil || json.Unmarshal(b, &rep) != nil || len(rep.Results) != 1 {
				t.Fatalf("plan.json: %v", err)
			}
			for _, r := range rep.Results[0].Rungs {
				if r.CompileS < 3 {
					t.Errorf("rung %d compiles in %.3f s, below the smallest measured 3 s", r.Capacity, r.CompileS)
				}
			}
		})
	}
}

// TestGeneratePromptLongerThanCapacity: a text prompt longer than
// --capacity is reported as such, naming both, not as a --max-new-tokens
// range running backwards.
func TestGeneratePromptLongerThanCapacity(t *testing.T) {
	g := testenv.SmolLM2(t)
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 8)
	_, stderr, code := ovrunIn(t, time.Minute, "", nil, "generate", "--model", g, "--prompt", long, "--capacity", "16", "--max-new-tokens", "4")
	assertOneLineError(t, stderr, code, "tokens does not fit --capacity 16 (give ")
	if strings.Contains(stderr, "want 1..-") {
		t.Errorf("stderr %q", stderr)
	}
	tiny := testenv.Synth(t, "tiny", "F32")
	_, stderr, code = ovrunIn(t, time.Minute, "", nil, "generate", "--model", tiny, "--prompt-tokens", "10", "--capacity", "16", "--max-new-tokens", "20")
	assertOneLineError(t, stderr, code, "--max-new-tokens 20: a prompt of 10 tokens leaves room for 7 at --capacity 16 (give 29 or more")
}
