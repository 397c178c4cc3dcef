package compilebench

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
	"github.com/ovtoolkit/ovrun/internal/stats"
)

// The output folder of a queued experiment: campaign.json (the
// QueuedCampaign) and queue.json, and the queue's layout (campaignq.ClassFolder):
// classes/CLASS/ with ab.json (the report a local ovtrace ab --json
// writes, over the class's blocks) and blocks/, pooled/ab.json with
// --pool, and merge.json.
const (
	CampaignFile = "campaign.json"
	ReportFile   = "ab.json"
)

// BlockRun is where one block of a queued experiment ran.
type BlockRun struct {
	Block      int     `json:"block"`
	Class      string  `json:"class"`
	Worker     string  `json:"worker"`
	Host       string  `json:"host"`
	Labels     string  `json:"labels"`
	Delivery   string  `json:"delivery"`
	Deliveries uint64  `json:"deliveries"`
	WallS      float64 `json:"wall_s"`
	// Machine is the worker's description of its machine.
	Machine json.RawMessage `json:"machine,omitempty"`
	Error   string          `json:"error,omitempty"`
}

type storedBlock struct {
	Record *campaignq.Record `json:"record"`
	Result BlockResult       `json:"result"`
}

// StartQueued begins a queued experiment in dir: it refuses a folder that
// holds one, writes campaign.json and publishes every block once per class.
func StartQueued(ctx context.Context, q *campaignq.Queue, qc *QueuedCampaign, dir, id string, classes []campaignq.Labels, ackWait time.Duration) (*campaignq.State, error) {
	if err := qc.check(); err != nil {
		return nil, err
	}
	if err := safefile.MkdirAll(dir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, CampaignFile)); err == nil {
		return nil, fmt.Errorf("%s already holds an experiment (%s); collect a queued one with ovtrace ab --merge, or choose another --out", dir, CampaignFile)
	}
	items, err := Items(qc, id, classes)
	if err != nil {
		return nil, err
	}
	if err := safefile.WriteJSON(filepath.Join(dir, CampaignFile), qc); err != nil {
		return nil, err
	}
	st := &campaignq.State{Kind: campaignq.KindAB, Campaign: id, Classes: classes}
	return st, campaignq.Publish(ctx, q, dir, st, items, ackWait)
}

// QueueSink writes collected ab blocks into their class folders.
type QueueSink struct {
	Dir      string
	Campaign *QueuedCampaign
}

var _ campaignq.Sink = (*QueueSink)(nil)

// NewQueueSink is the sink of the queued experiment in dir.
func NewQueueSink(dir string) (*QueueSink, error) {
	b, err := safefile.ReadFile(filepath.Join(dir, CampaignFile), 64<<20)
	if err != nil {
		return nil, err
	}
	qc := new(QueuedCampaign)
	if err := json.Unmarshal(b, qc); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, CampaignFile), err)
	}
	if err := qc.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, CampaignFile), err)
	}
	return &QueueSink{Dir: dir, Campaign: qc}, nil
}

// Has reports whether the block's blocks/NN.json exists.
func (s *QueueSink) Has(req campaignq.Labels, block int) bool {
	_, err := os.Stat(campaignq.BlockFile(campaignq.ClassFolder(s.Dir, req), block))
	return err == nil
}

// Store writes a block's result, which must be its one block.json.
func (s *QueueSink) Store(rec *campaignq.Record, files campaignq.Bundle) error {
	name := fmt.Sprintf("block %d of class %s", rec.Block, campaignq.ClassDir(rec.Requires))
	if len(files) != 1 || files[blockResultFile] == nil {
		return fmt.Errorf("%s: want only %s among the result files", name, blockResultFile)
	}
	var res BlockResult
	if err := json.Unmarshal(files[blockResultFile], &res); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if res.Block != rec.Block || rec.Block > s.Campaign.Pairs {
		return fmt.Errorf("%s: the result is block %d's", name, res.Block)
	}
	dir := campaignq.ClassFolder(s.Dir, rec.Requires)
	if err := safefile.MkdirAll(filepath.Join(dir, campaignq.BlocksDir)); err != nil {
		return err
	}
	return safefile.WriteJSON(campaignq.BlockFile(dir, rec.Block), storedBlock{Record: rec, Result: res})
}

// MergeReport is DIR/merge.json of a queued experiment.
type MergeReport struct {
	Campaign string        `json:"campaign"`
	Queue    string        `json:"queue"`
	Pairs    int           `json:"pairs"`
	Classes  []ClassResult `json:"classes"`
	// Pooled joins every class's blocks (only with --pool and more
	// than one class).
	Pooled *ClassResult `json:"pooled,omitempty"`
	// Overall names the overall result: the only class's, the pooled
	// one, or none (several classes, not pooled).
	Overall string `json:"overall"`
	Status  string `json:"status"`
}

// ClassResult is one class (or the pool) of a queued experiment.
type ClassResult struct {
	Class string `json:"class"`
	// File is the class's report (ab.json), relative to the folder.
	File      string `json:"file"`
	Blocks    int    `json:"blocks"`
	Collected int    `json:"collected"`
	GaveUp    int    `json:"gave_up"`
	// Workers and Labels are the distinct workers and label sets that
	// ran the blocks.
	Workers      []string            `json:"workers"`
	Labels       []string            `json:"labels"`
	FinishReason string              `json:"finish_reason"`
	Comparisons  []VariantComparison `json:"comparisons"`
	Report       *Report             `json:"-"`
}

// Merge writes the reports of the queued experiment in dir from the blocks
// collected so far: each class's ab.json holds the statistics a local
// ovtrace ab computes over the same trials (the same code), pooled/ab.json
// with pool and several classes, and merge.json the overall result.
func Merge(dir string, pool bool) (*MergeReport, error) {
	st, err := campaignq.LoadState(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s has no %s: not an experiment run with --queue", dir, campaignq.StateFile)
	}
	if err != nil {
		return nil, err
	}
	if st.Kind != campaignq.KindAB {
		return nil, fmt.Errorf("%s holds a %s campaign, not an ovtrace ab experiment", dir, st.Kind)
	}
	sink, err := NewQueueSink(dir)
	if err != nil {
		return nil, err
	}
	qc := sink.Campaign
	mr := &MergeReport{Campaign: st.Campaign, Queue: st.URL, Pairs: qc.Pairs}
	var errs []error
	missing := 0
	for _, req := range st.Classes {
		rep, err := classReport(dir, qc, req, st)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cr := classResult(rep)
		cr.File = filepath.Join(campaignq.ClassesDir, campaignq.ClassDir(req), ReportFile)
		for _, b := range st.Blocks {
			if b.Requires.String() == req.String() && b.GaveUp != "" {
				cr.GaveUp++
			}
		}
		missing += cr.Blocks - cr.Collected
		errs = append(errs, safefile.WriteJSON(filepath.Join(dir, cr.File), rep))
		mr.Classes = append(mr.Classes, cr)
	}
	switch {
	case len(mr.Classes) == 1:
		mr.Overall = "class " + mr.Classes[0].Class + ", the experiment's only class"
	case pool && len(mr.Classes) > 1:
		rep := pooledReport(qc, mr.Classes)
		cr := classResult(rep)
		cr.File = filepath.Join(campaignq.PooledDir, ReportFile)
		for _, c := range mr.Classes {
			cr.GaveUp += c.GaveUp
		}
		errs = append(errs, safefile.MkdirAll(filepath.Join(dir, campaignq.PooledDir)), safefile.WriteJSON(filepath.Join(dir, cr.File), rep))
		mr.Pooled = &cr
		mr.Overall = "pooled over " + strings.Join(rep.PooledClasses, " and ") + " (--pool)"
	default:
		mr.Overall = fmt.Sprintf("none: the %d classes are separate experiments and are not pooled (--pool pools them)", len(mr.Classes))
	}
	mr.Status = fmt.Sprintf("%d of %d blocks collected", len(st.Blocks)-missing, len(st.Blocks))
	if missing > 0 {
		mr.Status = "partial: " + mr.Status
	}
	errs = append(errs, safefile.WriteJSON(filepath.Join(dir, campaignq.MergeJSON), mr))
	return mr, errors.Join(errs...)
}

// classReport assembles one class's report from its collected blocks.
func classReport(dir string, qc *QueuedCampaign, req campaignq.Labels, st *campaignq.State) (*Report, error) {
	cdir := campaignq.ClassFolder(dir, req)
	cfg := qc.config()
	orders := stats.Orders(len(qc.Variants), qc.Pairs)
	rep := &Report{Model: filepath.Base(filepath.Clean(qc.Model)), Capacity: qc.Capacity, Device: qc.Device, Precision: qc.Precision,
		Variants: slices.Clone(qc.Variants), Pairs: qc.Pairs, Endpoints: slices.Clone(qc.Endpoints), Order: orderNames(qc.Variants, orders),
		Warmup: []Trial{}, Trials: []Trial{}, Class: campaignq.ClassDir(req), StartedAt: st.PublishedAt.Format(time.RFC3339)}
	var eqs []blockEquivalence
	var failed, absent []string
	for b := 1; b <= qc.Pairs; b++ {
		data, err := safefile.ReadFile(campaignq.BlockFile(cdir, b), 64<<20)
		if errors.Is(err, fs.ErrNotExist) {
			absent = append(absent, fmt.Sprint(b))
			continue
		}
		sb := new(storedBlock)
		if err == nil {
			err = json.Unmarshal(data, sb)
		}
		if err == nil && sb.Record == nil {
			err = errors.New("no record")
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", campaignq.BlockFile(cdir, b), err)
		}
		r := sb.Result
		rep.Blocks = append(rep.Blocks, BlockRun{Block: b, Class: rep.Class, Worker: sb.Record.Worker, Host: sb.Record.Host,
			Labels: sb.Record.Labels.String(), Delivery: sb.Record.Delivery, Deliveries: sb.Record.Deliveries, WallS: sb.Record.WallS,
			Machine: sb.Record.Machine, Error: r.Error})
		if len(rep.Blocks) == 1 && len(r.Variants) == len(rep.Variants) {
			rep.Variants = slices.Clone(r.Variants)
		}
		rep.Warmup = append(rep.Warmup, r.Warmup...)
		rep.Trials = append(rep.Trials, r.Trials...)
		if r.Equivalent != nil {
			eqs = append(eqs, blockEquivalence{b, r.Equivalent})
		}
		if r.Error != "" {
			failed = append(failed, fmt.Sprintf("block %d on %s: %s", b, sb.Record.Worker, r.Error))
		}
	}
	rep.Comparisons = compare(cfg, rep.Trials, orders)
	if rep.Equivalent = worstEquivalence(eqs); rep.Equivalent != nil {
		rep.Equivalent.Compiled = compareCompiled(rep.Variants, append(slices.Clone(rep.Warmup), rep.Trials...))
	}
	rep.Memo = summariseMemo(rep.Variants, rep.Trials)
	rep.FinishReason = "complete"
	if len(absent) > 0 || len(failed) > 0 {
		rep.FinishReason = "partial"
		var why []string
		if len(absent) > 0 {
			why = append(why, "blocks "+strings.Join(absent, ", ")+" not collected")
		}
		rep.Error = strings.Join(append(why, failed...), "; ")
	}
	rep.Notes = append(rep.Notes, fmt.Sprintf("requirement class %s: %d of %d blocks, each whole on one worker after its own warm-ups (workers %s)",
		rep.Class, len(rep.Blocks), qc.Pairs, strings.Join(workersOf(rep.Blocks), ", ")))
	if !st.CollectedAt.IsZero() {
		rep.WallS = st.CollectedAt.Sub(st.PublishedAt).Seconds()
	}
	return rep, nil
}

// pooledReport joins the classes' trials, blocks numbered class after class.
func pooledReport(qc *QueuedCampaign, classes []ClassResult) *Report {
	cfg := qc.config()
	first := classes[0].Report
	rep := &Report{Model: first.Model, Capacity: first.Capacity, Device: first.Device, Precision: first.Precision,
		Variants: slices.Clone(first.Variants), Endpoints: first.Endpoints, Warmup: []Trial{}, Trials: []Trial{}, StartedAt: first.StartedAt}
	var orders [][]int
	reason := "complete"
	for i, c := range classes {
		off := i * qc.Pairs
		for _, t := range c.Report.Warmup {
			t.Pair += off
			rep.Warmup = append(rep.Warmup, t)
		}
		for _, t := range c.Report.Trials {
			t.Pair += off
			rep.Trials = append(rep.Trials, t)
		}
		for _, b := range c.Report.Blocks {
			b.Block += off
			rep.Blocks = append(rep.Blocks, b)
		}
		orders = append(orders, stats.Orders(len(qc.Variants), qc.Pairs)...)
		rep.PooledClasses = append(rep.PooledClasses, c.Class)
		if c.Report.FinishReason != "complete" {
			reason = "partial"
		}
	}
	rep.Pairs = len(orders)
	cfg.Pairs = rep.Pairs
	rep.Order = orderNames(qc.Variants, orders)
	rep.Comparisons = compare(cfg, rep.Trials, orders)
	rep.Memo = summariseMemo(rep.Variants, rep.Trials)
	rep.FinishReason = reason
	rep.Notes = []string{fmt.Sprintf("POOLED over %d requirement classes (--pool): %s; pairs numbered class after class. Each pair ran whole on one machine, but the classes' machines differ: the effect averages over them. Each class's own report is in %s/.",
		len(classes), strings.Join(rep.PooledClasses, "; "), campaignq.ClassesDir)}
	return rep
}

type blockEquivalence struct {
	block int
	e     *Equivalence
}

// worstEquivalence folds the blocks' logits comparisons into one: equal
// only if every block's is, the largest difference, the smallest cosine,
// and the detail of the block with the largest difference.
func worstEquivalence(eqs []blockEquivalence) *Equivalence {
	if len(eqs) == 0 {
		return nil
	}
	out := &Equivalence{Equal: true, Top1Equal: true, MinCosine: 1, Tolerance: eqs[0].e.Tolerance}
	worst := eqs[0]
	for _, be := range eqs {
		e := be.e
		out.Equal = out.Equal && e.Equal
		out.Top1Equal = out.Top1Equal && e.Top1Equal
		out.MinCosine = min(out.MinCosine, e.MinCosine)
		if e.MaxAbsDiff > worst.e.MaxAbsDiff {
			worst = be
		}
		out.MaxAbsDiff = max(out.MaxAbsDiff, e.MaxAbsDiff)
	}
	out.Detail = fmt.Sprintf("worst of %d blocks' warm-ups, block %d: %s", len(eqs), worst.block, worst.e.Detail)
	return out
}

func orderNames(variants []Variant, orders [][]int) [][]string {
	out := make([][]string, len(orders))
	for b, o := range orders {
		for _, i := range o {
			out[b] = append(out[b], variants[i].Name)
		}
	}
	return out
}

func workersOf(blocks []BlockRun) []string {
	var out []string
	for _, b := range blocks {
		if !slices.Contains(out, b.Worker) {
			out = append(out, b.Worker)
		}
	}
	slices.Sort(out)
	return out
}

func classResult(rep *Report) ClassResult {
	cr := ClassResult{Class: rep.Class, Blocks: rep.Pairs, Collected: len(rep.Blocks), Workers: workersOf(rep.Blocks), Labels: []string{},
		FinishReason: rep.FinishReason, Comparisons: rep.Comparisons, Report: rep}
	if len(rep.PooledClasses) > 0 {
		cr.Class = "pooled: " + strings.Join(rep.PooledClasses, "; ")
	}
	for _, b := range rep.Blocks {
		if !slices.Contains(cr.Labels, b.Labels) {
			cr.Labels = append(cr.Labels, b.Labels)
		}
	}
	slices.Sort(cr.Labels)
	return cr
}

// Collect fetches the committed blocks of the queued experiment in dir
// into its class folders; with wait it waits for every block.
func Collect(ctx context.Context, q *campaignq.Queue, dir string, st *campaignq.State, wait bool, progress func(campaignq.Progress)) error {
	sink, err := NewQueueSink(dir)
	if err != nil {
		return err
	}
	return campaignq.Drive(ctx, q, dir, st, sink, wait, progress)
}
