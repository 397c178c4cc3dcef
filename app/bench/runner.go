package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

// Runner performs one run of a campaign: it must leave the run summary
// (runtime.Summary as JSON) at spec.JSONPath when it succeeds. It returns
// ctx.Err() (or an error wrapping it) when cancelled.
type Runner interface {
	Run(ctx context.Context, cfg *Config, spec RunSpec) error
}

// RunSpec is what a Runner is asked to do.
type RunSpec struct {
	Slot
	// JSONPath is where the run summary goes.
	JSONPath string
	// LogPath is where the run's own output may be kept.
	LogPath string
	// CacheDir is the run's compiled-rung cache ("" for none).
	CacheDir string
}

// ExecRunner runs every run as a fresh `ovrun run` process (clean RSS and
// compile state), keeping its combined output in spec.LogPath.
type ExecRunner struct {
	// Binary is the ovrun executable, usually os.Executable().
	Binary string
}

var _ Runner = (*ExecRunner)(nil)

// Run starts the process and waits for it. On cancellation the process (and
// its process group) is killed, not asked to finish.
func (r *ExecRunner) Run(ctx context.Context, cfg *Config, spec RunSpec) error {
	cmd := exec.CommandContext(ctx, r.Binary, cfg.RunArgs(spec.Arm, spec.JSONPath, spec.CacheDir)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group: a Ctrl-C meant for the bench reaches the bench,
	// which kills the child itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if spec.LogPath != "" {
		if werr := safefile.WriteFile(spec.LogPath, out.Bytes()); werr != nil && err == nil {
			err = werr
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("%w: %s", err, lastLine(out.String()))
		}
		return err
	}
	return nil
}

// lastLine is the last non-empty line of s, which is where ovrun puts its error.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
