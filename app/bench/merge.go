package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ovtoolkit/ovrun/app/campaignq"
	"github.com/ovtoolkit/ovrun/internal/safefile"
)

// The output folder of a queued campaign: campaign.json and queue.json at
// the top, then the queue's layout (campaignq.ClassFolder): one folder per
// requirement class in the layout a local campaign writes (campaign.json,
// runs/, report.*, plots) plus blocks/, where each block ran; pooled/ with
// --pool; merge.json, and MergeMD beside it.
const MergeMD = "merge.md"

// BlockRun is where one block of a queued campaign ran.
type BlockRun struct {
	Pair   int    `json:"pair"`
	Class  string `json:"class"`
	Worker string `json:"worker"`
	Host   string `json:"host"`
	Labels string `json:"labels"`
	// Delivery is the attempt whose runs count; Deliveries above 1 mean
	// earlier attempts died or timed out, and their runs were dropped.
	Delivery   string    `json:"delivery"`
	Deliveries uint64    `json:"deliveries"`
	Machine    Machine   `json:"machine"`
	StartedAt  time.Time `json:"started_at"`
	WallS      float64   `json:"wall_s"`
}

// storedBlock is blocks/NN.json in a class folder.
type storedBlock struct {
	Record *campaignq.Record `json:"record"`
	Result BlockResult       `json:"result"`
}

// QueueSink writes the collected blocks of a queued campaign into its
// class folders (a campaignq.Sink).
type QueueSink struct {
	Dir    string
	Config *Config
	// failed names the failed runs of the blocks stored, in order.
	failed []string
}

var _ campaignq.Sink = (*QueueSink)(nil)

// NewQueueSink is the sink of the queued campaign in dir.
func NewQueueSink(dir string) (*QueueSink, error) {
	cfg, err := loadConfig(dir)
	if err != nil {
		return nil, err
	}
	return &QueueSink{Dir: dir, Config: cfg}, nil
}

// Has reports whether the block is collected: its blocks/NN.json, written
// last, exists.
func (s *QueueSink) Has(req campaignq.Labels, block int) bool {
	_, err := os.Stat(campaignq.BlockFile(campaignq.ClassFolder(s.Dir, req), block))
	return err == nil
}

// Store writes a block's summaries and logs under the class's runs/, then
// blocks/NN.json. Only the files the block's plan names are accepted.
func (s *QueueSink) Store(rec *campaignq.Record, files campaignq.Bundle) error {
	name := fmt.Sprintf("block %d of class %s", rec.Block, campaignq.ClassDir(rec.Requires))
	if rec.Block < 1 || rec.Block > s.Config.Pairs {
		return fmt.Errorf("%s: the campaign has %d blocks", name, s.Config.Pairs)
	}
	allowed := map[string]bool{}
	for _, sl := range BlockPlan(s.Config, rec.Block) {
		allowed["runs/"+sl.ID()+".json"], allowed["runs/"+sl.ID()+".log"] = true, true
	}
	var res BlockResult
	if err := json.Unmarshal(files[blockResultFile], &res); err != nil {
		return fmt.Errorf("%s: %s: %w", name, blockResultFile, err)
	}
	dir := campaignq.ClassFolder(s.Dir, rec.Requires)
	if err := errors.Join(safefile.MkdirAll(filepath.Join(dir, "runs")), safefile.MkdirAll(filepath.Join(dir, campaignq.BlocksDir))); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, CampaignFile)); err != nil {
		if err := writeJSON(filepath.Join(dir, CampaignFile), s.Config); err != nil {
			return err
		}
	}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		if p == blockResultFile {
			continue
		}
		if !allowed[p] {
			return fmt.Errorf("%s: unexpected result file %q", name, p)
		}
		if err := writeFile(filepath.Join(dir, filepath.FromSlash(p)), files[p]); err != nil {
			return err
		}
	}
	for _, r := range res.Runs {
		if r.Error != "" {
			s.failed = append(s.failed, fmt.Sprintf("%s, run %s failed on %s: %s", name, r.ID, rec.Worker, r.Error))
		}
	}
	return writeJSON(campaignq.BlockFile(dir, rec.Block), storedBlock{Record: rec, Result: res})
}

// MergeOptions are how Merge reports.
type MergeOptions struct {
	// Pool joins every class's blocks into one more report (pooled/);
	// without it a campaign of several classes has no overall statistics.
	Pool bool
	// Meta goes into every report (GoVersion, Command).
	Meta Meta
}

// MergeReport is DIR/merge.json: each class's result and the overall one.
type MergeReport struct {
	Campaign string   `json:"campaign"`
	Queue    string   `json:"queue"`
	Arms     []string `json:"arms"`
	Control  string   `json:"control"`
	// Pairs is the number of blocks of every class.
	Pairs   int           `json:"pairs"`
	Classes []ClassResult `json:"classes"`
	// Pooled joins every class's blocks (only with --pool and more than
	// one class).
	Pooled *ClassResult `json:"pooled,omitempty"`
	// Overall names the overall result: the only class's, the pooled
	// one, or none (several classes, not pooled).
	Overall string `json:"overall"`
	Status  string `json:"status"`
	// WallS is the time from publishing to the last block collected (0
	// while blocks are missing).
	WallS float64 `json:"wall_s"`
}

// ClassResult is one requirement class (or the pool of them).
type ClassResult struct {
	Class string `json:"class"`
	// Dir is the class's folder, relative to the campaign folder.
	Dir       string `json:"dir"`
	Blocks    int    `json:"blocks"`
	Collected int    `json:"collected"`
	GaveUp    int    `json:"gave_up"`
	// Workers and Labels are the distinct workers and label sets that
	// ran the blocks.
	Workers     []string     `json:"workers"`
	Labels      []string     `json:"labels"`
	Status      string       `json:"status"`
	Comparisons []Comparison `json:"comparisons"`
	// Report is the class's full report (report.json in Dir).
	Report *Report `json:"-"`
}

// ErrNotQueued: merge of a folder that holds no queued campaign.
var ErrNotQueued = errors.New("not a queued campaign")

// Merge writes the reports of the queued campaign in dir from the blocks
// collected so far: each class's folder gets the report a local campaign
// computes (report.json, report.md, plots), the same code over the same
// runs; with opt.Pool and several classes, pooled/ gets one over all of
// them; merge.json and merge.md say which is the overall result.
func Merge(dir string, opt MergeOptions) (*MergeReport, error) {
	st, err := campaignq.LoadState(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has no %s (a campaign run with --queue has)", ErrNotQueued, dir, campaignq.StateFile)
	}
	if err != nil {
		return nil, err
	}
	if st.Kind != campaignq.KindBench {
		return nil, fmt.Errorf("%w: %s holds an %s campaign", ErrNotQueued, dir, st.Kind)
	}
	cfg, err := loadConfig(dir)
	if err != nil {
		return nil, err
	}
	mr := &MergeReport{Campaign: st.Campaign, Queue: st.URL, Arms: cfg.Arms, Control: cfg.Control(), Pairs: cfg.Pairs}
	var errs []error
	missing := 0
	for _, req := range st.Classes {
		rep, err := classReport(dir, cfg, req, st, opt.Meta)
		if err != nil {
			errs = append(errs, err)
			if rep == nil {
				continue
			}
		}
		cr := classResult(rep, st, req)
		cr.Dir = filepath.Join(campaignq.ClassesDir, campaignq.ClassDir(req))
		missing += cr.Blocks - cr.Collected
		mr.Classes = append(mr.Classes, cr)
	}
	switch {
	case len(mr.Classes) == 1:
		mr.Overall = "class " + mr.Classes[0].Class + ", the campaign's only class"
	case opt.Pool && len(mr.Classes) > 1:
		rep := pooledReport(cfg, mr.Classes, opt.Meta)
		pdir := filepath.Join(dir, campaignq.PooledDir)
		if err := errors.Join(safefile.MkdirAll(pdir), rep.WriteFiles(pdir)); err != nil {
			errs = append(errs, err)
		}
		cr := classResult(rep, nil, nil)
		cr.Dir, cr.Blocks = campaignq.PooledDir, len(rep.Order)
		for _, c := range mr.Classes {
			cr.Collected += c.Collected
			cr.GaveUp += c.GaveUp
		}
		mr.Pooled = &cr
		mr.Overall = "pooled over " + strings.Join(rep.PooledClasses, " and ") + " (--pool)"
	default:
		mr.Overall = fmt.Sprintf("none: the %d classes are separate experiments and are not pooled (ovrun bench merge --pool pools them)", len(mr.Classes))
	}
	if missing == 0 && !st.CollectedAt.IsZero() {
		mr.WallS = st.CollectedAt.Sub(st.PublishedAt).Seconds()
	}
	mr.Status = fmt.Sprintf("%d of %d blocks collected", len(st.Blocks)-missing, len(st.Blocks))
	if missing > 0 {
		mr.Status = "partial: " + mr.Status
	}
	if err := writeJSON(filepath.Join(dir, campaignq.MergeJSON), mr); err != nil {
		errs = append(errs, err)
	}
	if err := writeFile(filepath.Join(dir, MergeMD), []byte(mr.markdown())); err != nil {
		errs = append(errs, err)
	}
	return mr, errors.Join(errs...)
}

// classReport builds and writes the report of one class from its folder.
func classReport(dir string, cfg *Config, req campaignq.Labels, st *campaignq.State, meta Meta) (*Report, error) {
	cdir := campaignq.ClassFolder(dir, req)
	gaveUp := map[int]string{}
	for _, b := range st.Blocks {
		if b.Requires.String() == req.String() && b.GaveUp != "" {
			gaveUp[b.Block] = b.GaveUp
		}
	}
	blocks := map[int]*storedBlock{}
	var runs []BlockRun
	for p := 1; p <= cfg.Pairs; p++ {
		b, err := safefile.ReadFile(campaignq.BlockFile(cdir, p), maxJSONBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		sb := new(storedBlock)
		if err == nil {
			err = json.Unmarshal(b, sb)
		}
		if err == nil && sb.Record == nil {
			err = errors.New("no record")
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", campaignq.BlockFile(cdir, p), err)
		}
		blocks[p] = sb
		br := BlockRun{Pair: p, Class: campaignq.ClassDir(req), Worker: sb.Record.Worker, Host: sb.Record.Host,
			Labels: sb.Record.Labels.String(), Delivery: sb.Record.Delivery, Deliveries: sb.Record.Deliveries,
			StartedAt: sb.Record.StartedAt, WallS: sb.Record.WallS}
		json.Unmarshal(sb.Record.Machine, &br.Machine) // best effort: a worker may describe nothing
		br.Machine.LoadAvgEnd = sb.Result.LoadAvgEnd
		runs = append(runs, br)
	}
	var recs []RunRecord
	for _, sl := range QueuePlan(cfg) {
		rr := RunRecord{Pair: sl.Pair, Position: sl.Position, Arm: sl.Arm, Warmup: sl.Warmup,
			SummaryFile: filepath.Join("runs", sl.ID()+".json")}
		sb := blocks[sl.Pair]
		switch {
		case sb == nil && gaveUp[sl.Pair] != "":
			rr.Error = "block " + gaveUp[sl.Pair]
		case sb == nil:
			rr.Error = "not collected: the block has not finished on a worker"
		default:
			s, why, err := loadRun(filepath.Join(cdir, rr.SummaryFile), cfg, sl.Arm)
			if err != nil {
				return nil, err
			}
			if i := slices.IndexFunc(sb.Result.Runs, func(r RunResult) bool { return r.ID == sl.ID() }); i >= 0 && sb.Result.Runs[i].Error != "" {
				why = sb.Result.Runs[i].Error
			}
			if why == "" {
				rr.Summary = s
			} else {
				rr.Error = why
			}
		}
		recs = append(recs, rr)
	}
	rep := BuildReport(cfg, recs, meta)
	rep.Class, rep.Blocks = campaignq.ClassDir(req), runs
	if err := safefile.MkdirAll(cdir); err != nil {
		return rep, err
	}
	return rep, errors.Join(writeJSON(filepath.Join(cdir, CampaignFile), cfg), rep.WriteFiles(cdir))
}

// pooledReport joins the classes' runs into one report, the pairs
// numbered class after class.
func pooledReport(cfg *Config, classes []ClassResult, meta Meta) *Report {
	pcfg := *cfg
	pcfg.Pairs = cfg.Pairs * len(classes)
	var recs []RunRecord
	var blocks []BlockRun
	var order [][]string
	var names []string
	for i, c := range classes {
		off := i * cfg.Pairs
		for _, rr := range c.Report.Runs {
			rr.Pair += off
			rr.SummaryFile = filepath.Join("..", c.Dir, rr.SummaryFile)
			recs = append(recs, rr)
		}
		for _, b := range c.Report.Blocks {
			b.Pair += off
			blocks = append(blocks, b)
		}
		order = append(order, c.Report.Order...)
		names = append(names, c.Class)
	}
	rep := BuildReport(&pcfg, recs, meta)
	rep.Order, rep.Blocks, rep.PooledClasses = order, blocks, names
	return rep
}

func classResult(rep *Report, st *campaignq.State, req campaignq.Labels) ClassResult {
	cr := ClassResult{Class: rep.Class, Status: rep.Status, Comparisons: rep.Comparisons, Report: rep, Blocks: len(rep.Order),
		Workers: []string{}, Labels: []string{}}
	for _, b := range rep.Blocks {
		cr.Collected++
		if !slices.Contains(cr.Workers, b.Worker) {
			cr.Workers = append(cr.Workers, b.Worker)
		}
		if !slices.Contains(cr.Labels, b.Labels) {
			cr.Labels = append(cr.Labels, b.Labels)
		}
	}
	if st != nil {
		for _, b := range st.Blocks {
			if b.Requires.String() == req.String() && b.GaveUp != "" {
				cr.GaveUp++
			}
		}
	}
	slices.Sort(cr.Workers)
	slices.Sort(cr.Labels)
	return cr
}
