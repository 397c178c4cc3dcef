package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/app/bench"
	"github.com/ovtoolkit/ovrun/app/campaignq"
	"github.com/ovtoolkit/ovrun/app/campaignq/natstest"
	"github.com/ovtoolkit/ovrun/app/compilebench"
	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
)

// fleetWorker is an `ovrun worker` process of the test.
type fleetWorker struct {
	name, dir string
	cmd       *exec.Cmd
	log       *workerLog
}

// workerLog is the worker's output, read while the process writes it.
type workerLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *workerLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *workerLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startWorker(t *testing.T, url, name, labels string, extra ...string) *fleetWorker {
	t.Helper()
	w := &fleetWorker{name: name, dir: filepath.Join(t.TempDir(), "work"), log: new(workerLog)}
	args := append([]string{"worker", "--queue", url, "--labels", labels, "--name", name, "--work-dir", w.dir}, extra...)
	w.cmd = exec.Command(ovrunBin, args...)
	w.cmd.Stdout, w.cmd.Stderr = w.log, w.log
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.stop(t) })
	return w
}

// stop asks the worker to stop (SIGTERM) and waits; a killed one is reaped.
func (w *fleetWorker) stop(t *testing.T) {
	if w.cmd.ProcessState != nil {
		return
	}
	w.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { w.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		w.cmd.Process.Kill()
		<-done
		t.Errorf("worker %s did not stop on SIGTERM; log:\n%s", w.name, w.log)
	}
}

// kill SIGKILLs the worker mid-block, and the run process it started (in
// its own process group, so it would run on as an orphan).
func (w *fleetWorker) kill(t *testing.T) {
	children := testenv.Children(w.cmd.Process.Pid)
	w.cmd.Process.Signal(syscall.SIGKILL)
	w.cmd.Wait()
	for _, c := range children {
		syscall.Kill(c.Pid, syscall.SIGKILL)
	}
}

// firstSummary waits until a run of the worker's current block has written
// its summary, and returns its delivery's folder name.
func (w *fleetWorker) firstSummary(t *testing.T, timeout time.Duration, also func() string) string {
	t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		found := ""
		filepath.WalkDir(w.dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".json") && filepath.Base(filepath.Dir(p)) == "runs" {
				found = filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(p)))) // .../<delivery>/out/runs/x.json
				return fs.SkipAll
			}
			return nil
		})
		if found != "" {
			return found
		}
	}
	t.Fatalf("worker %s ran no block in %s; log:\n%s\n%s", w.name, timeout, w.log, also())
	return ""
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestQueuedCampaignSurvivesAKilledWorker runs a real two-class campaign
// (ovrun run on the tiny model) on a real NATS JetStream server with three
// real worker processes: a1 and a2 of class driver=a, b1 of class driver=b.
// a1 is SIGKILLed in the middle of its first block. The campaign completes;
// the killed block is redelivered to a2 and counted once; each class's
// statistics are what a single-host campaign's report code computes from
// the same runs (a local --resume over a copy of the class folder); merge
// refuses to pool the classes without --pool and says so with it.
func TestQueuedCampaignSurvivesAKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs OpenVINO and a NATS server")
	}
	url := natstest.Start(t)
	tiny := testenv.Synth(t, "tiny", model.DTypeF32)
	out := filepath.Join(t.TempDir(), "campaign")
	design := []string{"bench", "--model", tiny, "--ladder", "32,64,128", "--arms", "grow-eager,grow-one-ahead", "--pairs", "2", "--allow-small",
		"--prompt-tokens", "8", "--decode-tokens", "60", "--teacher-forced"}

	// a1 alone first, so that it certainly holds a block when it is killed.
	a1 := startWorker(t, url, "a1", "device=CPU,driver=a")
	campaign := exec.Command(ovrunBin, append(slices.Clone(design), "--queue", url, "--requires", "device=CPU,driver=a",
		"--requires", "device=CPU,driver=b", "--ack-wait", "2s", "--out", out, "-q")...)
	var stdout, stderr bytes.Buffer
	campaign.Stdout, campaign.Stderr = &stdout, &stderr
	if err := campaign.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- campaign.Wait() }()
	killed := a1.firstSummary(t, 2*time.Minute, func() string {
		campaign.Process.Kill()
		<-done
		return "campaign stderr:\n" + stderr.String()
	})
	a1.kill(t)
	startWorker(t, url, "a2", "device=CPU,driver=a,host=two")
	startWorker(t, url, "b1", "device=CPU,driver=b")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("campaign: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
	case <-time.After(4 * time.Minute):
		campaign.Process.Kill()
		<-done
		t.Fatalf("campaign did not finish; stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "class device=CPU,driver=a") || !strings.Contains(stdout.String(), "overall: none") {
		t.Errorf("campaign output:\n%s", stdout.String())
	}

	var mr bench.MergeReport
	readJSON(t, filepath.Join(out, campaignq.MergeJSON), &mr)
	if len(mr.Classes) != 2 || mr.Pooled != nil || !strings.HasPrefix(mr.Overall, "none") || mr.Status != "2 of 2 blocks collected" && mr.Status != "4 of 4 blocks collected" {
		t.Fatalf("merge.json: %d classes, pooled %v, overall %q, status %q", len(mr.Classes), mr.Pooled != nil, mr.Overall, mr.Status)
	}
	redelivered := 0
	for _, cr := range mr.Classes {
		var rep bench.Report
		readJSON(t, filepath.Join(out, cr.Dir, "report.json"), &rep)
		if rep.Partial || len(rep.Runs) != 8 || len(rep.Blocks) != 2 || len(rep.Comparisons) == 0 || rep.Comparisons[0].N != 2 {
			t.Fatalf("class %s: partial %v (%s), %d runs, %d blocks, comparisons %d", cr.Class, rep.Partial, rep.Status, len(rep.Runs), len(rep.Blocks), len(rep.Comparisons))
		}
		for _, b := range rep.Blocks {
			req, _ := campaignq.ParseLabels(cr.Class)
			have, _ := campaignq.ParseLabels(b.Labels)
			if !req.MetBy(have) {
				t.Errorf("class %s: block %d ran on %s (%s)", cr.Class, b.Pair, b.Worker, b.Labels)
			}
			if b.Deliveries > 1 {
				redelivered++
				if b.Worker != "a2" || b.Delivery == killed || cr.Class != "device=CPU,driver=a" {
					t.Errorf("redelivered block %d of %s: worker %s, delivery %s (the killed one was %s)", b.Pair, cr.Class, b.Worker, b.Delivery, killed)
				}
			} else if b.Worker == "a1" {
				t.Errorf("block %d of %s counted from the killed worker", b.Pair, cr.Class)
			}
		}
		// The single-host report code over the same runs: a local
		// campaign resumed from a copy of the class folder reuses every
		// measured run (only the local warm-ups run again).
		local := filepath.Join(t.TempDir(), "local")
		if err := os.CopyFS(local, os.DirFS(filepath.Join(out, cr.Dir))); err != nil {
			t.Fatal(err)
		}
		if _, se, code := ovrun(t, nil, append(slices.Clone(design), "--out", local, "--resume", "-q")...); code != 0 {
			t.Fatalf("local resume of class %s: exit %d: %s", cr.Class, code, se)
		}
		var lrep bench.Report
		readJSON(t, filepath.Join(local, "report.json"), &lrep)
		reused := 0
		for _, r := range lrep.Runs {
			if r.Reused && !r.Warmup {
				reused++
			}
		}
		if reused != 4 {
			t.Errorf("class %s: the local campaign reused %d of the 4 measured runs", cr.Class, reused)
		}
		a, _ := json.Marshal(rep.Comparisons)
		b, _ := json.Marshal(lrep.Comparisons)
		if !bytes.Equal(a, b) {
			t.Errorf("class %s: queued statistics differ from the single-host report's:\nqueued %s\nlocal  %s", cr.Class, a, b)
		}
	}
	if redelivered != 1 {
		t.Errorf("%d blocks were redelivered, want the killed one", redelivered)
	}

	// Pooling needs its flag, and the pooled report says so.
	so, se, code := ovrun(t, nil, "bench", "merge", "--pool", out)
	if code != 0 || !strings.Contains(so, "pooled over every class") {
		t.Fatalf("merge --pool: exit %d\n%s\n%s", code, so, se)
	}
	var pooled bench.Report
	readJSON(t, filepath.Join(out, campaignq.PooledDir, "report.json"), &pooled)
	if len(pooled.PooledClasses) != 2 || pooled.Comparisons[0].N != 4 || len(pooled.Order) != 4 {
		t.Errorf("pooled report: classes %v, N %d, %d blocks", pooled.PooledClasses, pooled.Comparisons[0].N, len(pooled.Order))
	}
	if md, _ := os.ReadFile(filepath.Join(out, campaignq.PooledDir, "report.md")); !strings.Contains(string(md), "Pooled over 2 requirement classes") {
		t.Errorf("pooled report.md does not say it pools:\n%s", md)
	}
	if so, _, code := ovrun(t, nil, "bench", "merge", out); code != 0 || !strings.Contains(so, "overall: none") {
		t.Errorf("merge without --pool: exit %d, %s", code, so)
	}
	if keep := os.Getenv("OVRUN_KEEP_FLEET"); keep != "" {
		os.CopyFS(keep, os.DirFS(out))
	}
}

// TestQueuedABExperimentOnAWorker runs a real ovtrace ab experiment through
// the queue on one ovrun worker (compile-once of the tiny model's 32
// graph): every block comes back with its warm-ups and equivalence
// evidence, and the class's statistics are what the local ovtrace ab code
// computes from the same measurements in the same order.
func TestQueuedABExperimentOnAWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs OpenVINO and a NATS server")
	}
	ovtraceBin := filepath.Join(t.TempDir(), "ovtrace")
	if out, err := exec.Command("go", "build", "-o", ovtraceBin, "../ovtrace").CombinedOutput(); err != nil {
		t.Fatalf("go build ovtrace: %v\n%s", err, out)
	}
	url := natstest.Start(t)
	tiny := testenv.Synth(t, "tiny", model.DTypeF32)
	startWorker(t, url, "w1", "device=CPU", "--ovtrace", ovtraceBin)
	out := filepath.Join(t.TempDir(), "ab")
	cmd := exec.Command(ovtraceBin, "ab", "--model", tiny, "--capacity", "32", "--precision", "f32", "--variant", "base=",
		"--variant", "latency=prop:PERFORMANCE_HINT=LATENCY", "--pairs", "2", "--allow-small", "--queue", url, "--requires", "device=CPU",
		"--ack-wait", "5s", "--out", out, "-q")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ovtrace ab --queue: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	var rep compilebench.Report
	readJSON(t, filepath.Join(out, campaignq.ClassesDir, "device=CPU", compilebench.ReportFile), &rep)
	if rep.FinishReason != "complete" || len(rep.Warmup) != 4 || len(rep.Trials) != 4 || len(rep.Blocks) != 2 || rep.Equivalent == nil || rep.Equivalent.Compiled == nil {
		t.Fatalf("class report: finish %s (%s), %d warm-ups, %d trials, %d blocks, equivalence %+v", rep.FinishReason, rep.Error, len(rep.Warmup), len(rep.Trials), len(rep.Blocks), rep.Equivalent)
	}
	if !strings.Contains(stdout.String(), "overall: class device=CPU") {
		t.Errorf("output:\n%s", stdout.String())
	}
	// The local experiment's code over the same measurements, replayed in
	// run order (warm-ups, then each block's trials).
	var replay []*compilebench.Measurement
	for _, t := range append(slices.Clone(rep.Warmup[:2]), rep.Trials...) {
		replay = append(replay, &compilebench.Measurement{CompileS: t.Values["compile_s"], CompileCPUS: t.Values["compile_cpu_s"], PeakRSSBytes: int64(t.Values["peak_rss_bytes"])})
	}
	variants, _ := compilebench.ParseVariants([]string{"base=", "latency=prop:PERFORMANCE_HINT=LATENCY"})
	local, err := compilebench.Run(t.Context(), compilebench.Config{Variants: variants, Pairs: 2, AllowSmall: true},
		func(context.Context, compilebench.Variant, string) (*compilebench.Measurement, error) {
			m := replay[0]
			replay = replay[1:]
			return m, nil
		}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(rep.Comparisons)
	b, _ := json.Marshal(local.Comparisons)
	if len(rep.Comparisons) != 3 || !bytes.Equal(a, b) {
		t.Errorf("queued statistics differ from the local ones:\nqueued %s\nlocal  %s", a, b)
	}
}
