package bench

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/app/campaignq"
	"github.com/ovtoolkit/ovrun/internal/schema"
)

// runQueued plays a queued campaign without a server: every item runs on a
// BlockRunner (as a worker would) and its files are stored through the
// QueueSink (as a campaign collects them).
func runQueued(t *testing.T, cfg *Config, dir string, classes []campaignq.Labels, r Runner) *campaignq.State {
	t.Helper()
	if err := writeJSON(filepath.Join(dir, CampaignFile), cfg); err != nil {
		t.Fatal(err)
	}
	items, err := Items(cfg, "test", classes)
	if err != nil {
		t.Fatal(err)
	}
	st := &campaignq.State{Kind: campaignq.KindBench, Campaign: "test", Classes: classes}
	sink, err := NewQueueSink(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		// Through the wire format, as a worker receives it.
		b, err := it.Encode()
		if err != nil {
			t.Fatal(err)
		}
		it, err = campaignq.DecodeItem(b)
		if err != nil {
			t.Fatal(err)
		}
		st.Blocks = append(st.Blocks, campaignq.BlockState{Requires: it.Requires, Block: it.Block, Seq: uint64(i + 1)})
		blk := &campaignq.Block{Item: it, Out: t.TempDir(), Scratch: t.TempDir(), Delivery: "s1-d1"}
		if err := (&BlockRunner{Runner: r}).RunBlock(context.Background(), blk); err != nil {
			t.Fatal(err)
		}
		files := campaignq.Bundle{}
		filepath.WalkDir(blk.Out, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(blk.Out, p)
				files[filepath.ToSlash(rel)], _ = os.ReadFile(p)
			}
			return err
		})
		rec := &campaignq.Record{Campaign: "test", Requires: it.Requires, Block: it.Block, Kind: it.Kind, Delivery: "s1-d1", Deliveries: 1, Worker: "w-" + campaignq.ClassDir(it.Requires)}
		if err := sink.Store(rec, files); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Save(dir); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestQueuedClassReportsMatchALocalCampaign: a class's blocks, run on a
// worker's BlockRunner and collected into its folder, give the report a
// local campaign over the same runs gives; two classes are reported apart
// and pooled only when asked.
func TestQueuedClassReportsMatchALocalCampaign(t *testing.T) {
	cfg := testConfig()
	cfg.Model = t.TempDir() // a worker checks that the model is there
	a, _ := campaignq.ParseLabels("device=CPU,driver=a")
	b, _ := campaignq.ParseLabels("device=CPU,driver=b")
	dir := t.TempDir()
	f := &fakeRunner{}
	runQueued(t, cfg, dir, []campaignq.Labels{a, b}, f)
	var want []string
	for range 2 {
		for _, sl := range QueuePlan(cfg) {
			want = append(want, sl.ID())
		}
	}
	if !slices.Equal(f.calls, want) {
		t.Errorf("worker runs %v, want each block's plan %v", f.calls, want)
	}
	local, err := Run(context.Background(), cfg, Options{Dir: t.TempDir(), Runner: &fakeRunner{}})
	if err != nil {
		t.Fatal(err)
	}
	mr, err := Merge(dir, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(mr.Classes) != 2 || mr.Pooled != nil || !strings.HasPrefix(mr.Overall, "none") {
		t.Fatalf("merge: %d classes, pooled %v, overall %q", len(mr.Classes), mr.Pooled != nil, mr.Overall)
	}
	wantJSON, _ := json.Marshal(local.Comparisons)
	for _, cr := range mr.Classes {
		got, _ := json.Marshal(readReport(t, filepath.Join(dir, cr.Dir)).Comparisons)
		if string(got) != string(wantJSON) {
			t.Errorf("class %s statistics differ from the local campaign's:\n%s\n%s", cr.Class, got, wantJSON)
		}
		if cr.Collected != cfg.Pairs || len(cr.Workers) != 1 {
			t.Errorf("class %s: %d blocks collected by %v", cr.Class, cr.Collected, cr.Workers)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, campaignq.PooledDir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("pooled/ written without --pool: %v", err)
	}
	mr, err = Merge(dir, MergeOptions{Pool: true})
	if err != nil {
		t.Fatal(err)
	}
	pooled := readReport(t, filepath.Join(dir, campaignq.PooledDir))
	if mr.Pooled == nil || len(pooled.PooledClasses) != 2 || pooled.Comparisons[0].N != 2*cfg.Pairs || !strings.HasPrefix(mr.Overall, "pooled over") {
		t.Errorf("pooled: %v classes %v, N %d, overall %q", mr.Pooled != nil, pooled.PooledClasses, pooled.Comparisons[0].N, mr.Overall)
	}
	if md, _ := os.ReadFile(filepath.Join(dir, MergeMD)); !strings.Contains(string(md), "# Class `device=CPU,driver=a`") || !strings.Contains(string(md), "# Pooled") {
		t.Errorf("merge.md:\n%s", md)
	}
}

// TestQueuedReportNamesMissingAndFailedBlocks: a block not collected yet
// and a failed run leave a partial class report that says which.
func TestQueuedReportNamesMissingAndFailedBlocks(t *testing.T) {
	cfg := testConfig()
	cfg.Model, cfg.Pairs = t.TempDir(), 2
	dir := t.TempDir()
	st := runQueued(t, cfg, dir, []campaignq.Labels{{}}, &fakeRunner{failAt: 3}) // block 1's first measured run
	os.Remove(campaignq.BlockFile(campaignq.ClassFolder(dir, campaignq.Labels{}), 2))
	mr, err := Merge(dir, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep := readReport(t, filepath.Join(dir, mr.Classes[0].Dir))
	if !rep.Partial || !strings.HasPrefix(mr.Status, "partial: 1 of 2 blocks") || mr.Overall != "class any, the campaign's only class" {
		t.Errorf("partial %v, merge status %q, overall %q", rep.Partial, mr.Status, mr.Overall)
	}
	for _, r := range rep.Runs {
		switch {
		case r.Pair == 1 && r.Position == 1 && !r.Warmup:
			if !strings.Contains(r.Error, "compile of rung 64 failed") {
				t.Errorf("failed run: error %q", r.Error)
			}
		case r.Pair == 2:
			if !strings.HasPrefix(r.Error, "not collected") {
				t.Errorf("run %d-%d of the missing block: error %q", r.Pair, r.Position, r.Error)
			}
		case r.Error != "":
			t.Errorf("run %d-%d: %q", r.Pair, r.Position, r.Error)
		}
	}
	st.Blocks[1].GaveUp = "given up after 5 deliveries"
	if err := st.Save(dir); err != nil {
		t.Fatal(err)
	}
	Merge(dir, MergeOptions{})
	if r := readReport(t, filepath.Join(dir, mr.Classes[0].Dir)).Runs[7]; !strings.Contains(r.Error, "given up") {
		t.Errorf("run of the given-up block: %q", r.Error)
	}
}

// Merge reads the runs that workers wrote without a schema or with this
// version's, and refuses one that a newer ovrun wrote.
func TestMergeRefusesANewerSummary(t *testing.T) {
	cfg := testConfig()
	cfg.Model, cfg.Pairs = t.TempDir(), 2
	dir := t.TempDir()
	runQueued(t, cfg, dir, []campaignq.Labels{{}}, &fakeRunner{})
	if _, err := Merge(dir, MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(campaignq.ClassFolder(dir, campaignq.Labels{}), "runs", QueuePlan(cfg)[2].ID()+".json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["schema"] = "ovrun.run/2"
	b, _ = json.Marshal(m)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Merge(dir, MergeOptions{}); !errors.Is(err, schema.ErrNewer) || !strings.Contains(err.Error(), path) {
		t.Errorf("merge over a newer summary: %v", err)
	}
}

// TestQueueSinkTakesOnlyTheBlocksFiles: a worker cannot write outside its
// block's runs (a report, another block's run, a path out of the folder).
func TestQueueSinkTakesOnlyTheBlocksFiles(t *testing.T) {
	cfg := testConfig()
	dir := t.TempDir()
	if err := writeJSON(filepath.Join(dir, CampaignFile), cfg); err != nil {
		t.Fatal(err)
	}
	sink, err := NewQueueSink(dir)
	if err != nil {
		t.Fatal(err)
	}
	rec := &campaignq.Record{Campaign: "x", Requires: campaignq.Labels{}, Block: 1, Kind: campaignq.KindBench}
	result := []byte(`{"pair":1}`)
	for _, p := range []string{"report.json", "runs/02-1-grow-eager.json", "campaign.json", "runs/01-1-grow-eager.cache"} {
		if err := sink.Store(rec, campaignq.Bundle{"block.json": result, p: []byte("{}")}); err == nil {
			t.Errorf("result file %q accepted", p)
		}
	}
	if err := sink.Store(&campaignq.Record{Block: 7, Requires: campaignq.Labels{}}, campaignq.Bundle{"block.json": result}); err == nil {
		t.Error("block 7 of a 6-block campaign accepted")
	}
	if sink.Has(campaignq.Labels{}, 1) {
		t.Error("a refused block counts as collected")
	}
	if err := sink.Store(rec, campaignq.Bundle{"block.json": result, "runs/01-1-grow-eager.json": []byte("{}")}); err != nil || !sink.Has(campaignq.Labels{}, 1) {
		t.Errorf("the block's own run: %v", err)
	}
}
