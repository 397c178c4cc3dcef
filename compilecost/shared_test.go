package compilecost

import "testing"

// TestSharedStepPenalty checks the estimate against the models it was
// measured on (the comment's figures, within the spread of those
// measurements), that it shrinks as a step reads more weights and grows
// with the layers, and that without a model it is the default and never
// above it.
func TestSharedStepPenalty(t *testing.T) {
	for _, c := range []struct {
		name        string
		layers      int
		weightBytes int64
		lo, hi      float64
	}{
		{"SmolLM2-135M Q4_1", 30, 96576768, 0.2, 0.4},
		{"small f16", 8, 78487552, 0.05, 0.2},
		{"qwen2.5-0.5b f16", 24, 991002624, 0.02, 0.06},
	} {
		if p := SharedStepPenalty(c.layers, c.weightBytes); p < c.lo || p > c.hi {
			t.Errorf("%s: %.3f, want %.2f-%.2f", c.name, p, c.lo, c.hi)
		}
	}
	if a, b := SharedStepPenalty(24, 100e6), SharedStepPenalty(24, 1e9); a <= b {
		t.Errorf("24 layers: %.3f reading 100 MB a step, %.3f reading 1 GB; want the first larger", a, b)
	}
	if a, b := SharedStepPenalty(8, 500e6), SharedStepPenalty(48, 500e6); a >= b {
		t.Errorf("500 MB a step: %.3f with 8 layers, %.3f with 48; want the second larger", a, b)
	}
	for _, c := range [][2]int64{{0, 0}, {0, 1e9}, {30, 0}, {-1, -1}} {
		if p := SharedStepPenalty(int(c[0]), c[1]); p != DefaultSharedStepPenalty {
			t.Errorf("SharedStepPenalty(%d, %d) = %.3f, want the default %.2f", c[0], c[1], p, DefaultSharedStepPenalty)
		}
	}
	if p := SharedStepPenalty(1000, 1); p != DefaultSharedStepPenalty {
		t.Errorf("1000 layers and no weights: %.3f, want the default %.2f as the most", p, DefaultSharedStepPenalty)
	}
	// A token a decode call: 16 calls against 1 of the shared graph.
	if !SharedPays(16, 1, 512, 127, 0.11) || SharedPays(16, 1, 512, 127, 0.241) || SharedPays(1, 1, 512, 100, 0) {
		t.Error("SharedPays: want 16 prompt tokens against 127 decoded shared at 0.11, not at 0.241, and never a one-token prompt")
	}
	// 8 tokens a decode call: 16 tokens are 2 calls, 512 are 64.
	if SharedPays(16, 8, 512, 127, 0.117) || !SharedPays(512, 8, 512, 127, 0.117) || SharedPays(128, 8, 512, 127, 0.13) {
		t.Error("SharedPays: want a kernel graph's 16 and 128 prompt tokens through the decode graph, 512 shared")
	}
	// A prompt the decode graph takes in as few calls as the shared graph
	// is never worth its slower steps, however few they are.
	if SharedPays(16, 16, 512, 7, 0.001) || SharedPays(40, 16, 16, 7, 0) {
		t.Error("SharedPays: want a prompt of no more calls through the decode graph than through the shared graph not shared")
	}
}

// TestPagedSharedStepPenalty: paged graphs pay less than the others for
// the same model, and the same default without one.
func TestPagedSharedStepPenalty(t *testing.T) {
	for _, m := range []struct {
		layers int
		bytes  int64
	}{{30, 97e6}, {8, 78e6}, {24, 991e6}} {
		if p, s := PagedSharedStepPenalty(m.layers, m.bytes), SharedStepPenalty(m.layers, m.bytes); p <= 0 || p >= s {
			t.Errorf("%d layers, %d bytes: paged %.3f, other %.3f; want 0 < paged < other", m.layers, m.bytes, p, s)
		}
	}
	if p := PagedSharedStepPenalty(30, 0); p != DefaultSharedStepPenalty {
		t.Errorf("without a model: %.3f, want the default", p)
	}
	if p := (&Profile{Attention: "paged", Layers: 30, WeightBytes: 97e6}).SharedPenalty(); p != PagedSharedStepPenalty(30, 97e6) {
		t.Errorf("a paged profile's SharedPenalty = %.3f, want the paged estimate", p)
	}
}
