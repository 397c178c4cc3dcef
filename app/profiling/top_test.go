package profiling

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

// handBuilt makes a profile from "leaf<-caller<-..." stacks (object "app"
// unless a frame is written name@object) with [value, calls] pairs.
func handBuilt(t *testing.T, valueType, unit string, stacks map[string][2]int64, nodes string) *profile.Profile {
	t.Helper()
	b := newBuilder([]*profile.ValueType{{Type: valueType, Unit: unit}, {Type: "calls", Unit: "count"}}, false)
	b.p.DefaultSampleType = valueType
	for stack, v := range stacks {
		var frames []Frame
		for _, f := range strings.Split(stack, "<-") {
			name, obj, ok := strings.Cut(f, "@")
			if !ok {
				obj = "/usr/lib/app.so"
			}
			frames = append(frames, Frame{Function: name, Object: obj})
		}
		b.add(frames, v[:], nil)
	}
	if nodes != "" {
		SetMeta(b.p, MetaGraphNodes, nodes)
	}
	if err := b.p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	return b.p
}

func TestTop(t *testing.T) {
	p := handBuilt(t, "instructions", "count", map[string][2]int64{
		"sort<-sched<-main":      {600, 0},
		"sched<-main":            {100, 10},
		"main":                   {50, 0},
		"sched<-sched<-main":     {150, 0}, // recursion: cum counts sched once
		"malloc@libc.so.6<-sort": {100, 0},
		"sort<-sched":            {0, 5000},
		"malloc@libc.so.6<-main": {0, 9000},
	}, "40")
	rep, err := Top(p, TopOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name       string
		flat, cum  int64
		calls      int64
		repeated   bool
		flatPctX10 int64
	}{
		{"sort", 600, 700, 5000, true, 600},
		{"sched", 250, 850, 10, false, 250},
		{"malloc", 100, 100, 9000, false, 100}, // system library: never flagged
		{"main", 50, 900, 0, false, 50},
	}
	if len(rep.Rows) != len(want) {
		t.Fatalf("rows = %+v", rep.Rows)
	}
	if rep.Total != 1000 || rep.GraphNodes != 40 || !rep.HasCalls || rep.RepeatRatio != DefaultRepeatRatio {
		t.Errorf("report = %+v", rep)
	}
	for i, w := range want {
		r := rep.Rows[i]
		if r.Name != w.name || r.Flat != w.flat || r.Cum != w.cum || *r.Calls != w.calls || r.Repeated != w.repeated {
			t.Errorf("row %d = %s flat %d cum %d calls %d repeated %v; want %+v", i, r.Name, r.Flat, r.Cum, *r.Calls, r.Repeated, w)
		}
		if int64(r.FlatPct*10+0.5) != w.flatPctX10 {
			t.Errorf("row %d flat%% = %v", i, r.FlatPct)
		}
	}
	if len(rep.Repeated) != 1 || rep.Repeated[0].Name != "sort" || *rep.Repeated[0].CallsPerNode != 125 {
		t.Errorf("repeated = %+v", rep.Repeated)
	}

	t.Run("by object", func(t *testing.T) {
		rep, err := Top(p, TopOptions{By: ByObject})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Rows) != 2 || rep.Rows[0].Name != "app.so" || rep.Rows[0].Flat != 900 || rep.Rows[0].Cum != 1000 ||
			rep.Rows[1].Name != "libc.so.6" || rep.Rows[1].Flat != 100 || rep.Rows[1].Calls != nil {
			t.Errorf("rows = %+v", rep.Rows)
		}
	})
	t.Run("ratio and n", func(t *testing.T) {
		rep, err := Top(p, TopOptions{N: 1, Nodes: 1000, RepeatRatio: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Rows) != 1 || len(rep.Repeated) != 1 || rep.GraphNodes != 1000 {
			t.Errorf("report = %+v", rep)
		}
	})
	t.Run("sample type by name", func(t *testing.T) {
		rep, err := Top(p, TopOptions{SampleType: "calls"})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Rows[0].Name != "malloc" || rep.Rows[0].Flat != 9000 || rep.HasCalls {
			t.Errorf("rows = %+v", rep.Rows[0])
		}
		if _, err := Top(p, TopOptions{SampleType: "cycles"}); err == nil || !strings.Contains(err.Error(), `no sample type "cycles"`) {
			t.Errorf("err = %v", err)
		}
		if _, err := Top(p, TopOptions{By: "line"}); err == nil {
			t.Error("by line accepted")
		}
	})
}

func TestWriteTopGolden(t *testing.T) {
	p := handBuilt(t, "instructions", "count", map[string][2]int64{
		"sort<-sched<-main": {6_000_000, 33_330_000},
		"sched<-main":       {2_000_000, 100},
		"main":              {12_345, 0},
	}, "250")
	rep, err := Top(p, TopOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteTop(&b, rep, 60); err != nil {
		t.Fatal(err)
	}
	golden(t, "top.golden", b.String())
}

func TestDiff(t *testing.T) {
	a := handBuilt(t, "cpu-clock", "nanoseconds", map[string][2]int64{
		"sort<-sched<-main": {600e6, 0},
		"sched<-main":       {300e6, 0},
		"old<-main":         {50e6, 0},
	}, "")
	b := handBuilt(t, "cpu-clock", "nanoseconds", map[string][2]int64{
		"sort<-sched<-main": {100e6, 0},
		"sched<-main":       {320e6, 0},
		"memo<-sched<-main": {30e6, 0},
	}, "")
	rep, err := Diff(a, b, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.TotalA != 950e6 || rep.TotalB != 450e6 {
		t.Errorf("totals %d %d", rep.TotalA, rep.TotalB)
	}
	var order []string
	for _, r := range rep.Rows {
		order = append(order, r.Name)
	}
	if got := strings.Join(order, ","); got != "sort,old,memo,sched,main" {
		t.Errorf("order = %s, want by |flat delta| then |cum delta|", got)
	}
	s := rep.Rows[0]
	if s.FlatA != 600e6 || s.FlatB != 100e6 || s.FlatDelta != -500e6 || s.CumDelta != -500e6 {
		t.Errorf("sort row = %+v", s)
	}
	if m := rep.Rows[4]; m.Name != "main" || m.FlatDelta != 0 || m.CumDelta != -500e6 {
		t.Errorf("main row = %+v", m)
	}
	byCum, err := Diff(a, b, DiffOptions{SortBy: "cum", N: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(byCum.Rows) != 2 || byCum.Rows[0].Name != "main" && byCum.Rows[0].Name != "sort" {
		t.Errorf("by cum = %+v", byCum.Rows)
	}
	var out bytes.Buffer
	if err := WriteDiff(&out, rep, 40); err != nil {
		t.Fatal(err)
	}
	golden(t, "diff.golden", out.String())

	t.Run("errors", func(t *testing.T) {
		c := handBuilt(t, "instructions", "count", map[string][2]int64{"x": {1, 0}}, "")
		if _, err := Diff(a, c, DiffOptions{}); err == nil || !strings.Contains(err.Error(), `profile B: profile has no sample type "cpu-clock"`) {
			t.Errorf("err = %v", err)
		}
		if _, err := Diff(a, b, DiffOptions{SortBy: "name"}); err == nil {
			t.Error("sort by name accepted")
		}
	})
}

func TestFormatValue(t *testing.T) {
	tests := []struct {
		v    int64
		unit string
		want string
	}{
		{1_500_000_000, "nanoseconds", "1.500s"},
		{33_330_000, "count", "33.33M"},
		{-2_500_000_000, "count", "-2.50G"},
		{12_345, "count", "12.3k"},
		{999, "count", "999"},
	}
	for _, tt := range tests {
		if got := FormatValue(tt.v, tt.unit); got != tt.want {
			t.Errorf("FormatValue(%d, %s) = %s, want %s", tt.v, tt.unit, got, tt.want)
		}
	}
}

// TestDiffInterposedFunction: a function a preloaded library interposes has
// the same name as the one it replaces; the two are different rows, so the
// diff shows time leaving one object and arriving in the other. The same
// object under another folder (a lib:DIR build) is still the same row.
func TestDiffInterposedFunction(t *testing.T) {
	a := handBuilt(t, "cpu-clock", "nanoseconds", map[string][2]int64{
		"__dynamic_cast@/usr/lib/libstdc++.so.6<-pass@/base/libopenvino.so": {300, 0},
		"pass@/base/libopenvino.so":                                         {700, 0},
	}, "")
	b := handBuilt(t, "cpu-clock", "nanoseconds", map[string][2]int64{
		"__dynamic_cast@/work/libdyncast_memo.so<-pass@/patched/libopenvino.so": {40, 0},
		"__dynamic_cast@/usr/lib/libstdc++.so.6<-pass@/patched/libopenvino.so":  {10, 0},
		"pass@/patched/libopenvino.so":                                          {700, 0},
	}, "")
	rep, err := Diff(a, b, DiffOptions{N: -1})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int64{}
	for _, r := range rep.Rows {
		got[r.Name+"@"+r.Object] = [2]int64{r.FlatA, r.FlatB}
	}
	want := map[string][2]int64{
		"__dynamic_cast@/usr/lib/libstdc++.so.6":  {300, 10},
		"__dynamic_cast@/work/libdyncast_memo.so": {0, 40},
		"pass@/base/libopenvino.so":               {700, 700}, // its cum changed; one row for both folders
	}
	if len(got) != len(want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s: flat %v, want %v (rows %v)", k, g, w, got)
		}
	}
	top, err := Top(b, TopOptions{N: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Rows) != 3 {
		t.Errorf("top of B has %d rows, want pass and two __dynamic_cast", len(top.Rows))
	}
}
