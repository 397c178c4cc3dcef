package ovexec

import (
	"context"
	"slices"
	"testing"

	"github.com/ovtoolkit/ovrun/runtime"
)

// TestPoliciesAgreeOnOpenVINO runs every policy through real OpenVINO
// compiles on the tiny model and checks what users rely on: identical
// predictions, runs that stop exactly where the ladder ends, and every
// boundary verified against a control that never switched (f32).
func TestPoliciesAgreeOnOpenVINO(t *testing.T) {
	ck, comp := openOV(t, "tiny", "F32")
	ladder := runtime.Ladder{32, 64, 128, 256}
	tests := []struct {
		name           string
		prompt, decode int
		verify         bool
		wantBoundaries int
	}{
		{name: "prompt in the first rung", prompt: 10, decode: 150, verify: true, wantBoundaries: 3},
		{name: "prompt in a later rung", prompt: 70, decode: 100, wantBoundaries: 1},
		{name: "exactly fills the largest rung", prompt: 20, decode: 236, wantBoundaries: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vocab := ck.Config.VocabSize
			var want []int64
			for _, p := range runtime.Policies {
				s, err := runtime.Run(context.Background(), comp, comp.KVShape(), runtime.RunConfig{
					Ladder: ladder, Policy: p, Prompt: runtime.SeededTokens(5, tc.prompt, vocab), DecodeTokens: tc.decode,
					Forced: runtime.SeededTokens(6, tc.decode, vocab), Verify: tc.verify, PrefillChunk: 16,
				})
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				if s.FinishReason != "length" || s.DecodedTokens != tc.decode {
					t.Fatalf("%s: finish %q after %d steps, want length after %d", p, s.FinishReason, s.DecodedTokens, tc.decode)
				}
				if p != runtime.Direct && len(s.Boundaries) != tc.wantBoundaries {
					t.Errorf("%s: %d boundaries, want %d", p, len(s.Boundaries), tc.wantBoundaries)
				}
				for _, b := range s.Boundaries {
					if tc.verify && (!b.Verified || !b.Top1OK || b.Cosine < 0.9999) {
						t.Errorf("%s: boundary %d->%d: verified %v top-1 %v cosine %.7f", p, b.From, b.To, b.Verified, b.Top1OK, b.Cosine)
					}
				}
				if want == nil {
					want = s.Predictions
				} else if !slices.Equal(s.Predictions, want) {
					t.Errorf("%s: predictions differ from direct", p)
				}
			}
			if runtime.MappedKVBytes() != 0 {
				t.Errorf("%d bytes of KV still mapped", runtime.MappedKVBytes())
			}
		})
	}
}
