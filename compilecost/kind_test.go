package compilecost

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var (
	decodeFirst = Kind{Graph: GraphDecode, Chunk: 1}
	decodeSucc  = Kind{Graph: GraphDecode, Chunk: 1, Successor: true}
	pre64       = Kind{Graph: GraphPrefill, Chunk: 64}
	pre64Succ   = Kind{Graph: GraphPrefill, Chunk: 64, Successor: true}
)

// TestOlderProfileStillLoads: a cost.json from before compile kinds (one
// number per rung) loads, predicts every decode compile from that number
// and knows no prefill graph.
func TestOlderProfileStillLoads(t *testing.T) {
	p, err := Load("testdata/cost.json")
	if err != nil {
		t.Fatal(err)
	}
	first, _ := p.PredictKind(decodeFirst, 2048)
	succ, ok := p.PredictKind(decodeSucc, 2048)
	if !ok || first != 6.0 || succ != first {
		t.Errorf("decode at 2048: first %v, successor %v (%v); want both the measured 6.0", first, succ, ok)
	}
	if s, ok := p.PredictKind(pre64, 1024); ok || s != 0 {
		t.Errorf("prefill at 1024: %v, %v; want unknown", s, ok)
	}
	if len(p.Kinds()) != 1 || len(p.Fits) != 0 {
		t.Errorf("kinds %v, fits %v; want the decode graph compiled first only", p.Kinds(), p.Fits)
	}
}

// TestKindsRoundTrip: a profile with every kind saves and loads with its
// medians and fits, and its old fields stay what an older reader expects.
func TestKindsRoundTrip(t *testing.T) {
	p := Profile{Model: "m", Device: "CPU", Rungs: []Rung{
		{Capacity: 1024, CompileS: []float64{2, 2.2, 2.1}, SuccessorS: []float64{8, 8.4},
			Prefill: []PrefillCost{{Chunk: 64, FirstS: []float64{9, 9.2}, SuccessorS: []float64{20}}}},
		{Capacity: 2048, CompileS: []float64{3}, SuccessorS: []float64{4}},
	}}
	path := filepath.Join(t.TempDir(), "cost.json")
	if err := p.Save(path); err != nil {
		t.Fatal(err)
	}
	q, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		k        Kind
		capacity int
		want     float64
	}{
		{decodeFirst, 1024, 2.1}, {decodeSucc, 1024, 8.2}, {decodeSucc, 2048, 4},
		{pre64, 1024, 9.1}, {pre64Succ, 1024, 20},
		{pre64, 4096, 9.1}, // one capacity measured: the constant fit
	} {
		if got, ok := q.PredictKind(c.k, c.capacity); !ok || !approx(got, c.want) {
			t.Errorf("PredictKind(%s, %d) = %v, %v; want %v", c.k, c.capacity, got, ok, c.want)
		}
	}
	// Background compiles (budgets) are successors.
	if s, measured := q.PredictSuccessor(2048); s != 4 || !measured {
		t.Errorf("PredictSuccessor(2048) = %v, %v; want the measured 4", s, measured)
	}
	older, _ := Load("testdata/cost.json")
	if s, measured := older.PredictSuccessor(2048); s != 6 || !measured {
		t.Errorf("older profile: PredictSuccessor(2048) = %v, %v; want its one number, 6", s, measured)
	}
	if s, ok := q.PredictKind(Kind{Graph: GraphPrefill, Chunk: 128}, 1024); ok {
		t.Errorf("a 128-token prefill graph nobody measured predicts %v", s)
	}
	if q.Rungs[0].MedianS != 2.1 || q.Fit.N != 2 {
		t.Errorf("old fields: median %v, fit %+v", q.Rungs[0].MedianS, q.Fit)
	}
	// What an older reader sees: the fields it knew, untouched.
	b, _ := os.ReadFile(path)
	var old struct {
		Rungs []struct {
			Capacity int       `json:"capacity"`
			CompileS []float64 `json:"compile_s"`
			MedianS  float64   `json:"median_s"`
		} `json:"rungs"`
	}
	if err := json.Unmarshal(b, &old); err != nil || len(old.Rungs) != 2 || old.Rungs[1].MedianS != 3 {
		t.Errorf("older reader: %+v, %v", old, err)
	}
	for _, k := range []string{"decode.successor", "prefill64.first", "prefill64.successor"} {
		if _, ok := q.Fits[k]; !ok {
			t.Errorf("no fit for %s: %v", k, q.Fits)
		}
	}
}

func approx(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestKindsValidate(t *testing.T) {
	base := func() Profile {
		return Profile{Model: "m", Device: "CPU", Rungs: []Rung{{Capacity: 64, CompileS: []float64{1}}}}
	}
	for _, tc := range []struct {
		name string
		edit func(*Profile)
		want string
	}{
		{"prefill chunk 1", func(p *Profile) { p.Rungs[0].Prefill = []PrefillCost{{Chunk: 1, FirstS: []float64{1}}} }, "chunk 1 is not above 1"},
		{"duplicate chunk", func(p *Profile) {
			p.Rungs[0].Prefill = []PrefillCost{{Chunk: 8, FirstS: []float64{1}}, {Chunk: 8, FirstS: []float64{2}}}
		}, "duplicated"},
		{"negative successor", func(p *Profile) { p.Rungs[0].SuccessorS = []float64{-1} }, "successor_s[0]"},
		{"NaN prefill", func(p *Profile) {
			var nan float64
			nan = nan / nan
			p.Rungs[0].Prefill = []PrefillCost{{Chunk: 8, SuccessorS: []float64{nan}}}
		}, "prefill[chunk 8].successor_s"},
		{"bad kind fit", func(p *Profile) { p.Fits = map[string]Fit{"prefill8.first": {Model: "spline"}} }, "fits[prefill8.first]"},
	} {
		p := base()
		tc.edit(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	// A rung measured only as a successor (the seed's published figures) is valid.
	p := base()
	p.Rungs = append(p.Rungs, Rung{Capacity: 128, SuccessorS: []float64{3}})
	if err := p.Validate(); err != nil {
		t.Error(err)
	}
}

// TestUnderDecodeKind: a profile with under-decode compiles predicts
// background compiles from them (measured rungs by their median, others by
// their fit), names the kind, and falls back to successors, then first
// compiles, where it has none.
func TestUnderDecodeKind(t *testing.T) {
	p := Profile{Model: "m", Device: "CPU", Rungs: []Rung{
		{Capacity: 64, CompileS: []float64{1}},
		{Capacity: 128, CompileS: []float64{1.2}, SuccessorS: []float64{0.5}, UnderDecodeS: []float64{1.4, 1.6, 1.5}},
		{Capacity: 256, CompileS: []float64{1.6}, SuccessorS: []float64{0.7}, UnderDecodeS: []float64{2.5}},
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	p.FillDerived()
	if got := UnderDecodeKind.String(); got != "decode.under_decode" {
		t.Fatalf("String() = %q", got)
	}
	if !slices.Contains(p.Kinds(), UnderDecodeKind) {
		t.Fatalf("Kinds() = %v: no under-decode kind", p.Kinds())
	}
	if _, ok := p.Fits["decode.under_decode"]; !ok {
		t.Fatalf("no fit for the under-decode kind: %v", p.Fits)
	}
	if s, m, basis := p.PredictReady(128, false); s != 1.5 || !m || basis != "decode.under_decode" {
		t.Fatalf("PredictReady(128) = %v %v %q, want the under-decode median 1.5, measured", s, m, basis)
	}
	if s, m, _ := p.PredictBackground(512); m || s <= 2.5 {
		t.Fatalf("PredictBackground(512) = %v %v, want the fit past 2.5", s, m)
	}
	succ := p
	succ.Rungs = slices.Clone(p.Rungs)
	for i := range succ.Rungs {
		succ.Rungs[i].UnderDecodeS, succ.Rungs[i].UnderDecodeMedianS = nil, 0
	}
	succ.Fits = nil
	if s, _, basis := succ.PredictBackground(128); s != 0.5 || basis != "decode.successor" {
		t.Fatalf("without under-decode compiles: %v %q, want the successor 0.5", s, basis)
	}
	if s, ok := succ.PredictKind(UnderDecodeKind, 128); !ok || s != 0.5 {
		t.Fatalf("PredictKind(under_decode) without any = %v %v, want the successor's", s, ok)
	}
	first := Profile{Model: "m", Device: "CPU", Rungs: []Rung{{Capacity: 64, CompileS: []float64{1}}}}
	if s, _, basis := first.PredictBackground(64); s != 1 || basis != "decode.first" {
		t.Fatalf("first compiles only: %v %q", s, basis)
	}
	bad := p
	bad.Rungs = []Rung{{Capacity: 64, CompileS: []float64{1}, UnderDecodeS: []float64{-1}}}
	if err := bad.Validate(); err == nil {
		t.Fatal("a negative under-decode time was accepted")
	}
}

func TestOverlapped(t *testing.T) {
	for _, c := range []struct{ under, solo, overlap, want float64 }{
		{6, 2, 0, 2},     // nothing decodes: the solo pace throughout
		{6, 2, 6, 6},     // decoding outlasts the compile
		{6, 2, 10, 6},    //
		{6, 2, 3, 3 + 1}, // half done beside decoding, the other half alone
		{6, 2, 0.6, 2.4}, // a tenth beside decoding
		{0, 2, 1, 2},     // no under-decode figure
		{6, 0, 1, 6},     // no solo figure
		{6, 2, -1, 2},    // a window already past
	} {
		if got := Overlapped(c.under, c.solo, c.overlap); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Overlapped(%v, %v, %v) = %v, want %v", c.under, c.solo, c.overlap, got, c.want)
		}
	}
}
