package bench

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/internal/testenv"
)

// TestEndToEndTinyCampaign builds ovrun, interrupts a real two-pair
// campaign on the tiny model after its first run, resumes it, and checks
// the report. It needs OpenVINO (make setup); -short skips it.
func TestEndToEndTinyCampaign(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ovrun and runs OpenVINO")
	}
	root := testenv.RepoRoot(t)
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "ovrun")
	build := exec.Command("go", "build", "-o", bin, "./cmd/ovrun")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	model := filepath.Join(tmp, "tiny")
	testenv.Run(t, bin, "synth", "--preset", "tiny", "--out", model)
	out := filepath.Join(tmp, "campaign")
	args := []string{"bench", "--model", model, "--ladder", "32,64,128", "--arms", "grow-eager,grow-one-ahead",
		"--pairs", "2", "--allow-small", "--prompt-tokens", "8", "--decode-tokens", "100", "--teacher-forced",
		"--verify-boundaries", "--out", out}

	// Interrupt after the first run has finished, as Ctrl-C would.
	var stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(out, "runs", "warmup-1-grow-eager.json")
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(first); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("first run never finished; stderr:\n%s", stderr.String())
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("interrupted bench: %v, want exit status 130; stderr:\n%s", err, stderr.String())
	}
	if msg := strings.TrimSpace(stderr.String()); strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "--resume") {
		t.Errorf("interrupt message is not one line naming --resume: %q", msg)
	}
	if r := readReport(t, out); !r.Partial || r.Runs[0].Error != "" || r.Runs[0].Summary == nil {
		t.Errorf("partial report after the interrupt: partial %v, first run %q", r.Partial, r.Runs[0].Error)
	}

	testenv.Run(t, bin, append(args, "--resume")...)
	r := readReport(t, out)
	if r.Partial || len(r.Runs) != 6 {
		t.Fatalf("report partial %v with %d runs (%s)", r.Partial, len(r.Runs), r.Status)
	}
	if !r.Runs[0].Reused {
		t.Error("the finished first run was not reused")
	}
	for i, rr := range r.Runs {
		s := rr.Summary
		if rr.Warmup != (i < 2) || s == nil || s.Policy != rr.Arm || s.FinishReason != "length" || s.DecodedTokens != 100 {
			t.Errorf("run %d: warmup %v arm %s summary %+v", i, rr.Warmup, rr.Arm, s)
		}
	}
	if got := strings.Join(r.Order[0], ",") + ";" + strings.Join(r.Order[1], ","); got != "grow-eager,grow-one-ahead;grow-one-ahead,grow-eager" {
		t.Errorf("order %s", got)
	}
	if len(r.Comparisons) != len(Endpoints) || r.Comparisons[0].N != 2 || r.Comparisons[0].Treatment != "grow-one-ahead" {
		t.Errorf("comparisons %+v", r.Comparisons)
	}
	// Identical teacher-forced inputs: every boundary keeps the control's top-1.
	for _, ev := range r.BoundaryEvidence {
		if ev.Runs != 2 || ev.Boundaries != 4 || ev.Verified == 0 || ev.Top1Matches != ev.Verified {
			t.Errorf("boundary evidence %+v", ev)
		}
	}
	if ev := r.BoundaryEvidence[1]; ev.Successors != 4 {
		t.Errorf("grow-one-ahead compiled %d reached successors in the background, want 4", ev.Successors)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil || !strings.Contains(string(md), "smallest possible two-sided sign-flip p is 2/2^2 = 0.5") {
		t.Errorf("report.md: %v\n%s", err, md)
	}
	for _, p := range []string{PlotTimeline, PlotKV, PlotEndpoints} {
		if b, err := os.ReadFile(filepath.Join(out, p)); err != nil || !bytes.HasPrefix(b, []byte("<svg")) {
			t.Errorf("%s: %v", p, err)
		}
	}
}
