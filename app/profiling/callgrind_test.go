package profiling

import (
	"strings"
	"testing"
)

func TestParseCallgrindCompressed(t *testing.T) {
	g, err := ParseCallgrind(open(t, "compressed.callgrind"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(g.Events, " "); got != "Ir Dr" {
		t.Errorf("events = %q", got)
	}
	if g.Cmd != "./toy --flag=1" {
		t.Errorf("cmd = %q", g.Cmd)
	}
	funcs := map[string]*CGFunc{}
	for _, f := range g.Funcs {
		funcs[f.Object+":"+f.Name] = f
	}
	main, work := funcs["/bin/toy:main"], funcs["/bin/toy:work"]
	malloc, anon := funcs["/lib/libc.so.6:malloc"], funcs["/bin/toy:0x00000000004f00a0"]
	if main == nil || work == nil || malloc == nil || anon == nil || len(g.Funcs) != 4 {
		t.Fatalf("functions = %v", funcs)
	}
	tests := []struct {
		name     string
		f        *CGFunc
		self     []int64
		incl     int64
		calls    int64
		file     string
		nCallees int
	}{
		{"main over two parts", main, []int64{9, 1}, 459, 0, "toy.c", 2},
		{"recursive work", work, []int64{390, 39}, 400, 5, "toy.c", 2},
		{"malloc in libc via cob", malloc, []int64{50, 5}, 50, 1, "malloc.c", 0},
		{"unnamed function", anon, []int64{10, 0}, 10, 1, "toy.c", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.f.Self[0] != tt.self[0] || tt.f.Self[1] != tt.self[1] {
				t.Errorf("self = %v, want %v", tt.f.Self, tt.self)
			}
			if got := tt.f.Inclusive(0); got != tt.incl {
				t.Errorf("inclusive = %d, want %d", got, tt.incl)
			}
			if got := tt.f.CallCount(); got != tt.calls {
				t.Errorf("calls = %d, want %d", got, tt.calls)
			}
			if tt.f.File != tt.file {
				t.Errorf("file = %q, want %q", tt.f.File, tt.file)
			}
			if len(tt.f.Calls) != tt.nCallees {
				t.Errorf("callees = %d, want %d", len(tt.f.Calls), tt.nCallees)
			}
		})
	}
	if len(g.Totals) != 2 || g.Totals[0] != 459 || g.Totals[1] != 45 {
		t.Errorf("totals = %v", g.Totals)
	}
}

func TestCallgraphProfileGolden(t *testing.T) {
	g, err := ParseCallgrind(open(t, "compressed.callgrind"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := g.Profile(CallgraphOptions{})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "compressed.golden", describe(p))
}

// TestCallgraphProfileExact checks on a real capture that the profile's
// flat values equal callgrind's self costs, its flat calls equal the call
// counts, and its total equals callgrind's totals line.
func TestCallgraphProfileExact(t *testing.T) {
	g, err := ParseCallgrind(open(t, "depsort.callgrind"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := g.Profile(CallgraphOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Top(p, TopOptions{N: -1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total != g.Totals[0] {
		t.Errorf("profile total %d, callgrind totals %d", rep.Total, g.Totals[0])
	}
	rows := map[string]TopRow{}
	for _, r := range rep.Rows {
		rows[r.Name] = r
	}
	names := map[string]int{}
	for _, f := range g.Funcs {
		names[cgName(f)]++
	}
	for _, f := range g.Funcs {
		r, ok := rows[cgName(f)]
		if f.Self[0] == 0 && !ok || names[cgName(f)] > 1 {
			continue // Top merges functions of the same name, as pprof does
		}
		if r.Flat != f.Self[0] {
			t.Errorf("%s: flat %d, self %d", f.Name, r.Flat, f.Self[0])
		}
		if calls := f.CallCount(); calls > 0 && (r.Calls == nil || *r.Calls != calls) {
			t.Errorf("%s: calls %v, want %d", f.Name, r.Calls, calls)
		}
		if incl := f.Inclusive(0); float64(r.Cum) > 1.001*float64(incl) {
			// Cum is an estimate, but shares are split from the measured
			// inclusive costs, so it stays within rounding of them.
			t.Errorf("%s: cum %d > inclusive %d", f.Name, r.Cum, incl)
		}
	}
	// The toy re-sorts each of its 50 nodes' dependency vectors 40 times.
	sd := rows["sorted_deps(int)"]
	if sd.Calls == nil || *sd.Calls != 2000 {
		t.Fatalf("sorted_deps calls = %v, want 2000", sd.Calls)
	}
	// Everything was collected inside main; only costs below MinFraction
	// (1e-4 of the total per leaf) may stay on stacks that stop short of it.
	if main := rows["main"]; float64(main.Cum) < 0.99*float64(g.Totals[0]) {
		t.Errorf("main cum = %d, want about everything collected (%d)", main.Cum, g.Totals[0])
	}
}

func TestParseCallgrindErrors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"no events", "fn=main\n", "fn= before the events"},
		{"undefined id", "events: Ir\nfn=(3)\n", "line 2: fn=: name id (3) used before it was defined"},
		{"cost before fn", "events: Ir\n10 5\n", "line 2: cost line before any fn="},
		{"calls without cfn", "events: Ir\nfn=a\ncalls=1 0\n", "calls= without a preceding cfn="},
		{"bad cost", "events: Ir\nfn=a\n10 x\n", `"x" is not a number`},
		{"too many values", "events: Ir\nfn=a\n10 1 2\n", "more values than events"},
		{"not callgrind", "hello\n", "unrecognised line"},
		{"empty", "", "no events"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseCallgrind(strings.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
