package compilebench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ovtoolkit/ovrun/app/campaignq"
	"github.com/ovtoolkit/ovrun/internal/childproc"
	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/internal/stats"
)

// QueuedCampaign is an ovtrace ab experiment whose blocks run on workers
// (ovtrace ab --queue): DIR/campaign.json, and part of every work item.
type QueuedCampaign struct {
	// Model (absolute), Capacity, Device and Precision are the graph
	// measured, for the report.
	Model     string `json:"model"`
	Capacity  int    `json:"capacity"`
	Device    string `json:"device,omitempty"`
	Precision string `json:"precision,omitempty"`
	// Variants are the arms, the control first.
	Variants  []Variant `json:"variants"`
	Pairs     int       `json:"pairs"`
	Endpoints []string  `json:"endpoints"`
	// Args are each variant's compile-once command line after the
	// executable, exactly as a local ovtrace ab runs it.
	Args [][]string `json:"args"`
	// Equivalence makes every block's warm-ups dump logits and compare
	// them with the control's (on the worker, within the block).
	Equivalence bool    `json:"equivalence"`
	Tolerance   float64 `json:"tolerance"`
}

func (qc *QueuedCampaign) config() Config {
	return Config{Variants: slices.Clone(qc.Variants), Pairs: qc.Pairs, Endpoints: slices.Clone(qc.Endpoints), AllowSmall: true, Tolerance: qc.Tolerance}
}

// check reports what is wrong with a campaign read from a work item or
// a folder.
func (qc *QueuedCampaign) check() error {
	cfg := qc.config()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if len(qc.Args) != len(qc.Variants) {
		return fmt.Errorf("%d command lines for %d variants", len(qc.Args), len(qc.Variants))
	}
	return nil
}

// BlockItem is the payload of an ab work item: one block.
type BlockItem struct {
	Campaign QueuedCampaign `json:"campaign"`
	Block    int            `json:"block"`
	// Order is the block's variants (indices) in run order, after one
	// warm-up per variant in variant order.
	Order []int `json:"order"`
}

// BlockResult is block.json, the one result file of an ab block.
type BlockResult struct {
	Block int `json:"block"`
	// Variants are the campaign's, with what the worker's warm-ups
	// loaded (OpenVINO version, library, effective precision).
	Variants   []Variant    `json:"variants"`
	Warmup     []Trial      `json:"warmup"`
	Trials     []Trial      `json:"trials"`
	Equivalent *Equivalence `json:"equivalent,omitempty"`
	// Error is why the block stopped early ("" when complete).
	Error string `json:"error,omitempty"`
}

const blockResultFile = "block.json"

// Items are the work items of a queued experiment: every block once per
// requirement class.
func Items(qc *QueuedCampaign, campaign string, classes []campaignq.Labels) ([]*campaignq.Item, error) {
	orders := stats.Orders(len(qc.Variants), qc.Pairs)
	var out []*campaignq.Item
	for _, req := range classes {
		for b, order := range orders {
			p, err := json.Marshal(BlockItem{Campaign: *qc, Block: b + 1, Order: order})
			if err != nil {
				return nil, err
			}
			out = append(out, &campaignq.Item{Version: campaignq.ItemVersion, Kind: campaignq.KindAB,
				Campaign: campaign, Requires: req, Block: b + 1, Payload: p})
		}
	}
	return out, nil
}

// BlockRunner runs the blocks of queued ab experiments on a worker
// (ovrun worker): every trial a fresh "Exe compile-once" process.
type BlockRunner struct {
	// Exe is the ovtrace binary.
	Exe string
	// Log, when set, hears of every trial as it starts.
	Log func(format string, args ...any)
}

var _ campaignq.Runner = (*BlockRunner)(nil)

// RunBlock runs one block: a warm-up per variant (with the logits of the
// equivalence check), then the block's trials in its order.
func (r *BlockRunner) RunBlock(ctx context.Context, b *campaignq.Block) error {
	var it BlockItem
	if err := json.Unmarshal(b.Item.Payload, &it); err != nil {
		return fmt.Errorf("%w: %w", campaignq.ErrItem, err)
	}
	qc := &it.Campaign
	if err := qc.check(); err != nil {
		return fmt.Errorf("%w: %w", campaignq.ErrItem, err)
	}
	orders := stats.Orders(len(qc.Variants), qc.Pairs)
	if it.Block < 1 || it.Block > len(orders) || it.Block != b.Item.Block || !slices.Equal(it.Order, orders[it.Block-1]) {
		return fmt.Errorf("%w: block %d's order does not follow the experiment's design", campaignq.ErrItem, b.Item.Block)
	}
	if _, err := os.Stat(r.Exe); err != nil {
		return fmt.Errorf("%w: the ovtrace binary (ovrun worker --ovtrace): %w", campaignq.ErrCannotRun, err)
	}
	if _, err := os.Stat(qc.Model); err != nil {
		return fmt.Errorf("%w: %w", campaignq.ErrCannotRun, err)
	}
	cfg := qc.config()
	if qc.Equivalence {
		cfg.LogitsDir = b.Scratch
	}
	rep := &Report{Variants: slices.Clone(cfg.Variants), Warmup: []Trial{}, Trials: []Trial{}}
	run := func(ctx context.Context, v Variant, dumpLogits string) (*Measurement, error) {
		i := slices.IndexFunc(qc.Variants, func(w Variant) bool { return w.Name == v.Name })
		args := slices.Clone(qc.Args[i])
		if dumpLogits != "" {
			args = append(args, "--dump-logits", dumpLogits)
		}
		return ExecTrial(ctx, r.Exe, args, v)
	}
	err := runAll(ctx, cfg, rep, [][]int{it.Order}, run, func(p Progress) {
		if r.Log != nil {
			what := "warm-up"
			if !p.Warmup {
				what = fmt.Sprintf("trial %d of %d", p.Trial, p.Total)
			}
			r.Log("block %d: %s: %s", it.Block, what, p.Variant)
		}
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for i := range rep.Warmup {
		rep.Warmup[i].Pair = it.Block
	}
	for i := range rep.Trials {
		rep.Trials[i].Pair = it.Block
	}
	res := BlockResult{Block: it.Block, Variants: rep.Variants, Warmup: rep.Warmup, Trials: rep.Trials, Equivalent: rep.Equivalent}
	if err != nil {
		res.Error = strings.Join(strings.Fields(err.Error()), " ")
	}
	return safefile.WriteJSON(filepath.Join(b.Out, blockResultFile), res)
}

// ExecTrial runs one "exe ARGS..." compile-once process for variant v, in
// v's environment with a fresh OVTRACE_MEMO_STATS, and reads its
// measurement (the last JSON line of its output).
func ExecTrial(ctx context.Context, exe string, args []string, v Variant) (*Measurement, error) {
	memo, cleanup, err := NewMemoStatsPath()
	if err != nil {
		return nil, err
	}
	defer cleanup()
	out, err := childproc.Run(ctx, childproc.Cmd{Name: "compile-once", Path: exe, Args: args,
		Env: append(v.Environ(os.Environ()), EnvMemoStats+"="+memo)})
	var ce *childproc.Error
	if errors.As(err, &ce) && ce.LastStderr != "" {
		return nil, fmt.Errorf("compile-once: %s", strings.TrimPrefix(ce.LastStderr, "ovtrace: "))
	}
	if err != nil {
		return nil, err
	}
	var m Measurement
	if err := childproc.DecodeLastJSONLine(out, &m); err != nil {
		return nil, fmt.Errorf("compile-once %w", err)
	}
	return &m, nil
}
