package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/internal/schema"
	"github.com/ovtoolkit/ovrun/runtime"
)

// Errors a campaign stops with (wrapped, with the detail).
var (
	// ErrRunFailed: a run exited non-zero or left no usable summary (the
	// campaign stops there unless Options.KeepGoing).
	ErrRunFailed = errors.New("campaign stopped")
	// ErrCampaignExists: the output folder already holds a campaign and
	// --resume was not given.
	ErrCampaignExists = errors.New("output folder in use")
	// ErrConfigChanged: --resume with a campaign that differs from the stored one.
	ErrConfigChanged = errors.New("cannot resume")
)

// Options are how a campaign is run, as opposed to what it measures.
type Options struct {
	// Dir is the output folder: campaign.json, runs/, report.*, plots.
	Dir string
	// Resume reuses the complete, matching run summaries already in Dir.
	Resume bool
	// KeepGoing runs on past failed runs instead of stopping.
	KeepGoing bool
	Runner    Runner
	// Progress, when set, is told about every run as it starts.
	Progress func(Event)
	// Meta goes into the report (LoadAvgEnd and Status are filled in).
	Meta Meta
}

// Event is a progress report: run Index of Total is starting.
type Event struct {
	Slot
	Index, Total int
	Pairs        int
	// ETA estimates the time left including this run, from the mean
	// duration of the runs done so far; 0 before the first one finishes.
	ETA time.Duration
	// MeanRun is that mean duration (0 when unknown).
	MeanRun time.Duration
}

// Run executes (or resumes) a campaign, writes report.json, report.md and
// the plots into opt.Dir, and returns the report. On cancellation it kills
// the current run, keeps the finished ones, writes a partial report and
// returns an error wrapping context.Canceled. A failed run stops the
// campaign with an error wrapping ErrRunFailed unless opt.KeepGoing, in
// which case the error comes after the report is written.
func Run(ctx context.Context, cfg *Config, opt Options) (*Report, error) {
	runsDir := filepath.Join(opt.Dir, "runs")
	if err := safefile.MkdirAll(runsDir); err != nil {
		return nil, err
	}
	prev, err := loadConfig(opt.Dir)
	switch {
	case err == nil && !opt.Resume:
		return nil, fmt.Errorf("%w: %s already holds a campaign (%s); continue it with --resume or choose another --out",
			ErrCampaignExists, opt.Dir, CampaignFile)
	case err == nil:
		if d := prev.Diff(cfg); len(d) > 0 {
			return nil, fmt.Errorf("%w: %s was made for another campaign (stored vs now): %s",
				ErrConfigChanged, filepath.Join(opt.Dir, CampaignFile), strings.Join(d, "; "))
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	if err := writeJSON(filepath.Join(opt.Dir, CampaignFile), cfg); err != nil {
		return nil, err
	}

	plan := Plan(cfg)
	recs := make([]RunRecord, len(plan))
	todo := 0
	for i, sl := range plan {
		recs[i] = RunRecord{Pair: sl.Pair, Position: sl.Position, Arm: sl.Arm, Warmup: sl.Warmup,
			SummaryFile: filepath.Join("runs", sl.ID()+".json"), Error: "not run"}
		if opt.Resume {
			s, why, err := loadRun(filepath.Join(opt.Dir, recs[i].SummaryFile), cfg, sl.Arm)
			if err != nil {
				return nil, fmt.Errorf("--resume: %w", err)
			}
			if why == "" {
				recs[i].Summary, recs[i].Reused, recs[i].Error = s, true, ""
				continue
			}
		}
		todo++
	}

	var stopErr error
	var spent time.Duration
	done, failed := 0, 0
	for i, sl := range plan {
		rec := &recs[i]
		if rec.Reused {
			continue
		}
		spec := RunSpec{Slot: sl, JSONPath: filepath.Join(opt.Dir, rec.SummaryFile),
			LogPath: filepath.Join(runsDir, sl.ID()+".log"), CacheDir: cacheDir(cfg, opt.Dir, sl)}
		if cfg.Cache == CacheCold {
			os.RemoveAll(spec.CacheDir) // a cold run starts from an empty cache
		}
		os.Remove(spec.JSONPath) // a stale or partial summary must not pass for this run
		if opt.Progress != nil {
			ev := Event{Slot: sl, Index: i + 1, Total: len(plan), Pairs: cfg.Pairs}
			if done > 0 {
				ev.MeanRun = spent / time.Duration(done)
				ev.ETA = ev.MeanRun * time.Duration(todo-done)
			}
			opt.Progress(ev)
		}
		start := time.Now()
		err := opt.Runner.Run(ctx, cfg, spec)
		if cfg.Cache == CacheCold {
			os.RemoveAll(spec.CacheDir) // compiled blobs are large; nothing reads them again
		}
		if ctx.Err() != nil {
			// A run that wrote its complete summary before the interrupt
			// reached it (it was exporting or exiting) is finished: keep it.
			if sum, why, _ := loadRun(spec.JSONPath, cfg, sl.Arm); why == "" {
				rec.Summary, rec.Error = sum, ""
				stopErr = fmt.Errorf("interrupted after run %d/%d (%s); finished runs kept in %s, continue with --resume: %w",
					i+1, len(plan), sl.ID(), opt.Dir, context.Canceled)
				break
			}
			rec.Error = "interrupted"
			os.Remove(spec.JSONPath)
			stopErr = fmt.Errorf("interrupted during run %d/%d (%s); finished runs kept in %s, continue with --resume: %w",
				i+1, len(plan), sl.ID(), opt.Dir, context.Canceled)
			break
		}
		spent += time.Since(start)
		done++
		why := ""
		if err != nil {
			why = strings.Join(strings.Fields(err.Error()), " ")
		} else if rec.Summary, why, _ = loadRun(spec.JSONPath, cfg, sl.Arm); why != "" {
			rec.Summary = nil
		}
		if why == "" {
			rec.Error = ""
			continue
		}
		rec.Error = why
		failed++
		if !opt.KeepGoing {
			stopErr = fmt.Errorf("%w: run %d/%d (%s) failed: %s (log %s); finished runs kept, --resume continues, --keep-going runs past failures",
				ErrRunFailed, i+1, len(plan), sl.ID(), why, spec.LogPath)
			break
		}
	}
	if stopErr == nil && failed > 0 {
		stopErr = fmt.Errorf("%d of %d runs failed (see %s): %w", failed, len(plan), filepath.Join(opt.Dir, "report.md"), ErrRunFailed)
	}

	meta := opt.Meta
	meta.Machine.LoadAvgEnd = LoadAvg()
	if errors.Is(stopErr, context.Canceled) {
		meta.Status = "interrupted; partial"
	}
	rep := BuildReport(cfg, recs, meta)
	if err := rep.WriteFiles(opt.Dir); err != nil {
		return rep, errors.Join(stopErr, err)
	}
	return rep, stopErr
}

// cacheDir is the compiled-rung cache of slot's run: the campaign's for a
// warm campaign, a fresh one per run for a cold one, none otherwise.
func cacheDir(cfg *Config, dir string, sl Slot) string {
	switch cfg.Cache {
	case CacheWarm:
		return filepath.Join(dir, CacheDirName)
	case CacheCold:
		return filepath.Join(dir, "runs", sl.ID()+".cache")
	}
	return ""
}

// loadRun reads a run summary and checks that it is complete and belongs
// to this campaign's arm; why says what is wrong ("" when usable). err,
// also in why, is a summary this ovrun must not read (a newer schema, or
// another kind of file): --resume and merge stop on it rather than run
// the slot again or report it failed.
func loadRun(path string, cfg *Config, arm string) (s *runtime.Summary, why string, err error) {
	b, err := safefile.ReadFile(path, maxJSONBytes)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, "no summary written", nil
		}
		return nil, err.Error(), nil
	}
	if err := schema.CheckJSON(b, runtime.SummarySchema); err != nil {
		err = fmt.Errorf("%s: %w", path, err)
		return nil, err.Error(), err
	}
	s = new(runtime.Summary)
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Sprintf("unreadable summary: %v", err), nil
	}
	if ok, why := cfg.matches(s, arm); !ok {
		return nil, why, nil
	}
	s.Schema = runtime.SummarySchema // read into this version's fields: report.json writes it so
	return s, "", nil
}

// WriteFiles writes the plots, report.json and report.md into dir.
func (r *Report) WriteFiles(dir string) error {
	var errs []error
	r.Plots = nil
	plots := []struct {
		name string
		draw func() []byte
	}{
		{PlotTimeline, func() []byte { return TimelineSVG(r, r.showcasePair()) }},
		{PlotKV, func() []byte { return KVSVG(r, r.showcasePair()) }},
		{PlotEndpoints, func() []byte { return EndpointsSVG(r) }},
	}
	for _, p := range plots {
		b := p.draw()
		if b == nil {
			continue
		}
		if err := writeFile(filepath.Join(dir, p.name), b); err != nil {
			errs = append(errs, err)
			continue
		}
		r.Plots = append(r.Plots, p.name)
	}
	errs = append(errs, writeJSON(filepath.Join(dir, "report.json"), r))
	var md strings.Builder
	if err := r.WriteMarkdown(&md); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, writeFile(filepath.Join(dir, "report.md"), []byte(md.String())))
	return errors.Join(errs...)
}
