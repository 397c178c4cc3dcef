package compilebench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/compilecost"
)

func TestSweepOrder(t *testing.T) {
	got := fmt.Sprint(SweepOrder([]int{32, 64, 128}, 3))
	want := "[[0 32] [0 64] [0 128] [1 128] [1 64] [1 32] [2 32] [2 64] [2 128]]"
	if got != want {
		t.Errorf("order = %s, want %s", got, want)
	}
}

func TestSweep(t *testing.T) {
	var seen []int
	compile := func(_ context.Context, c int) (*Measurement, error) {
		seen = append(seen, c)
		n := float64(len(seen))
		return &Measurement{CompileS: 0.5 + 0.001*float64(c) + 0.01*n, CompileCPUS: 1, IRBuildS: 0.1,
			PeakRSSBytes: int64(c) * 1000, OpenVINOVersion: "2026.3.0"}, nil
	}
	var progress []SweepProgress
	p, err := Sweep(context.Background(), SweepConfig{Ladder: []int{100, 200, 400}, Reps: 2, Model: "/m/small/", Device: "CPU"},
		compile, func(sp SweepProgress) { progress = append(progress, sp) })
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seen) != "[100 200 400 400 200 100]" || len(progress) != 6 || progress[5].Done != 6 || progress[5].Total != 6 {
		t.Errorf("compiles %v, progress %+v", seen, progress)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.Model != "small" || p.OpenVINOVersion != "2026.3.0" || len(p.Rungs) != 3 {
		t.Fatalf("profile = %+v", p)
	}
	r := p.Rungs[0]
	if len(r.CompileS) != 2 || r.PeakRSSBytes != 100_000 || r.MedianS != (0.61+0.66)/2 {
		t.Errorf("rung 100 = %+v", r)
	}
	if p.Fit.Model != compilecost.FitLinear && p.Fit.Model != compilecost.FitPower || p.Fit.N != 3 || p.Fit.R2 < 0.99 {
		t.Errorf("fit = %+v", p.Fit)
	}
}

func TestSweepPartial(t *testing.T) {
	n := 0
	compile := func(_ context.Context, c int) (*Measurement, error) {
		n++
		if n == 3 {
			return nil, errors.New("compile-once: out of memory")
		}
		return &Measurement{CompileS: 1}, nil
	}
	p, err := Sweep(context.Background(), SweepConfig{Ladder: []int{100, 200, 400}, Reps: 2, Model: "m", Device: "CPU"}, compile, nil)
	if err == nil || !strings.Contains(err.Error(), "capacity 400, repetition 1: compile-once: out of memory") {
		t.Fatalf("err = %v", err)
	}
	if p == nil || len(p.Rungs) != 2 || p.Rungs[1].Capacity != 200 {
		t.Fatalf("partial profile = %+v", p)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("partial profile invalid: %v", err)
	}
	if _, err := Sweep(context.Background(), SweepConfig{Ladder: []int{200, 100}, Reps: 1}, compile, nil); err == nil {
		t.Error("descending ladder accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if p, err := Sweep(ctx, SweepConfig{Ladder: []int{100}, Reps: 1, Model: "m", Device: "CPU"}, compile, nil); p != nil || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v %v", p, err)
	}
}
