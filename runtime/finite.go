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
	i := firstNonFinite(logits)
	if i < 0 {
		return nil
	}
	err := fmt.Errorf("%w %s: logit %d is %v", ErrNonFinite, where, i, logits[i])
	if w := nonFiniteWeight(comp); w != "" {
		err = fmt.Errorf("%w; %s", err, w)
	}
	return err
}

// firstNonFinite is the index of v's first NaN or infinity (all exponent
// bits set), -1 when there is none. It runs on every decode step's logits
// (a vocabulary of 49152: 200 -> 50 us a step against a float64
// conversion and math.IsNaN and IsInf per value): four values a
// step, their exponents tested together.
func firstNonFinite(v []float32) int {
	const exp = 0x7f800000
	i := 0
	for ; i+4 <= len(v); i += 4 {
		a, b, c, d := math.Float32bits(v[i])&exp, math.Float32bits(v[i+1])&exp, math.Float32bits(v[i+2])&exp, math.Float32bits(v[i+3])&exp
		if a == exp || b == exp || c == exp || d == exp {
			break
		}
	}
	for ; i < len(v); i++ {
		if math.Float32bits(v[i])&exp == exp {
			return i
		}
	}
	return -1
}
