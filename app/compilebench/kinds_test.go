package compilebench

import (
	"context"
	"fmt"
	"testing"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/model"
)

var (
	decodeSucc  = compilecost.Kind{Graph: compilecost.GraphDecode, Chunk: 1, Successor: true}
	prefill     = compilecost.Kind{Graph: compilecost.GraphPrefill, Chunk: 64}
	prefillSucc = compilecost.Kind{Graph: compilecost.GraphPrefill, Chunk: 64, Successor: true}
)

func TestPredecessors(t *testing.T) {
	ladder := []int{32, 64, 128}
	for _, tc := range []struct {
		i     int
		k     compilecost.Kind
		chunk int
		want  string
	}{
		{0, compilecost.Kind{Graph: compilecost.GraphDecode, Chunk: 1}, 64, ""},
		{1, decodeSucc, 64, "32:1"},   // the rung below
		{0, decodeSucc, 16, "32:16"},  // the first rung after its prefill graph
		{0, decodeSucc, 64, ""},       // no 64-token prefill graph of 32 slots
		{0, decodeSucc, 0, ""},        // no prefill graph at all
		{2, prefillSucc, 64, "128:1"}, // a prefill graph after its decode graph
		{2, prefill, 64, ""},
	} {
		if got := FormatSpecs(Predecessors(ladder, tc.i, tc.k, tc.chunk)); got != tc.want {
			t.Errorf("Predecessors(rung %d, %s, chunk %d) = %q, want %q", tc.i, tc.k, tc.chunk, got, tc.want)
		}
	}
}

func TestParseSpecs(t *testing.T) {
	got, err := ParseSpecs("1024:64, 512:1", 8192)
	if err != nil || FormatSpecs(got) != "1024:64,512:1" {
		t.Errorf("ParseSpecs = %v, %v", got, err)
	}
	for _, bad := range []string{"1024", "0:1", "64:128", "a:b", "99999:1", "1024:64,"} {
		if _, err := ParseSpecs(bad, 8192); err == nil {
			t.Errorf("ParseSpecs(%q) accepted", bad)
		}
	}
}

// TestSweepKinds checks the order and predecessors of the kinds' compiles
// and that they land in the profile with a fit per kind.
func TestSweepKinds(t *testing.T) {
	cfg := SweepConfig{Ladder: []int{64, 128}, Reps: 2, Model: "m", Device: "CPU"}
	p, err := Sweep(context.Background(), cfg, func(_ context.Context, c int) (*Measurement, error) {
		return &Measurement{CompileS: float64(c) / 100, OpenVINOVersion: "v"}, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	compile := func(_ context.Context, c int, k compilecost.Kind, after []model.GraphSpec) (*Measurement, error) {
		calls = append(calls, fmt.Sprintf("%d %s after [%s]", c, k, FormatSpecs(after)))
		s := float64(c) / 10
		if k.Successor {
			s *= 2
		}
		return &Measurement{CompileS: s, PeakRSSBytes: 1 << 20}, nil
	}
	if err := SweepKinds(context.Background(), cfg, p, []compilecost.Kind{decodeSucc, prefill, prefillSucc}, 64, compile, nil); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]string{
		"64 decode.successor after [64:64]", "64 prefill64.first after []", "64 prefill64.successor after [64:1]",
		"128 decode.successor after [64:1]", "128 prefill64.first after []", "128 prefill64.successor after [128:1]",
		"128 decode.successor after [64:1]", "128 prefill64.first after []", "128 prefill64.successor after [128:1]",
		"64 decode.successor after [64:64]", "64 prefill64.first after []", "64 prefill64.successor after [64:1]",
	})
	if got := fmt.Sprint(calls); got != want {
		t.Errorf("compiles\n%s\nwant\n%s", got, want)
	}
	if s, ok := p.PredictKind(prefillSucc, 128); !ok || s != 25.6 {
		t.Errorf("prefill successor at 128: %v %v, want 25.6", s, ok)
	}
	if s, ok := p.PredictKind(decodeSucc, 256); !ok || s < 25.6 {
		t.Errorf("decode successor at 256 from the fit: %v %v", s, ok)
	}
	if len(p.Fits) != 3 {
		t.Errorf("fits %v, want one per kind", p.Fits)
	}
	if err := p.Validate(); err != nil {
		t.Error(err)
	}
}
