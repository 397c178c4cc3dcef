package runtime

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/ladder"
)

// fakeLauncher records what a schedule launches.
type fakeLauncher struct {
	caps     []int
	launched []int
	notes    []string
}

func (f *fakeLauncher) Rungs() int                 { return len(f.caps) }
func (f *fakeLauncher) Capacity(i int) int         { return f.caps[i] }
func (f *fakeLauncher) Launched(i int) bool        { return slices.Contains(f.launched, i) }
func (f *fakeLauncher) Launch(i int)               { f.launched = append(f.launched, i) }
func (f *fakeLauncher) Queued(int) (bool, float64) { return false, 0 }
func (f *fakeLauncher) Note(format string, args ...any) {
	f.notes = append(f.notes, fmt.Sprintf(format, args...))
}

func TestSchedules(t *testing.T) {
	tests := []struct {
		kind       ladder.Schedule
		foreground int   // last foreground rung for a sequence starting on rung 1 of 4
		launches   []int // after rung 1, then rung 2, then rung 3 are bound
	}{
		{kind: ladder.UpFront, foreground: 3},
		{kind: ladder.OneAhead, foreground: 1, launches: []int{2, 3}},
		{kind: ladder.LazySchedule, foreground: 1},
	}
	for _, tc := range tests {
		t.Run(string(tc.kind), func(t *testing.T) {
			s, err := NewSchedule(tc.kind, nil, false)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Foreground(1, 4); got != tc.foreground {
				t.Errorf("Foreground(1, 4) = %d, want %d", got, tc.foreground)
			}
			l := &fakeLauncher{caps: []int{32, 64, 128, 256}}
			for i := 1; i < 4; i++ {
				s.Bound(l, i)
				s.Bound(l, i) // a second sequence binding the same rung launches nothing more
				s.Stepped(l, i, 0.01, l.caps[i]-1, 1<<30)
			}
			if !slices.Equal(l.launched, tc.launches) {
				t.Errorf("launched %v, want %v", l.launched, tc.launches)
			}
		})
	}
	if _, err := NewSchedule("eventually", nil, false); err == nil {
		t.Error("an unknown schedule was made")
	}
	if s, _ := NewSchedule(ladder.OneAhead, &compilecost.Profile{}, false); fmt.Sprintf("%T", s) != "*runtime.Budgeted" {
		t.Errorf("one ahead with a compile-cost profile is %T, want *runtime.Budgeted", s)
	}
}

// TestBudgetedLaunchesTwoAhead checks the budgeted schedule's decisions on
// rung 0 of 32/64/128 with 1 ms steps: rung 64's window is the rest of rung
// 32, and rung 128 (10 s) cannot compile within rung 64's 32 ms, so it is
// launched at once, two ahead, with a deadline it is predicted to miss.
func TestBudgetedLaunchesTwoAhead(t *testing.T) {
	profile := &compilecost.Profile{Model: "fake", Device: "CPU", Rungs: []compilecost.Rung{
		{Capacity: 32, CompileS: []float64{0.001}}, {Capacity: 64, CompileS: []float64{0.05}}, {Capacity: 128, CompileS: []float64{10}},
	}}
	b := NewBudgeted(profile)
	l := &fakeLauncher{caps: []int{32, 64, 128}}
	b.Bound(l, 0)
	b.Stepped(l, 0, 0, 5, 1<<30) // no rate yet: nothing decided
	if !slices.Equal(l.launched, []int{1}) || len(b.Budgets(time.Time{})) != 1 || b.Budgets(time.Time{})[0].WindowS != 0 {
		t.Fatalf("after binding rung 0: launched %v, budgets %+v", l.launched, b.Budgets(time.Time{}))
	}
	b.Stepped(l, 0, 0.001, 12, 1<<30)
	b.Stepped(l, 0, 0.001, 13, 1<<30) // decided once per rung
	if !slices.Equal(l.launched, []int{1, 2}) {
		t.Fatalf("launched %v, want rung 2 two ahead", l.launched)
	}
	got := b.Budgets(time.Time{})
	near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
	if len(got) != 2 || got[0].Capacity != 64 || got[0].Lookahead != 1 || !near(got[0].WindowS, 0.020) || !near(got[0].MissedS, 0.030) {
		t.Errorf("budget of 64 = %+v, want one ahead, a 20 ms window (positions 12..31) missed by 30 ms", got[0])
	}
	// Rung 128's compile starts when rung 64's is done (50 ms), after the
	// sequence reached rung 64 (20 ms): it waits there, then decodes rung
	// 64's 32 ms beside rung 128's compile.
	if len(got) != 2 || got[1].Capacity != 128 || got[1].Lookahead != 2 || !near(got[1].WindowS, 0.032) {
		t.Errorf("budget of 128 = %+v, want two ahead with rung 64's 32 ms window", got[1])
	}
	b.Compiled(l, 1, 0.08)
	if bu := b.Budgets(time.Time{})[0]; !near(bu.ActualS, 0.08) || !near(bu.OverrunS, 0.03) {
		t.Errorf("after compiling in 80 ms: %+v", bu)
	}
	if len(l.notes) != 3 || !strings.Contains(l.notes[1], "launching it two ahead") || !strings.Contains(l.notes[2], "over its") {
		t.Errorf("notes %q", l.notes)
	}
}

// A budgeted schedule budgets a cached rung at the profile's import time,
// and an uncached one at its successor compile.
func TestBudgetOfCachedRungIsItsImport(t *testing.T) {
	prof := &compilecost.Profile{Model: "m", Device: "CPU", Rungs: []compilecost.Rung{
		{Capacity: 32, CompileS: []float64{2}, ImportS: []float64{0.25}},
		{Capacity: 64, CompileS: []float64{3}, ImportS: []float64{0.5}},
		{Capacity: 128, CompileS: []float64{4}, ImportS: []float64{0.75}},
	}}
	b := NewBudgeted(prof)
	b.Cached = func(capacity int) bool { return capacity == 64 }
	l := &fakeLauncher{caps: []int{32, 64, 128}}
	b.Bound(l, 0)
	b.Bound(l, 1)
	got := b.Budgets(time.Time{})
	if len(got) != 2 || got[0].PredictedS != 0.5 || !got[0].Imported || got[1].PredictedS != 4 || got[1].Imported {
		t.Fatalf("budgets %+v; want rung 64 at its 0.5 s import, rung 128 at its 4 s compile", got)
	}
}

// A budgeted schedule budgets a rung that reuses a compiled graph at 0, so
// never launches it two ahead for its compile nor reports an overrun.
func TestBudgetOfReusedRungIsZero(t *testing.T) {
	prof := &compilecost.Profile{Model: "m", Device: "CPU", Rungs: []compilecost.Rung{
		{Capacity: 32, CompileS: []float64{2}}, {Capacity: 64, CompileS: []float64{3}}, {Capacity: 128, CompileS: []float64{40}},
	}}
	b := NewBudgeted(prof)
	b.Reused = func(capacity int) bool { return capacity > 32 }
	l := &fakeLauncher{caps: []int{32, 64, 128}}
	b.Bound(l, 0)
	b.Stepped(l, 0, 0.01, 8, 1<<30)
	got := b.Budgets(time.Time{})
	if len(got) != 1 || got[0].PredictedS != 0 || !got[0].Reused || got[0].MissedS != 0 {
		t.Fatalf("budgets %+v; want only rung 64, reused, predicted 0", got)
	}
	b.Compiled(l, 1, 0.05) // a new infer request on the graph
	if bu := b.Budgets(time.Time{})[0]; bu.ActualS != 0.05 || bu.OverrunS != 0 {
		t.Errorf("after the reuse took 50 ms: %+v, want no overrun", bu)
	}
	if len(l.notes) != 0 {
		t.Errorf("notes %q; a reused rung needs no early launch and never overruns", l.notes)
	}
}

// TestBudgetsCorrectOnline: the first background compile takes 2.5x the
// profile's under-decode figure; the next rung's budget is the profile's
// figure times that ratio, and a third learns from the median of both.
// Each budget reports its basis, the profile's figure, the correction it
// used and its error once compiled.
func TestBudgetsCorrectOnline(t *testing.T) {
	prof := &compilecost.Profile{Model: "m", Device: "CPU", Rungs: []compilecost.Rung{
		{Capacity: 32, CompileS: []float64{1}},
		{Capacity: 64, CompileS: []float64{1}, SuccessorS: []float64{0.2}, UnderDecodeS: []float64{0.4}},
		{Capacity: 128, CompileS: []float64{1}, SuccessorS: []float64{0.3}, UnderDecodeS: []float64{0.6}},
		{Capacity: 256, CompileS: []float64{1}, SuccessorS: []float64{0.4}, UnderDecodeS: []float64{0.8}},
	}}
	b := NewBudgeted(prof)
	l := &fakeLauncher{caps: []int{32, 64, 128, 256}}
	near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
	b.Bound(l, 0)
	if bu := b.Budgets(time.Time{})[0]; bu.Basis != "decode.under_decode" || !near(bu.PredictedS, 0.4) || bu.Correction != 1 {
		t.Fatalf("first budget %+v: want the under-decode 0.4 s, uncorrected", bu)
	}
	b.Compiled(l, 1, 1.0) // 2.5x the profile
	if bu := b.Budgets(time.Time{})[0]; !near(bu.Error, 1.5) {
		t.Fatalf("error %v, want 1.5 (2.5x the prediction)", bu.Error)
	}
	b.Bound(l, 1)
	if bu := b.Budgets(time.Time{})[1]; !near(bu.Correction, 2.5) || !near(bu.ProfileS, 0.6) || !near(bu.PredictedS, 1.5) {
		t.Fatalf("second budget %+v: want 0.6 s x 2.5 = 1.5 s", bu)
	}
	b.Compiled(l, 2, 1.2) // 2x the profile: predicted 1.5, error -0.2
	if bu := b.Budgets(time.Time{})[1]; !near(bu.Error, -0.2) {
		t.Fatalf("second error %v, want -0.2", bu.Error)
	}
	b.Bound(l, 2)
	if bu := b.Budgets(time.Time{})[2]; !near(bu.Correction, 2.25) || !near(bu.PredictedS, 0.8*2.25) {
		t.Fatalf("third budget %+v: want the median ratio 2.25", bu)
	}
	if c := b.Correction(compilecost.BasisImport); c != 1 {
		t.Fatalf("imports learnt %v from compiles", c)
	}
}

// TestBudgetOverlapsDecode: a rung measured under decode is predicted at
// its under-decode pace for the part of its compile the rung below decodes
// beside it, and at its solo pace after: once the rate is known, the
// one-ahead successor's prediction becomes Overlapped(under, solo, window).
func TestBudgetOverlapsDecode(t *testing.T) {
	prof := &compilecost.Profile{Model: "m", Device: "CPU", Rungs: []compilecost.Rung{
		{Capacity: 32, CompileS: []float64{1}},
		{Capacity: 64, CompileS: []float64{1}, SuccessorS: []float64{2}, UnderDecodeS: []float64{6}},
	}}
	b := NewBudgeted(prof)
	l := &fakeLauncher{caps: []int{32, 64}}
	b.Bound(l, 0)
	if bu := b.Budgets(time.Time{})[0]; bu.PredictedS != 6 {
		t.Fatalf("before the rate is known: %+v, want the under-decode 6 s", bu)
	}
	b.Stepped(l, 0, 0.1, 2, 1<<30) // 30 steps of 0.1 s left: 3 s beside decoding
	bu := b.Budgets(time.Time{})[0]
	if want := 3 + 0.5*2.0; bu.PredictedS != want || bu.ProfileS != want || bu.WindowS != 3 {
		t.Fatalf("after: %+v, want %v (half beside decoding, half alone)", bu, want)
	}
	if bu.MissedS != 1 {
		t.Fatalf("missed by %v, want 1 s", bu.MissedS)
	}
}
