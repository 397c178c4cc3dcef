package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestNonFiniteLogitsStopTheRun(t *testing.T) {
	for _, tc := range []struct {
		name      string
		poison    int // last position whose logits are NaN
		wantWhere string
		wantSteps int
	}{
		{name: "after the prompt", poison: 7, wantWhere: "after the prompt", wantSteps: 0},
		{name: "at a decode step", poison: 12, wantWhere: "at decode step 5", wantSteps: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCompiler(testShape, 97, nil)
			f.poison = map[int]bool{tc.poison: true}
			s, err := fakeRun(t, f, RunConfig{Ladder: Ladder{16, 32}, Policy: GrowEager, Prompt: SeededTokens(1, 8, 97),
				DecodeTokens: 20, PrefillChunk: 4, Verify: true})
			if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), tc.wantWhere) {
				t.Fatalf("err = %v, want ErrNonFinite %s", err, tc.wantWhere)
			}
			if s.FinishReason != "error" || s.DecodedTokens != tc.wantSteps || !strings.Contains(s.Error, "non-finite") {
				t.Errorf("finish %q after %d steps (error %q)", s.FinishReason, s.DecodedTokens, s.Error)
			}
			if _, err := json.Marshal(s); err != nil {
				t.Errorf("summary does not marshal: %v", err)
			}
		})
	}
}

func TestGenerateStopsAtNonFiniteLogits(t *testing.T) {
	f := newFakeCompiler(testShape, 97, nil)
	f.poison = map[int]bool{10: true}
	res, err := Generate(context.Background(), f, testShape, GenerateConfig{Capacity: 32, Prompt: SeededTokens(1, 8, 97), MaxNewTokens: 8})
	if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "at decode step 3: logit 3 is NaN") {
		t.Fatalf("err = %v", err)
	}
	if len(res.Tokens) != 3 {
		t.Errorf("%d tokens before the failure, want 3", len(res.Tokens))
	}
}

func TestContentionRejectsNoSteps(t *testing.T) {
	for _, steps := range []int{0, -5} {
		_, err := MeasureContention(context.Background(), newFakeCompiler(testShape, 97, nil), testShape,
			ContentionConfig{Capacity: 32, CompileCapacity: 64, Steps: steps})
		if err == nil || !strings.Contains(err.Error(), "decode steps must be at least 1") {
			t.Errorf("steps %d: %v", steps, err)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	allowed, err := AllowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	first, missing := -1, -1
	for c := maxCPU - 1; c >= 0; c-- {
		if allowed[c] {
			first = c
		} else if missing < 0 {
			missing = c
		}
	}
	if got, err := ParseCPUList("compile-cpus", cpuRanges(allowed)); err != nil || len(got) != len(allowed) {
		t.Errorf("the allowed set %s: %v, %v", cpuRanges(allowed), got, err)
	}
	if first >= 0 {
		if got, err := ParseCPUList("compile-cpus", " "+strconv.Itoa(first)+" "); err != nil || len(got) != 1 || got[0] != first {
			t.Errorf("one CPU: %v, %v", got, err)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"0-1000000000", "beyond the 1024"},
		{"1-0", `range "1-0" runs backwards`},
		{"x", `"x" is not a CPU number`},
		{"-1", `"" is not a CPU number`},
		{strconv.Itoa(missing), "not available to this process"},
	} {
		if _, err := ParseCPUList("compile-cpus", tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.want)
		}
	}
}

// TestFirstNonFinite finds a NaN, an infinity of either sign and the
// largest exponent's other values at every position of a slice whose
// length is not a multiple of the scan's four, and nothing in finite
// values up to the largest.
func TestFirstNonFinite(t *testing.T) {
	const n = 13
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i) - 6.5
	}
	v[3], v[7] = math.MaxFloat32, -math.MaxFloat32
	if got := firstNonFinite(v); got != -1 {
		t.Fatalf("finite values: %d, want -1", got)
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7fc00001)} {
		for at := range n {
			w := append([]float32(nil), v...)
			w[at] = bad
			if at+2 < n {
				w[at+2] = bad // a later one is not the first
			}
			if got := firstNonFinite(w); got != at {
				t.Errorf("%v at %d: found at %d", bad, at, got)
			}
		}
	}
}
