package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/app/bench"
	"github.com/ovtoolkit/ovrun/app/campaignq"
	"github.com/ovtoolkit/ovrun/app/compilebench"
)

var (
	workerQueueFlag = &cli.StringFlag{Name: "queue", Required: true, EnvVars: []string{"OVRUN_QUEUE"}, Usage: "the NATS JetStream server `URL` (nats://HOST:PORT) the campaigns publish to",
		Action: func(_ *cli.Context, v string) error { return campaignq.CheckURL(v) }}
	workerLabelsFlag = &cli.StringFlag{Name: "labels", EnvVars: []string{"OVRUN_LABELS"}, Usage: "this machine's `LABELS`, KEY=VALUE[,KEY=VALUE...] (e.g. device=NPU,driver=X): the worker takes the blocks whose --requires these hold, and no others",
		Action: func(_ *cli.Context, v string) error {
			if _, err := campaignq.ParseLabels(v); err != nil {
				return fmt.Errorf("--labels %w", err)
			}
			return nil
		}}
	workerNameFlag = &cli.StringFlag{Name: "name", Usage: "the worker's `NAME` in the reports (default HOST-PID)"}
	workerDirFlag  = &cli.StringFlag{Name: "work-dir", Usage: "`DIR` for the blocks' runs, caches and logs while they run (default a folder in the system's temporary one)"}
	ovtraceFlag    = &cli.StringFlag{Name: "ovtrace", Usage: "the ovtrace `BINARY` that runs ovtrace ab blocks (default ovtrace next to this ovrun)"}
)

var workerCommand = &cli.Command{
	Name:  "worker",
	Usage: "run the blocks of queued campaigns (ovrun bench --queue, ovtrace ab --queue) on this machine",
	Description: `Pulls blocks from the NATS JetStream server at --queue, one at a time, and runs
each whole on this machine: its warm-ups and every arm of the pair, each run a
fresh process ("ovrun run" for ovrun bench blocks, "ovtrace compile-once" for
ovtrace ab blocks), exactly as a local campaign runs them, so that a pair is
never split across machines. Then it stores the block's summaries and logs
and commits the block.

Which blocks: a campaign's --requires KEY=VALUE,... is a requirement class
with its own subject and durable consumer on the stream; this worker pulls
only from the classes that its --labels meet (every required key present with
the required value; a class that requires nothing is met by every worker).
Label a machine with what distinguishes it for the measurement:
   ovrun worker --queue nats://queue.lab:4222 --labels device=NPU,driver=32.0.100.3104,cpu=lunarlake

While a block runs, the worker heartbeats it (JetStream's InProgress) every
third of the class's AckWait (ovrun bench --ack-wait, default 30s). A worker
that dies stops heartbeating: after AckWait the block goes to another worker
of the class. Each attempt keeps its results under its own delivery name, and
the first completed attempt commits the block; an attempt that finishes after
it (a worker that was only cut off) finds the block counted and drops its
results, so every block counts exactly once. A block is handed out at most 5
times, so that a block that kills its worker cannot go round the fleet for
ever; the campaign reports it as given up.

Paths in a campaign (--model, --compile-cost, lib: and preload: variants)
must name the same files on every worker; a worker that lacks one hands the
block back for another. Ctrl-C or SIGTERM stops the run in progress and hands
its block back at once.`,
	Flags:  []cli.Flag{workerQueueFlag, workerLabelsFlag, workerNameFlag, workerDirFlag, ovtraceFlag, quietFlag},
	Action: workerAction,
}

func workerAction(c *cli.Context) error {
	labels, err := campaignq.ParseLabels(workerLabelsFlag.Get(c))
	if err != nil {
		return fmt.Errorf("--labels %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the ovrun binary to run: %w", err)
	}
	host, _ := os.Hostname()
	name := workerNameFlag.Get(c)
	if name == "" {
		name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	dir := workerDirFlag.Get(c)
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "ovrun-worker-"+name)
	}
	ovtrace := ovtraceFlag.Get(c)
	if ovtrace == "" {
		ovtrace = filepath.Join(filepath.Dir(exe), "ovtrace")
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s %s: %s\n", time.Now().Format("15:04:05"), name, fmt.Sprintf(format, args...))
	}
	quiet := quietFlag.Get(c)
	if quiet {
		logf = func(string, ...any) {}
	}
	q, err := campaignq.Open(c.Context, workerQueueFlag.Get(c), "ovrun worker "+name)
	if err != nil {
		return err
	}
	defer q.Close()
	w := &campaignq.Worker{
		Queue: q, Name: name, Host: host, Labels: labels, Dir: dir, Log: logf,
		Machine: func() json.RawMessage {
			b, _ := json.Marshal(bench.ReadMachine())
			return b
		},
		Runners: map[string]campaignq.Runner{
			campaignq.KindBench: &bench.BlockRunner{Runner: &bench.ExecRunner{Binary: exe}, Log: logf},
			campaignq.KindAB:    &compilebench.BlockRunner{Exe: ovtrace, Log: logf},
		},
	}
	logf("waiting for blocks on %s with labels %q", q.URL, labels.String())
	err = w.Run(c.Context)
	if errors.Is(err, c.Context.Err()) {
		logf("stopped")
	}
	return err
}
