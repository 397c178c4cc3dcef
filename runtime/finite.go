package runtime

import (
	"errors"
	"fmt"
	"math"
)

// ErrNonFinite reports logits holding a NaN or an infinity: the weights or
// the computation are broken, and every token after would be garbage.
var ErrNonFinite = errors.New("non-finite logits")

// checkFinite returns an error wrapping ErrNonFinite when logits, computed
// where (e.g. "after the prompt"), hold a NaN or an infinity; it names the
// first non-finite weight when comp is a WeightExplainer that finds one.
func checkFinite(comp Compiler, logits []float32, where string) error {
	for i, x := range logits {
		if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
			err := fmt.Errorf("%w %s: logit %d is %v", ErrNonFinite, where, i, x)
			if w := nonFiniteWeight(comp); w != "" {
				err = fmt.Errorf("%w; %s", err, w)
			}
			return err
		}
	}
	return nil
}
