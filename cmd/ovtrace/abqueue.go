package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/app/campaignq"
	"github.com/ovtoolkit/ovrun/app/compilebench"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
)

// The flags of a queued experiment (ovtrace ab --queue) and of its merge.
var (
	abQueueFlag = &cli.StringFlag{Name: "queue", Usage: "run the blocks on other machines: publish them to the NATS JetStream server at `URL` (nats://HOST:PORT) for ovrun workers, and collect the trials into --out",
		Action: func(_ *cli.Context, v string) error { return campaignq.CheckURL(v) }}
	abRequiresFlag = &cli.StringSliceFlag{Name: "requires", Usage: "with --queue, a requirement `CLASS`, KEY=VALUE[,KEY=VALUE...] (e.g. device=NPU,driver=X): only workers whose --labels hold all of it run these blocks; repeat for more classes, each runs every block and gets its own report; none: any worker"}
	abOutFlag      = &cli.StringFlag{Name: "out", Usage: "with --queue, the experiment's `DIR` (campaign.json, queue.json, classes/CLASS/ab.json, merge.json)"}
	abDetachFlag   = &cli.BoolFlag{Name: "detach", Usage: "with --queue, publish the blocks and exit; collect later with --merge DIR"}
	abAckWaitFlag  = &cli.DurationFlag{Name: "ack-wait", Value: campaignq.DefaultAckWait, Usage: "with --queue, the `DURATION` a block may go without its worker's heartbeat before JetStream hands it to another worker"}
	abMergeFlag    = &cli.StringFlag{Name: "merge", Usage: "collect the queued experiment in `DIR` (from the server in DIR/queue.json) and report each class; no other flags are needed"}
	abPoolFlag     = &cli.BoolFlag{Name: "pool", Usage: "with --merge, also report every class's blocks together (DIR/pooled/ab.json), and say so"}
	abWaitFlag     = &cli.BoolFlag{Name: "wait", Usage: "with --merge, wait until every block is collected (or given up)"}
)

// checkABQueueFlagsUnset refuses the queue flags on a local experiment.
func checkABQueueFlagsUnset(c *cli.Context) error {
	for _, f := range []cli.Flag{abRequiresFlag, abOutFlag, abDetachFlag, abAckWaitFlag, abPoolFlag, abWaitFlag} {
		if c.IsSet(f.Names()[0]) {
			return fmt.Errorf("--%s applies to a queued experiment: give --queue nats://HOST:PORT (or --merge DIR)", f.Names()[0])
		}
	}
	return nil
}

// queuedAB publishes the experiment's blocks and, unless --detach,
// collects them and reports.
func queuedAB(c *cli.Context, once compilebench.OnceConfig, cfg compilebench.Config) error {
	out := abOutFlag.Get(c)
	if out == "" {
		return errors.New("--queue needs the experiment's folder: --out DIR")
	}
	if jsonFlag.Get(c) != "" {
		return fmt.Errorf("--json with --queue: the reports go into --out (classes/CLASS/%s)", compilebench.ReportFile)
	}
	classes, err := campaignq.ParseClasses(abRequiresFlag.Get(c))
	if err != nil {
		return err
	}
	ackWait := abAckWaitFlag.Get(c)
	if ackWait < time.Second || ackWait > time.Hour {
		return fmt.Errorf("--ack-wait %s: want 1s to 1h", ackWait)
	}
	if once.Model, err = filepath.Abs(once.Model); err != nil {
		return err
	}
	equivalence := !noEquivalenceFlag.Get(c)
	qc := &compilebench.QueuedCampaign{Model: once.Model, Capacity: once.Capacity, Device: once.Device, Precision: once.Precision,
		Variants: cfg.Variants, Pairs: cfg.Pairs, Endpoints: cfg.Endpoints, Equivalence: equivalence, Tolerance: cfg.Tolerance}
	for _, v := range cfg.Variants {
		o := once
		o.ExportHash = equivalence
		qc.Args = append(qc.Args, onceArgs(o, v))
	}
	url := abQueueFlag.Get(c)
	q, err := campaignq.Open(c.Context, url, "ovtrace ab")
	if err != nil {
		return err
	}
	defer q.Close()
	id := campaignq.NewCampaignID(time.Now(), rand.Uint32())
	st, err := compilebench.StartQueued(c.Context, q, qc, out, id, classes, ackWait)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "ovtrace: experiment %s: %d blocks published to %s\n", id, len(st.Blocks), url)
	if abDetachFlag.Get(c) {
		fmt.Fprintf(c.App.Writer, "published; ovrun workers run the blocks; collect them with: ovtrace ab --merge %s --wait\n", out)
		return nil
	}
	return abCollect(c, q, st, out, true, false)
}

// abMerge collects what is missing of the experiment in dir and reports.
func abMerge(c *cli.Context, dir string) error {
	st, err := campaignq.LoadState(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("--merge %s: no %s there (an experiment run with --queue has one)", dir, campaignq.StateFile)
		}
		return err
	}
	if st.Kind != campaignq.KindAB {
		return fmt.Errorf("--merge %s: the folder holds an ovrun bench campaign; collect it with: ovrun bench merge %s", dir, dir)
	}
	sink, err := compilebench.NewQueueSink(dir)
	if err != nil {
		return err
	}
	if missing := campaignq.Missing(st, sink); len(missing) > 0 {
		q, err := campaignq.Open(c.Context, st.URL, "ovtrace ab --merge")
		if err != nil {
			werr := abReport(c, dir, abPoolFlag.Get(c))
			return errors.Join(fmt.Errorf("%d blocks not collected: %w", len(missing), err), werr)
		}
		defer q.Close()
		return abCollect(c, q, st, dir, abWaitFlag.Get(c), abPoolFlag.Get(c))
	}
	return abReport(c, dir, abPoolFlag.Get(c))
}

// abCollect collects the experiment's blocks, then writes and prints the
// reports.
func abCollect(c *cli.Context, q *campaignq.Queue, st *campaignq.State, dir string, wait, pool bool) error {
	status := cliutil.NewStatus(os.Stderr, quietFlag.Get(c))
	start := time.Now()
	err := compilebench.Collect(c.Context, q, dir, st, wait, func(p campaignq.Progress) {
		status.Show("blocks collected %d of %d (%d given up)  %s", p.Collected, p.Total, p.GaveUp, time.Since(start).Round(time.Second))
	})
	status.Clear()
	werr := abReport(c, dir, pool)
	if errors.Is(err, context.Canceled) {
		return cli.Exit(fmt.Sprintf("ovtrace: interrupted; the blocks go on on the workers; collect them with: ovtrace ab --merge %s --wait", dir), cliutil.ExitInterrupted)
	}
	return errors.Join(err, werr)
}

// abReport writes the merged reports and prints each class's.
func abReport(c *cli.Context, dir string, pool bool) error {
	mr, err := compilebench.Merge(dir, pool)
	if mr == nil {
		return err
	}
	w := c.App.Writer
	results := mr.Classes
	if mr.Pooled != nil {
		results = append(results, *mr.Pooled)
	}
	for _, cr := range results {
		r := cr.Report
		fmt.Fprintf(w, "%s (%d of %d blocks; workers %v), %s, capacity %d on %s: ", cr.Class, cr.Collected, cr.Blocks, cr.Workers, r.Model, r.Capacity, r.Device)
		if werr := compilebench.WriteReport(w, r); werr != nil {
			return errors.Join(err, werr)
		}
	}
	fmt.Fprintf(w, "overall: %s; %s: %s\n", mr.Overall, mr.Status, filepath.Join(dir, campaignq.MergeJSON))
	return err
}
