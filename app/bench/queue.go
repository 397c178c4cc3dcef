package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ovtoolkit/ovrun/app/campaignq"
	"github.com/ovtoolkit/ovrun/internal/safefile"
)

// BlockItem is the payload of a bench work item: one block of a queued
// campaign (ovrun bench --queue), everything a worker needs to run it.
type BlockItem struct {
	// Campaign is the whole campaign: model, ladder, arms, run flags.
	Campaign Config `json:"campaign"`
	// Pair is the block's number, from 1.
	Pair int `json:"pair"`
	// Slots are the block's runs in order (BlockPlan): one warm-up per
	// arm, then the arms in the block's counterbalanced order.
	Slots []Slot `json:"slots"`
}

// BlockResult is block.json among a block's result files: what became of
// each run on the worker.
type BlockResult struct {
	Pair int         `json:"pair"`
	Runs []RunResult `json:"runs"`
	// LoadAvgEnd is the worker's 1-minute load average after the block.
	LoadAvgEnd float64 `json:"loadavg_end"`
}

// RunResult is one run of a block: its slot's ID and why it has no usable
// summary ("" when it has one).
type RunResult struct {
	ID    string `json:"id"`
	Error string `json:"error,omitempty"`
}

// blockResultFile is the name of a block's BlockResult among its files.
const blockResultFile = "block.json"

// Items are the work items of a queued campaign: every block of the design
// once for each requirement class.
func Items(cfg *Config, campaign string, classes []campaignq.Labels) ([]*campaignq.Item, error) {
	var out []*campaignq.Item
	for _, req := range classes {
		for p := 1; p <= cfg.Pairs; p++ {
			b, err := json.Marshal(BlockItem{Campaign: *cfg, Pair: p, Slots: BlockPlan(cfg, p)})
			if err != nil {
				return nil, err
			}
			out = append(out, &campaignq.Item{Version: campaignq.ItemVersion, Kind: campaignq.KindBench,
				Campaign: campaign, Requires: req, Block: p, Payload: b})
		}
	}
	return out, nil
}

// BlockRunner runs the blocks of queued bench campaigns on a worker
// (ovrun worker): every run a fresh process through Runner, as a local
// campaign runs them, with the block's summaries and logs as its results.
type BlockRunner struct {
	Runner Runner
	// Log, when set, hears of every run as it ends.
	Log func(format string, args ...any)
}

var _ campaignq.Runner = (*BlockRunner)(nil)

// RunBlock runs one block: its warm-ups and its runs, in the item's order.
func (r *BlockRunner) RunBlock(ctx context.Context, b *campaignq.Block) error {
	var it BlockItem
	if err := json.Unmarshal(b.Item.Payload, &it); err != nil {
		return fmt.Errorf("%w: %w", campaignq.ErrItem, err)
	}
	cfg := &it.Campaign
	if err := cfg.Validate(true); err != nil {
		return fmt.Errorf("%w: %w", campaignq.ErrItem, err)
	}
	if it.Pair < 1 || it.Pair > cfg.Pairs || it.Pair != b.Item.Block || !slices.Equal(it.Slots, BlockPlan(cfg, it.Pair)) {
		return fmt.Errorf("%w: block %d's runs do not follow the campaign's design", campaignq.ErrItem, b.Item.Block)
	}
	for _, p := range []string{cfg.Model, cfg.CompileCost} {
		if _, err := os.Stat(p); p != "" && err != nil {
			return fmt.Errorf("%w: %w", campaignq.ErrCannotRun, err)
		}
	}
	if err := errors.Join(safefile.MkdirAll(filepath.Join(b.Out, "runs")), safefile.MkdirAll(filepath.Join(b.Scratch, "runs"))); err != nil {
		return fmt.Errorf("%w: %w", campaignq.ErrCannotRun, err)
	}
	res := BlockResult{Pair: it.Pair}
	for _, sl := range it.Slots {
		spec := RunSpec{Slot: sl, JSONPath: filepath.Join(b.Out, "runs", sl.ID()+".json"),
			LogPath: filepath.Join(b.Out, "runs", sl.ID()+".log"), CacheDir: cacheDir(cfg, b.Scratch, sl)}
		if cfg.Cache == CacheCold {
			os.RemoveAll(spec.CacheDir)
		}
		err := r.Runner.Run(ctx, cfg, spec)
		if cfg.Cache == CacheCold {
			os.RemoveAll(spec.CacheDir)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		why := ""
		if err != nil {
			why = strings.Join(strings.Fields(err.Error()), " ")
		} else {
			_, why, _ = loadRun(spec.JSONPath, cfg, sl.Arm)
		}
		res.Runs = append(res.Runs, RunResult{ID: sl.ID(), Error: why})
		if r.Log != nil {
			status := "ok"
			if why != "" {
				status = "failed: " + why
			}
			r.Log("block %d: run %s %s", it.Pair, sl.ID(), status)
		}
	}
	res.LoadAvgEnd = LoadAvg()
	return writeJSON(filepath.Join(b.Out, blockResultFile), res)
}

// StartQueued begins a queued campaign in dir (ovrun bench --queue): it
// refuses a folder that holds a campaign, writes campaign.json, and
// publishes every block once per requirement class, recording them in
// queue.json.
func StartQueued(ctx context.Context, q *campaignq.Queue, cfg *Config, dir, id string, classes []campaignq.Labels, ackWait time.Duration) (*campaignq.State, error) {
	if err := safefile.MkdirAll(dir); err != nil {
		return nil, err
	}
	if _, err := loadConfig(dir); err == nil {
		return nil, fmt.Errorf("%w: %s already holds a campaign (%s); collect a queued one with ovrun bench merge, or choose another --out",
			ErrCampaignExists, dir, CampaignFile)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	items, err := Items(cfg, id, classes)
	if err != nil {
		return nil, err
	}
	if err := writeJSON(filepath.Join(dir, CampaignFile), cfg); err != nil {
		return nil, err
	}
	st := &campaignq.State{Kind: campaignq.KindBench, Campaign: id, Classes: classes}
	return st, campaignq.Publish(ctx, q, dir, st, items, ackWait)
}

// Collect fetches the committed blocks of the queued campaign in dir into
// its class folders (campaignq.Drive). With wait it waits for every
// block; unless keepGoing it stops at the first block with a failed run,
// with an error wrapping ErrRunFailed (the other blocks go on on the
// workers, and a later merge collects them).
func Collect(ctx context.Context, q *campaignq.Queue, dir string, st *campaignq.State, wait, keepGoing bool, progress func(campaignq.Progress)) error {
	sink, err := NewQueueSink(dir)
	if err != nil {
		return err
	}
	dctx, stop := context.WithCancel(ctx)
	defer stop()
	var failed string
	err = campaignq.Drive(dctx, q, dir, st, sink, wait, func(p campaignq.Progress) {
		if progress != nil {
			progress(p)
		}
		if len(sink.failed) > 0 && !keepGoing && failed == "" {
			failed = sink.failed[0]
			stop()
		}
	})
	if failed != "" && ctx.Err() == nil {
		return fmt.Errorf("%w: %s; the other blocks go on on the workers (ovrun bench merge --wait %s collects them), --keep-going waits past failures",
			ErrRunFailed, failed, dir)
	}
	if err == nil && len(sink.failed) > 0 {
		err = fmt.Errorf("%d runs failed, the first %s: %w", len(sink.failed), sink.failed[0], ErrRunFailed)
	}
	return err
}
