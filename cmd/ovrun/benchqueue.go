package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/app/bench"
	"github.com/ovtoolkit/ovrun/app/campaignq"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
)

// The flags of a queued campaign (ovrun bench --queue) and of its merge.
var (
	campaignQueueFlag = &cli.StringFlag{Name: "queue", Usage: "run the blocks on other machines: publish them to the NATS JetStream server at `URL` (nats://HOST:PORT), where ovrun workers take them, and collect the runs into --out",
		Action: func(_ *cli.Context, v string) error { return campaignq.CheckURL(v) }}
	requiresFlag = &cli.StringSliceFlag{Name: "requires", Usage: "with --queue, a requirement `CLASS`, KEY=VALUE[,KEY=VALUE...] (e.g. device=NPU,driver=X): only workers whose --labels hold all of it run these blocks. Repeat it for more classes: each runs the whole design (--pairs blocks) and gets its own statistics. None: any worker"}
	detachFlag   = &cli.BoolFlag{Name: "detach", Usage: "with --queue, publish the blocks and exit; collect the runs later with ovrun bench merge DIR"}
	ackWaitFlag  = &cli.DurationFlag{Name: "ack-wait", Value: campaignq.DefaultAckWait, Usage: "with --queue, the `DURATION` a block may go without its worker's heartbeat (every third of it) before JetStream hands it to another worker: how soon a killed worker's block moves on"}

	poolFlag       = &cli.BoolFlag{Name: "pool", Usage: "also report every class's blocks together (pooled/), and say so; without it several classes have no overall statistics"}
	mergeWaitFlag  = &cli.BoolFlag{Name: "wait", Usage: "wait until every block is collected (or given up) before reporting"}
	mergeQueueFlag = &cli.StringFlag{Name: "queue", Usage: "collect from the server at `URL` instead of the one in DIR/queue.json",
		Action: func(_ *cli.Context, v string) error { return campaignq.CheckURL(v) }}
)

var benchMergeCommand = &cli.Command{
	Name:      "merge",
	Usage:     "collect a queued campaign's runs and report each requirement class (pooled only with --pool)",
	ArgsUsage: "DIR",
	Description: `Fetches the blocks of the queued campaign in DIR (ovrun bench --queue
--out DIR) that workers have finished and are not in DIR yet, then writes:

   DIR/classes/CLASS/   one folder per --requires class, in the layout a local
                        campaign writes (campaign.json, runs/<pair>-<pos>-<arm>.json
                        with their logs, report.json, report.md, plots), the
                        statistics computed by the same code, plus
                        blocks/<pair>.json: the worker, host, labels and machine
                        each block ran on, and which delivery of it counted
   DIR/merge.json, DIR/merge.md   every class's tables and the overall result

Classes are separate experiments (another NPU driver, another CPU), so their
runs are never pooled silently: with one class its report is the overall
one; with several, the overall result is "none" unless --pool, which adds
DIR/pooled/ (all blocks in one paired analysis, pairs numbered class after
class) and says at its top which classes it pools.

Without --wait it reports what is collected so far (a partial report names
the missing blocks' runs "not collected"); with --wait it waits for every
block. Blocks that JetStream gave up on (five deliveries died or were handed
back) are reported as such. A block counts once: only the first completed
delivery of each block is ever fetched.`,
	Flags:  []cli.Flag{poolFlag, mergeWaitFlag, mergeQueueFlag, quietFlag},
	Action: benchMergeAction,
}

// checkQueueFlagsUnset refuses the queue flags on a local campaign.
func checkQueueFlagsUnset(c *cli.Context) error {
	for _, f := range []cli.Flag{requiresFlag, detachFlag, ackWaitFlag} {
		if c.IsSet(f.Names()[0]) {
			return fmt.Errorf("--%s applies to a queued campaign: give --queue nats://HOST:PORT", f.Names()[0])
		}
	}
	return nil
}

// queuedBench publishes the campaign's blocks and, unless --detach,
// collects them and writes the reports.
func queuedBench(c *cli.Context, cfg *bench.Config, out string) error {
	if resumeFlag.Get(c) {
		return fmt.Errorf("--resume with --queue: a queued campaign goes on on the workers; collect it with: ovrun bench merge --wait %s", out)
	}
	classes, err := campaignq.ParseClasses(requiresFlag.Get(c))
	if err != nil {
		return err
	}
	ackWait := ackWaitFlag.Get(c)
	if ackWait < time.Second || ackWait > time.Hour {
		return fmt.Errorf("--ack-wait %s: want 1s to 1h", ackWait)
	}
	url := campaignQueueFlag.Get(c)
	q, err := campaignq.Open(c.Context, url, "ovrun bench")
	if err != nil {
		return err
	}
	defer q.Close()
	id := campaignq.NewCampaignID(time.Now(), rand.Uint32())
	st, err := bench.StartQueued(c.Context, q, cfg, out, id, classes, ackWait)
	if err != nil {
		return err
	}
	names := make([]string, len(classes))
	for i, l := range classes {
		names[i] = campaignq.ClassDir(l)
	}
	fmt.Fprintf(os.Stderr, "ovrun: campaign %s: %d blocks published to %s for class %s\n", id, len(st.Blocks), url, strings.Join(names, ", "))
	if detachFlag.Get(c) {
		fmt.Printf("published; workers run the blocks (ovrun worker --queue %s --labels ...); collect them with: ovrun bench merge --wait %s\n", url, out)
		return nil
	}
	return collectAndReport(c, q, st, out, true, keepGoingFlag.Get(c), false)
}

func benchMergeAction(c *cli.Context) error {
	if c.NArg() != 1 {
		return errors.New("give the campaign folder: ovrun bench merge DIR")
	}
	dir := c.Args().First()
	st, err := campaignq.LoadState(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s has no %s (a campaign run with --queue has)", bench.ErrNotQueued, dir, campaignq.StateFile)
		}
		return err
	}
	if st.Kind != campaignq.KindBench {
		return fmt.Errorf("%w: %s holds an ovtrace ab experiment; collect it with: ovtrace ab --merge %s", bench.ErrNotQueued, dir, dir)
	}
	sink, err := bench.NewQueueSink(dir)
	if err != nil {
		return err
	}
	if missing := campaignq.Missing(st, sink); len(missing) > 0 {
		url := st.URL
		if u := mergeQueueFlag.Get(c); u != "" {
			url = u
		}
		q, err := campaignq.Open(c.Context, url, "ovrun bench merge")
		if err != nil {
			// Report what is here, and say why the rest is not.
			mr, merr := bench.Merge(dir, benchMergeOptions(poolFlag.Get(c)))
			if mr != nil {
				printMerge(mr, dir)
			}
			return errors.Join(fmt.Errorf("%d blocks not collected: %w", len(missing), err), merr)
		}
		defer q.Close()
		return collectAndReport(c, q, st, dir, mergeWaitFlag.Get(c), true, poolFlag.Get(c))
	}
	mr, err := bench.Merge(dir, benchMergeOptions(poolFlag.Get(c)))
	if mr != nil {
		printMerge(mr, dir)
	}
	return err
}

// collectAndReport collects the campaign's blocks (waiting for all with
// wait), then writes and prints the merged reports.
func collectAndReport(c *cli.Context, q *campaignq.Queue, st *campaignq.State, dir string, wait, keepGoing, pool bool) error {
	status := cliutil.NewStatus(os.Stderr, quietFlag.Get(c))
	start := time.Now()
	err := bench.Collect(c.Context, q, dir, st, wait, keepGoing, func(p campaignq.Progress) {
		last := ""
		if p.Last != nil {
			last = fmt.Sprintf("; last: block %d of %s on %s, %.1f s", p.Last.Block, campaignq.ClassDir(p.Last.Requires), p.Last.Worker, p.Last.WallS)
		}
		gave := ""
		if p.GaveUp > 0 {
			gave = fmt.Sprintf(", %d given up", p.GaveUp)
		}
		status.Show("blocks collected %d of %d%s (%s)%s", p.Collected, p.Total, gave, time.Since(start).Round(time.Second), last)
	})
	status.Clear()
	mr, merr := bench.Merge(dir, benchMergeOptions(pool))
	if mr != nil {
		printMerge(mr, dir)
	}
	if errors.Is(err, context.Canceled) {
		return cli.Exit(fmt.Sprintf("ovrun: interrupted; the blocks go on on the workers; collect them with: ovrun bench merge --wait %s", dir), cliutil.ExitInterrupted)
	}
	return errors.Join(err, merr)
}

// benchMergeOptions are the merge's options; pool pools the classes.
func benchMergeOptions(pool bool) bench.MergeOptions {
	return bench.MergeOptions{Pool: pool, Meta: bench.Meta{GoVersion: goruntime.Version(), Command: shellJoin(os.Args)}}
}

// printMerge writes each class's comparison table and the overall result.
func printMerge(mr *bench.MergeReport, dir string) {
	for _, cr := range mr.Classes {
		fmt.Printf("class %s (%d of %d blocks; workers %s):\n", cr.Class, cr.Collected, cr.Blocks, strings.Join(cr.Workers, ", "))
		printBench(cr.Report, filepath.Join(dir, cr.Dir))
	}
	if mr.Pooled != nil {
		fmt.Printf("pooled over every class (--pool):\n")
		printBench(mr.Pooled.Report, filepath.Join(dir, mr.Pooled.Dir))
	}
	fmt.Printf("overall: %s; %s: merge report in %s\n", mr.Overall, mr.Status, filepath.Join(dir, bench.MergeMD))
}
