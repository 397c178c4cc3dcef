package ovexec

import (
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/ov"
)

// TestSnippetsDefault: a compiler on the CPU compiles with
// SNIPPETS_MODE=DISABLE, and a SNIPPETS_MODE the user set wins; other
// devices get nothing.
func TestSnippetsDefault(t *testing.T) {
	ck, err := model.Load(testenv.Synth(t, "tiny", "F32"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	snippets := func(props []ov.Property) string {
		for _, p := range props {
			if p.Key == SnippetsKey {
				return p.Value
			}
		}
		return ""
	}
	comp, err := NewCompiler(ck, Options{Device: "CPU"})
	if err != nil {
		t.Fatal(err)
	}
	if got := snippets(comp.Properties()); got != "DISABLE" {
		t.Errorf("CPU: SNIPPETS_MODE %q, want DISABLE", got)
	}
	if _, ok := SnippetsDefault("NPU", nil); ok {
		t.Error("NPU: got a SNIPPETS_MODE default, want none")
	}
	comp.Close()

	comp, err = NewCompiler(ck, Options{Device: "CPU", Properties: map[string]string{SnippetsKey: "ENABLE"}})
	if err != nil {
		t.Fatal(err)
	}
	defer comp.Close()
	if got := snippets(comp.Properties()); got != "ENABLE" {
		t.Errorf("--prop SNIPPETS_MODE=ENABLE: compiled with %q", got)
	}
}

// TestSplitsMLP checks when gate and up are kept apart for the CPU plugin's
// fused MLP node: bf16 inference on a CPU with AMX, the last precision
// hint counting; never for another device or at f32. A checkpoint of
// 16-bit weights compiled by such a compiler then reads gate and up as two
// matrices.
func TestSplitsMLP(t *testing.T) {
	core, err := ov.NewCore()
	if err != nil {
		t.Fatal(err)
	}
	defer core.Close()
	hint := func(vs ...string) []ov.Property {
		var ps []ov.Property
		for _, v := range vs {
			ps = append(ps, ov.Property{Key: "INFERENCE_PRECISION_HINT", Value: v})
		}
		return ps
	}
	amx := cpu.X86.HasAMXBF16
	for _, tc := range []struct {
		device string
		props  []ov.Property
		want   bool
	}{
		{"CPU", hint("bf16"), amx},
		{"CPU", hint("f32"), false},
		{"CPU", hint("bf16", "f32"), false},
		{"CPU", hint("f32", "bf16"), amx},
		{"NPU", hint("bf16"), false},
	} {
		if got := SplitsMLP(core, tc.device, tc.props); got != tc.want {
			t.Errorf("%s %v on a CPU with AMX-BF16 %v: SplitsMLP %v, want %v", tc.device, tc.props, amx, got, tc.want)
		}
	}

	ck, err := model.Load(testenv.Synth(t, "tiny", "F16"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	for _, precision := range []string{"bf16", "f32"} {
		comp, err := NewCompiler(ck, Options{Device: "CPU", Precision: precision})
		if err != nil {
			t.Fatal(err)
		}
		fused := comp.weights.Fused("model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight") != ""
		if want := !(amx && precision == "bf16"); fused != want {
			t.Errorf("%s on a CPU with AMX-BF16 %v: gate and up fused %v, want %v", precision, amx, fused, want)
		}
		comp.Close()
	}
}
