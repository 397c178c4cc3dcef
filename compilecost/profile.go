package compilecost

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/internal/schema"
)

// MaxProfileBytes is the largest cost.json Load reads.
const MaxProfileBytes = 16 << 20

// ProfileSchema is the schema field of the cost.json Save writes and the
// newest Load reads (docs/outputs.md, "Cost profile").
const ProfileSchema = "ovrun.cost/1"

// ErrInvalidProfile is wrapped by every validation error of a Profile.
var ErrInvalidProfile = errors.New("invalid compile-cost profile")

// Profile is the measured compile cost of one model on one device and
// OpenVINO version, one Rung per measured capacity, plus a Fit that extends it
// to other capacities. It is stored as cost.json (see Load and Save).
type Profile struct {
	// Schema is ProfileSchema in what Save writes; "" in a file written
	// before profiles carried one.
	Schema string `json:"schema"`
	// Model names the model (a preset or checkpoint directory name).
	Model string `json:"model"`
	// Device is the OpenVINO device the graphs were compiled for, e.g. "CPU".
	Device string `json:"device"`
	// OpenVINOVersion is the runtime's version string.
	OpenVINOVersion string `json:"openvino_version"`
	// HugePages says whether the measured compiles ran with malloc asking
	// for transparent huge pages, as ovrun does where the kernel grants
	// them on request (absent from older profiles).
	HugePages *bool `json:"huge_pages,omitempty"`
	// Precision is the inference precision hint, when one was set.
	Precision string `json:"precision,omitempty"`
	// Attention and KVPrecision are the attention form and KV cache
	// element type of the measured graphs (absent from older profiles):
	// those ovrun compiles with --attention and --kv-precision auto.
	Attention   string `json:"attention,omitempty"`
	KVPrecision string `json:"kv_precision,omitempty"`
	// UnderDecodeBatch is the decode batch of the under-decode figures
	// (ovtrace compile --under-decode-batch): measured on static batched
	// variants for that many sequences, as a batched server compiles; 0
	// (absent): one sequence, as ovrun run and serve --batching off.
	UnderDecodeBatch int `json:"under_decode_batch,omitempty"`
	// Layers and WeightBytes are the model's decoder layers and the bytes
	// of weights its decode step reads (absent from older profiles): what
	// SharedStepPenalty estimates a shared graph's slower steps from.
	Layers      int   `json:"layers,omitempty"`
	WeightBytes int64 `json:"weight_bytes,omitempty"`
	// Rungs holds one entry per measured capacity, ascending.
	Rungs []Rung `json:"rungs"`
	// Fit is the model of median compile time against capacity of the
	// decode graph compiled first in a fresh process (CompileS).
	Fit Fit `json:"fit"`
	// Fits holds a fit for every other kind measured, keyed by Kind.String
	// ("decode.successor", "prefill64.first", "prefill64.successor").
	Fits map[string]Fit `json:"fits,omitempty"`
}

// Rung is the measured cost of compiling the graphs of one capacity. The
// fields an older ovtrace wrote (compile_s, median_s, ...) are the decode
// graph compiled first in a fresh process; the successor and prefill fields
// are the other kinds (see Kind), absent from older profiles.
type Rung struct {
	// Capacity is the KV capacity (tokens) of the graph.
	Capacity int `json:"capacity"`
	// CompileS holds the wall time of each repeated compile of the decode
	// graph as the first compile of a fresh process, seconds.
	CompileS []float64 `json:"compile_s"`
	// CompileCPUS holds the CPU time of each compile, seconds, when measured.
	CompileCPUS []float64 `json:"compile_cpu_s,omitempty"`
	// MedianS is the median of CompileS, seconds.
	MedianS float64 `json:"median_s"`
	// IRBuildS holds the time to emit and read the IR of each repetition, seconds.
	IRBuildS []float64 `json:"ir_build_s"`
	// PeakRSSBytes is the peak resident set size seen while compiling.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// SuccessorS holds the wall time of each compile of the decode graph
	// after another graph in the same process (the rung below it, or for the
	// first rung the prefill graph: the runtime's order), seconds;
	// SuccessorMedianS is their median.
	SuccessorS       []float64 `json:"successor_s,omitempty"`
	SuccessorMedianS float64   `json:"successor_median_s,omitempty"`
	// UnderDecodeS holds the wall time of each compile of the decode graph
	// made as the runtime makes its background compiles: on its compile
	// thread at its nice value, while the rung below it decodes on the
	// same cores (ovtrace compile --under-decode; not for the first rung),
	// seconds; UnderDecodeMedianS is their median. UnderDecodeTokensPerS
	// holds the decode rate of the rung below during each of them.
	UnderDecodeS          []float64 `json:"under_decode_s,omitempty"`
	UnderDecodeMedianS    float64   `json:"under_decode_median_s,omitempty"`
	UnderDecodeTokensPerS []float64 `json:"under_decode_tokens_per_s,omitempty"`
	// Prefill holds the costs of this capacity's prefill graphs, one per chunk.
	Prefill []PrefillCost `json:"prefill,omitempty"`
	// ImportS holds the wall time of importing the decode graph's exported
	// blob (a compiled-rung cache hit), one per repetition, and ExportS of
	// exporting it (what a miss adds); absent from older profiles.
	ImportS []float64 `json:"import_s,omitempty"`
	ExportS []float64 `json:"export_s,omitempty"`
}

// median returns the rung's median compile time: MedianS when set, else
// the median of CompileS.
func (r Rung) median() float64 {
	if r.MedianS > 0 || len(r.CompileS) == 0 {
		return r.MedianS
	}
	return Median(r.CompileS)
}

// Median returns the median of xs (the mean of the two middle values for an
// even count), or 0 for an empty slice. xs is not modified.
func Median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Predict returns the predicted compile time in seconds of the graph of the
// given capacity: the measured median when that capacity was measured
// (measured is true), otherwise the Fit's value, never below its floor
// (Fit.Floor; a stored fit is Checked against the rungs). When the
// profile has no fit yet (Fit.Model empty) one is computed from the rungs.
// A profile without rungs predicts 0.
func (p Profile) Predict(capacity int) (seconds float64, measured bool) {
	for _, r := range p.Rungs {
		if r.Capacity == capacity {
			return max(r.median(), 0), true
		}
	}
	f := p.Fit
	if f.Model == "" {
		f = FitProfile(p.firstRungs())
	} else {
		f = Checked(f, p.firstRungs())
	}
	return f.At(capacity), false
}

// CompileFunc returns Predict as a cost function for SimConfig.CompileS.
func (p Profile) CompileFunc() func(capacity int) float64 {
	return func(capacity int) float64 {
		s, _ := p.Predict(capacity)
		return s
	}
}

// Validate checks the profile: a model and a device are named; there is at
// least one rung; capacities are positive, strictly ascending (hence unique);
// every time is finite and non-negative; each rung has compile times or a
// positive median; the fit, if present, names a known model. Errors wrap
// ErrInvalidProfile and name the problem.
func (p *Profile) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidProfile, fmt.Sprintf(format, args...))
	}
	if p.Model == "" {
		return bad("model is empty")
	}
	if p.Device == "" {
		return bad("device is empty")
	}
	if len(p.Rungs) == 0 {
		return bad("no rungs")
	}
	if p.UnderDecodeBatch < 0 || p.UnderDecodeBatch > 1<<16 {
		return bad("under_decode_batch %d: want 0..65536 sequences", p.UnderDecodeBatch)
	}
	for i, r := range p.Rungs {
		if r.Capacity <= 0 {
			return bad("rung %d: capacity %d is not positive", i, r.Capacity)
		}
		if i > 0 {
			prev := p.Rungs[i-1].Capacity
			if r.Capacity == prev {
				return bad("rung %d: capacity %d is duplicated", i, r.Capacity)
			}
			if r.Capacity < prev {
				return bad("rung %d: capacity %d is below the previous %d (rungs must ascend)", i, r.Capacity, prev)
			}
		}
		for _, field := range []struct {
			name string
			xs   []float64
		}{{"compile_s", r.CompileS}, {"compile_cpu_s", r.CompileCPUS}, {"ir_build_s", r.IRBuildS}, {"median_s", []float64{r.MedianS}},
			{"import_s", r.ImportS}, {"export_s", r.ExportS}} {
			for j, x := range field.xs {
				if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
					return bad("capacity %d: %s[%d] = %v is not a finite non-negative time", r.Capacity, field.name, j, x)
				}
			}
		}
		if !r.measuredAny() {
			return bad("capacity %d: no compile times and no median", r.Capacity)
		}
		if err := r.validateKinds(bad); err != nil {
			return err
		}
		if r.PeakRSSBytes < 0 {
			return bad("capacity %d: peak_rss_bytes %d is negative", r.Capacity, r.PeakRSSBytes)
		}
	}
	names, fits := []string{"fit"}, []Fit{p.Fit}
	for _, k := range slices.Sorted(maps.Keys(p.Fits)) {
		names, fits = append(names, "fits["+k+"]"), append(fits, p.Fits[k])
	}
	for i, f := range fits {
		name := names[i]
		switch f.Model {
		case "", FitNone, FitConstant, FitLinear, FitPower:
		default:
			return bad("%s model %q is not one of %q, %q, %q", name, f.Model, FitConstant, FitLinear, FitPower)
		}
		for _, v := range []float64{f.A, f.B, f.R2, f.MaxRelErr} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return bad("%s holds a non-finite number", name)
			}
		}
	}
	return nil
}

// FillDerived sets missing rung medians, a missing fit and the missing
// fits of the other kinds (Load and Save do it).
func (p *Profile) FillDerived() { p.fillDerived() }

// fillDerived sets missing rung medians and a missing fit.
func (p *Profile) fillDerived() {
	for i := range p.Rungs {
		if p.Rungs[i].MedianS <= 0 && len(p.Rungs[i].CompileS) > 0 {
			p.Rungs[i].MedianS = Median(p.Rungs[i].CompileS)
		}
	}
	if p.Fit.Model == "" {
		p.Fit = FitProfile(p.firstRungs())
	} else {
		p.Fit = Checked(p.Fit, p.firstRungs())
	}
	p.fillKinds()
}

// Load reads and validates a profile (cost.json). Missing medians are
// computed from compile_s and a missing fit is computed from the rungs.
func Load(path string) (*Profile, error) {
	b, err := safefile.ReadFile(path, MaxProfileBytes)
	if err != nil {
		return nil, fmt.Errorf("load compile-cost profile: %w", err)
	}
	if err := schema.CheckJSON(b, ProfileSchema); err != nil {
		return nil, fmt.Errorf("load compile-cost profile %s: %w", path, err)
	}
	var p Profile
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("load compile-cost profile %s: %w", path, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	p.fillDerived()
	return &p, nil
}

// Save validates the profile, fills missing medians, a missing fit and
// the schema (in p, too), and writes it, ProfileSchema first, as indented JSON to path
// through safefile:
// atomically, never over anything but a regular file, "-" for standard
// output.
func (p *Profile) Save(path string) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	p.fillDerived()
	p.Schema = ProfileSchema
	out := *p
	out.Rungs = slices.Clone(p.Rungs)
	for i := range out.Rungs {
		if out.Rungs[i].CompileS == nil {
			out.Rungs[i].CompileS = []float64{}
		}
		if out.Rungs[i].IRBuildS == nil {
			out.Rungs[i].IRBuildS = []float64{}
		}
	}
	if err := safefile.WriteJSON(path, &out); err != nil {
		return fmt.Errorf("save compile-cost profile: %w", err)
	}
	return nil
}

// SharedPenalty is SharedStepPenalty for the profile's model, or
// PagedSharedStepPenalty where its graphs attend paged
// (DefaultSharedStepPenalty for a profile without a model).
func (p *Profile) SharedPenalty() float64 {
	if p.Attention == "paged" {
		return PagedSharedStepPenalty(p.Layers, p.WeightBytes)
	}
	return SharedStepPenalty(p.Layers, p.WeightBytes)
}
