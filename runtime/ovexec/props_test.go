package ovexec

import (
	"slices"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/ov"
)

// TestSnippetsDefault: a compiler on a CPU without bf16 instructions
// compiles with SNIPPETS_MODE=DISABLE, one with them with the plugin's
// default, and a SNIPPETS_MODE the user set wins either way; other devices
// get nothing.
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
	caps, err := comp.core.Property("CPU", "OPTIMIZATION_CAPABILITIES")
	if err != nil {
		t.Fatal(err)
	}
	want := "DISABLE"
	if slices.Contains(strings.Fields(caps), "BF16") {
		want = ""
	}
	if got := snippets(comp.Properties()); got != want {
		t.Errorf("CPU with capabilities %q: SNIPPETS_MODE %q, want %q", caps, got, want)
	}
	if _, ok := SnippetsDefault(comp.core, "NPU", nil); ok {
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
