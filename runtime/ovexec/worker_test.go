package ovexec

import (
	"context"
	"errors"
	"os"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// testWorker starts compile workers from this test binary (TestMain runs
// WorkerMain), their blobs in a folder the test checks is left empty.
func testWorker(t *testing.T) *WorkerOptions {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Cleanup(func() {
		if es, _ := os.ReadDir(dir); len(es) != 0 {
			t.Errorf("compile workers left %d entries in their temporary folder", len(es))
		}
	})
	return &WorkerOptions{Exe: exe, Args: []string{"compile-worker"}, Env: []string{testWorkerEnv + "=1"}, TempDir: dir}
}

// openWorkerOV is openOV's checkpoint with a compiler that compiles in workers.
// smolWorkerOV loads the SmolLM2 GGUF and opens an f32 compiler whose
// compiles run in test workers; both close when the test ends.
func smolWorkerOV(t *testing.T) (*model.Checkpoint, *Compiler) {
	t.Helper()
	ck, err := model.Load(testenv.SmolLM2(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck, openWorkerOV(t, ck, testWorker(t))
}

func openWorkerOV(t *testing.T, ck *model.Checkpoint, w *WorkerOptions) *Compiler {
	t.Helper()
	// Every rung compiles in a worker of its own: the mechanism under test.
	comp, err := NewCompiler(ck, Options{Device: "CPU", Precision: "f32", Worker: w, GraphPerRung: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := comp.Close(); err != nil {
			t.Error(err)
		}
	})
	return comp
}

// workerRun is the one-ahead run the worker tests compare.
func workerRun(t *testing.T, comp *Compiler, ck *model.Checkpoint) (*runtime.Summary, error) {
	t.Helper()
	return runtime.Run(context.Background(), comp, comp.KVShape(), runtime.RunConfig{
		Ladder: runtime.Ladder{32, 64, 128}, Policy: runtime.GrowOneAhead,
		Prompt: runtime.SeededTokens(5, 8, ck.Config.VocabSize), DecodeTokens: 100, PrefillChunk: 16,
	})
}

// TestWorkerCompiledLadderPredictsTheSameTokens: graphs compiled in worker
// processes and imported decode exactly like graphs compiled here, and the
// summary says where each came from and what moving it cost.
func TestWorkerCompiledLadderPredictsTheSameTokens(t *testing.T) {
	ck, local := openOV(t, "tiny", "F32")
	want, err := workerRun(t, local, ck)
	if err != nil {
		t.Fatal(err)
	}
	got, err := workerRun(t, openWorkerOV(t, ck, testWorker(t)), ck)
	if err != nil {
		t.Fatal(err)
	}
	if got.FinishReason != "length" || !slices.Equal(got.Predictions, want.Predictions) {
		t.Fatalf("worker run: finish %q, predictions %v; in process %v", got.FinishReason, got.Predictions, want.Predictions)
	}
	for _, r := range got.Rungs {
		if r.CompileSource != runtime.OriginCompiled || r.ImportS <= 0 || r.ExportS <= 0 {
			t.Errorf("rung %d: compile_source %q import_s %v export_s %v, want compiled with both > 0", r.Capacity, r.CompileSource, r.ImportS, r.ExportS)
		}
	}
	for _, r := range want.Rungs {
		if r.ImportS != 0 || r.ExportS != 0 {
			t.Errorf("in-process rung %d: import_s %v export_s %v, want 0", r.Capacity, r.ImportS, r.ExportS)
		}
	}
}

// TestWorkerThreadsCarryCPUSetAndNice: a worker started from a thread
// pinned to one CPU at nice 7 has every one of its threads (OpenVINO's
// TBB workers too) on that CPU at nice 7.
func TestWorkerThreadsCarryCPUSetAndNice(t *testing.T) {
	if goruntime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	_, comp := smolWorkerOV(t)
	stop := watchWorkerThreads("compile-worker")
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := runtime.PinCurrentThread([]int{1}); err != nil {
			errc <- err
			return
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 7); err != nil {
			errc <- err
			return
		}
		exe, err := comp.Compile(context.Background(), model.GraphSpec{Capacity: 64, Chunk: 1})
		if err == nil {
			err = exe.Close()
		}
		errc <- err
	}()
	err := <-errc
	seen := stop()
	if err != nil {
		t.Fatal(err)
	}
	checkThreads(t, seen, "1", 7)
}

// TestBackgroundWorkersCarryTheLadderCPUSetAndNice: through the runtime,
// the worker of a background compile (rung 64) runs on the ladder's
// background CPU set and nice value, every one of its threads.
func TestBackgroundWorkersCarryTheLadderCPUSetAndNice(t *testing.T) {
	if goruntime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	ck, comp := smolWorkerOV(t)
	stop := watchWorkerThreads("decode-c64")
	s, err := runtime.Run(context.Background(), comp, comp.KVShape(), runtime.RunConfig{
		Ladder: runtime.Ladder{32, 64}, Policy: runtime.GrowOneAhead, Prefill: runtime.PrefillDecode,
		Prompt: runtime.SeededTokens(5, 8, ck.Config.VocabSize), DecodeTokens: 40,
		Background: runtime.BackgroundOptions{CPUs: []int{1}, Nice: 5},
	})
	seen := stop()
	if err != nil || s.FinishReason != "length" {
		t.Fatalf("run: %v (finish %q)", err, s.FinishReason)
	}
	if !s.Rungs[1].Compiled || s.Rungs[1].Foreground {
		t.Fatalf("rung 64: compiled %v foreground %v, want a background compile", s.Rungs[1].Compiled, s.Rungs[1].Foreground)
	}
	checkThreads(t, seen, "1", 5)
}

// watchWorkerThreads records, until stopped, the threads of this
// process's compile workers whose command line holds word.
func watchWorkerThreads(word string) (stop func() map[int]testenv.ThreadAttrs) {
	seen := map[int]testenv.ThreadAttrs{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			for _, p := range testenv.Children(os.Getpid(), "compile-worker", word) {
				for _, a := range testenv.Threads(p.Pid) {
					seen[a.Tid] = a
				}
			}
		}
	}()
	return func() map[int]testenv.ThreadAttrs {
		close(done)
		wg.Wait()
		return seen
	}
}

// checkThreads wants every thread seen on cpus at nice, and enough of them
// to include OpenVINO's as well as the Go runtime's.
func checkThreads(t *testing.T, seen map[int]testenv.ThreadAttrs, cpus string, nice int) {
	t.Helper()
	if len(seen) < 4 {
		t.Fatalf("saw %d worker threads, want the Go runtime's and OpenVINO's", len(seen))
	}
	for _, a := range seen {
		if a.CPUs != cpus || a.Nice != nice {
			t.Errorf("worker thread %d: cpus %q nice %d, want cpus %s nice %d", a.Tid, a.CPUs, a.Nice, cpus, nice)
		}
	}
}

// TestKilledWorkerIsAFailedCompile kills real workers mid-compile: once,
// the foreground retry recovers with the same tokens; twice, the run
// finishes compile_error with every decoded token kept.
func TestKilledWorkerIsAFailedCompile(t *testing.T) {
	ck, local := openOV(t, "tiny", "F32")
	want, err := workerRun(t, local, ck)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		kills      int
		wantFinish string
		wantSteps  int
	}{
		{name: "retried", kills: 1, wantFinish: "length", wantSteps: 100},
		{name: "retry killed too", kills: 2, wantFinish: "compile_error", wantSteps: 24},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			comp := openWorkerOV(t, ck, testWorker(t))
			stop := testenv.KillCompileWorkers(os.Getpid(), "decode-c64", tc.kills)
			got, err := workerRun(t, comp, ck)
			if k := stop(); k != tc.kills {
				t.Fatalf("killed %d workers, want %d", k, tc.kills)
			}
			if got.FinishReason != tc.wantFinish || got.DecodedTokens != tc.wantSteps || !slices.Equal(got.Predictions, want.Predictions[:tc.wantSteps+1]) {
				t.Fatalf("finish %q after %d steps (err %v), want %q after %d with the in-process tokens", got.FinishReason, got.DecodedTokens, err, tc.wantFinish, tc.wantSteps)
			}
			if got.Rungs[1].CompileAttempts != 2 {
				t.Errorf("rung 64 compiled in %d attempts, want 2", got.Rungs[1].CompileAttempts)
			}
			if tc.kills == 2 {
				if err == nil || !strings.Contains(err.Error(), "decode-c64") || !strings.Contains(err.Error(), "SIGKILL") || strings.Contains(err.Error(), "\n") {
					t.Errorf("error %v: want one line naming the graph and SIGKILL", err)
				}
			}
		})
	}
}

// TestWorkerLimits: a worker past its timeout or its memory limit is
// killed, with a one-line error naming the graph and the limit.
func TestWorkerLimits(t *testing.T) {
	ck, err := model.Load(testenv.Synth(t, "tiny", "F32"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	tests := []struct {
		name  string
		set   func(*WorkerOptions)
		wants []string
	}{
		{name: "timeout", set: func(w *WorkerOptions) { w.Timeout = 20 * time.Millisecond }, wants: []string{"decode-c32", "ran past its 20ms timeout: killed", "--compile-timeout"}},
		{name: "memory", set: func(w *WorkerOptions) { w.MemoryMiB = 1 }, wants: []string{"decode-c32", "exceeded its 1 MiB memory limit", "killed", "--compile-memory"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := testWorker(t)
			tc.set(w)
			exe, err := openWorkerOV(t, ck, w).Compile(context.Background(), model.GraphSpec{Capacity: 32, Chunk: 1})
			if err == nil {
				exe.Close()
				t.Fatal("compiled past the limit")
			}
			for _, want := range tc.wants {
				if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
					t.Errorf("error %q: want one line with %q", err, want)
				}
			}
		})
	}
}

// TestCancelledWorkerLeavesNothing: cancelling a compile kills its worker
// and removes the blob's folder.
func TestCancelledWorkerLeavesNothing(t *testing.T) {
	_, comp := smolWorkerOV(t)
	ctx, cancel := context.WithCancel(context.Background())
	pid := make(chan int, 1)
	go func() {
		defer close(pid)
		for ctx.Err() == nil {
			if ps := testenv.Children(os.Getpid(), "compile-worker"); len(ps) > 0 && testenv.Compiling(ps[0].Pid) {
				pid <- ps[0].Pid
				cancel()
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	_, err := comp.Compile(ctx, model.GraphSpec{Capacity: 256, Chunk: 1})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled (the compile ended before the test saw it)", err)
	}
	if p, ok := <-pid; !ok || testenv.Alive(p) {
		t.Errorf("worker %d (seen %v) still runs after the cancel", p, ok)
	}
}
