package tokenizer

import (
	"slices"
	"sync"
	"testing"
)

// TestConcurrentEncode: one Tokenizer used from several goroutines (the
// word cache is shared) gives every goroutine the ids it gives one alone.
func TestConcurrentEncode(t *testing.T) {
	for _, v := range []GGUFVocab{toyBPEVocab(), toySPMVocab()} {
		tok := mustTokenizer(t, v)
		want := make([][]int64, len(namedCases))
		for i, c := range namedCases {
			want[i] = mustTokenizer(t, v).Encode(c.text, true)
		}
		var wg sync.WaitGroup
		errs := make(chan string, 8*len(namedCases))
		for g := range 8 {
			wg.Go(func() {
				for k := range namedCases {
					i := (k + g) % len(namedCases)
					if got := tok.Encode(namedCases[i].text, true); !slices.Equal(got, want[i]) {
						errs <- namedCases[i].name
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for name := range errs {
			t.Errorf("%s: concurrent Encode differs", name)
		}
	}
}
