package compilebench

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/ovtoolkit/ovrun/internal/npy"
	"github.com/ovtoolkit/ovrun/runtime"
)

// Equivalence is the evidence that two variants compile the same model:
// their logits on a fixed input (a seeded prompt and one decode step), and
// the bytes of the compiled models they export.
type Equivalence struct {
	// Equal reports MaxAbsDiff <= the tolerance (0 by default: bitwise
	// equal logits, as a compile-time-only patch should give).
	Equal bool `json:"equal"`
	// MaxAbsDiff is the largest |control - treatment| over all logits.
	MaxAbsDiff float64 `json:"max_abs_diff"`
	// Top1Equal reports the same arg-max in every row.
	Top1Equal bool `json:"top1_equal"`
	// MinCosine is the smallest per-row cosine similarity.
	MinCosine float64 `json:"min_cosine"`
	// Tolerance is the MaxAbsDiff still counted as equal.
	Tolerance float64 `json:"tolerance"`
	// Detail says what was compared, per treatment.
	Detail string `json:"detail"`
	// Compiled compares the exported compiled models (nil when no run
	// exported one).
	Compiled *CompiledEquivalence `json:"compiled,omitempty"`
}

// CompareLogits compares logits rows of a control and a treatment.
func CompareLogits(control, treatment [][]float32, tol float64) (Equivalence, error) {
	e := Equivalence{Tolerance: tol, Top1Equal: true, MinCosine: 1}
	if len(control) == 0 || len(control) != len(treatment) {
		return e, fmt.Errorf("logits have %d and %d rows", len(control), len(treatment))
	}
	top1 := 0
	for i := range control {
		a, b := control[i], treatment[i]
		if len(a) != len(b) {
			return e, fmt.Errorf("logits row %d has %d and %d values", i, len(a), len(b))
		}
		for j := range a {
			d := math.Abs(float64(a[j]) - float64(b[j]))
			if math.IsNaN(d) {
				d = math.Inf(1)
			}
			e.MaxAbsDiff = max(e.MaxAbsDiff, d)
		}
		if runtime.Argmax(a) == runtime.Argmax(b) {
			top1++
		} else {
			e.Top1Equal = false
		}
		cos := runtime.Cosine(a, b)
		if math.IsNaN(cos) {
			cos = 0 // NaN logits: report no similarity, and keep valid JSON
		}
		e.MinCosine = min(e.MinCosine, cos)
	}
	if math.IsInf(e.MaxAbsDiff, 0) {
		e.MaxAbsDiff = math.MaxFloat64 // keep the report valid JSON
	}
	e.Equal = e.MaxAbsDiff <= tol
	e.Detail = fmt.Sprintf("%d rows x %d logits: max |diff| %.3g, top-1 equal in %d/%d rows, min cosine %.7f",
		len(control), len(control[0]), e.MaxAbsDiff, top1, len(control), e.MinCosine)
	return e, nil
}

// compareFiles compares the control's logits file with each treatment's
// and folds the results into one Equivalence.
func compareFiles(names []string, files []string, tol float64) (*Equivalence, error) {
	ctrl, err := npy.ReadFile(files[0])
	if err != nil {
		return nil, fmt.Errorf("logits of %s: %w", names[0], err)
	}
	out := &Equivalence{Equal: true, Top1Equal: true, MinCosine: 1, Tolerance: tol}
	var details []string
	for i := 1; i < len(files); i++ {
		tr, err := npy.ReadFile(files[i])
		if err != nil {
			return nil, fmt.Errorf("logits of %s: %w", names[i], err)
		}
		e, err := CompareLogits(ctrl, tr, tol)
		if err != nil {
			return nil, fmt.Errorf("%s vs %s: %w", names[i], names[0], err)
		}
		out.Equal = out.Equal && e.Equal
		out.Top1Equal = out.Top1Equal && e.Top1Equal
		out.MaxAbsDiff = max(out.MaxAbsDiff, e.MaxAbsDiff)
		out.MinCosine = min(out.MinCosine, e.MinCosine)
		details = append(details, fmt.Sprintf("%s vs %s: %s", names[i], names[0], e.Detail))
	}
	out.Detail = strings.Join(details, "; ")
	return out, nil
}

// CompiledEquivalence is the evidence that variants produce the same
// compiled model: the SHA-256 of the bytes ov_compiled_model_export_model
// wrote after each run (warm-ups and trials).
type CompiledEquivalence struct {
	// Equal reports that every run of every variant exported the same
	// bytes as the control's.
	Equal bool `json:"equal"`
	// Deterministic reports that all of the control's runs exported the
	// same bytes; without it a difference proves nothing.
	Deterministic bool `json:"deterministic"`
	// Runs is the number of exports compared.
	Runs int `json:"runs"`
	// Variants lists, per variant, the distinct hashes and export sizes
	// seen (one each when the compiler is deterministic).
	Variants []CompiledHashes `json:"variants"`
	// Detail is the one-line verdict.
	Detail string `json:"detail"`
}

// CompiledHashes are one variant's exports.
type CompiledHashes struct {
	Variant string   `json:"variant"`
	Runs    int      `json:"runs"`
	SHA256  []string `json:"sha256"`
}

// compareCompiled compares the exported models' hashes of runs, per
// variant, with the control's; nil when no run exported.
func compareCompiled(variants []Variant, runs []Trial) *CompiledEquivalence {
	byVariant := map[string][]string{}
	n := 0
	for _, r := range runs {
		if r.ExportSHA256 == "" {
			continue
		}
		n++
		if !slices.Contains(byVariant[r.Variant], r.ExportSHA256) {
			byVariant[r.Variant] = append(byVariant[r.Variant], r.ExportSHA256)
		}
	}
	if n == 0 {
		return nil
	}
	c := &CompiledEquivalence{Runs: n, Equal: true}
	counts := map[string]int{}
	for _, r := range runs {
		if r.ExportSHA256 != "" {
			counts[r.Variant]++
		}
	}
	ctrl := byVariant[variants[0].Name]
	c.Deterministic = len(ctrl) == 1
	var differ []string
	for _, v := range variants {
		h := byVariant[v.Name]
		c.Variants = append(c.Variants, CompiledHashes{Variant: v.Name, Runs: counts[v.Name], SHA256: h})
		if len(h) != 1 || len(ctrl) != 1 || h[0] != ctrl[0] {
			c.Equal = false
			if v.Name != variants[0].Name {
				differ = append(differ, v.Name)
			}
		}
	}
	switch {
	case len(ctrl) == 0:
		c.Equal = false
		c.Detail = fmt.Sprintf("the control %s exported nothing", variants[0].Name)
	case !c.Deterministic:
		c.Detail = fmt.Sprintf("the control %s exported %d different models in %d runs: the export is not deterministic, so it proves nothing", variants[0].Name, len(ctrl), counts[variants[0].Name])
	case c.Equal:
		c.Detail = fmt.Sprintf("all %d exported compiled models are byte-identical (sha256 %s)", n, ctrl[0][:16])
	default:
		c.Detail = fmt.Sprintf("%s exported models other than %s's (sha256 %s)", strings.Join(differ, ", "), variants[0].Name, ctrl[0][:16])
	}
	return c
}
