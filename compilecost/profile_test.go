package compilecost

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/internal/schema"
)

func TestMedian(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		want float64
	}{
		{name: "empty", xs: nil, want: 0},
		{name: "one", xs: []float64{3}, want: 3},
		{name: "odd unsorted", xs: []float64{5, 1, 3}, want: 3},
		{name: "even averages the middle", xs: []float64{4, 1, 3, 2}, want: 2.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]float64(nil), tc.xs...)
			if got := Median(tc.xs); got != tc.want {
				t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.want)
			}
			if !reflect.DeepEqual(in, tc.xs) {
				t.Errorf("Median modified its input: %v", tc.xs)
			}
		})
	}
}

func TestLoadTestdata(t *testing.T) {
	p, err := Load("testdata/cost.json")
	if err != nil {
		t.Fatal(err)
	}
	if p.Model != "qwen2.5-0.5b" || p.Device != "CPU" || p.OpenVINOVersion != "2026.0.0" || p.Precision != "f32" || len(p.Rungs) != 4 {
		t.Fatalf("unexpected profile %+v", p)
	}
	// The 2048 rung has no median_s: Load takes the median of compile_s.
	if p.Rungs[1].MedianS != 6.0 {
		t.Errorf("filled median = %v, want 6", p.Rungs[1].MedianS)
	}
	// The stored fit is kept as written.
	if p.Fit.Model != FitLinear || p.Fit.A != 2 || p.Fit.B != 0.002 {
		t.Errorf("fit = %+v", p.Fit)
	}
}

func TestPredict(t *testing.T) {
	p := Profile{Model: "m", Device: "CPU", Rungs: []Rung{
		{Capacity: 1024, MedianS: 5},
		{Capacity: 2048, MedianS: 9, CompileS: []float64{9}},
		{Capacity: 4096, CompileS: []float64{16, 18, 17}}, // median from compile_s
	}, Fit: Fit{Model: FitLinear, A: 1, B: 0.004}}
	tests := []struct {
		name         string
		profile      Profile
		capacity     int
		want         float64
		wantMeasured bool
	}{
		{name: "measured rung", profile: p, capacity: 2048, want: 9, wantMeasured: true},
		{name: "measured rung without median_s", profile: p, capacity: 4096, want: 17, wantMeasured: true},
		{name: "between rungs uses the fit", profile: p, capacity: 3000, want: 13},
		{name: "beyond the ladder uses the fit", profile: p, capacity: 8192, want: 1 + 0.004*8192},
		// The floor: the smallest median (5 s), scaled by capacity below
		// the smallest rung measured (1024), never 0.
		{name: "fit below the floor, under the ladder", profile: Profile{Rungs: p.Rungs, Fit: Fit{Model: FitLinear, A: -10, B: 0.001}}, capacity: 100, want: 5 * 100.0 / 1024},
		{name: "fit below the floor, in the ladder", profile: Profile{Rungs: p.Rungs, Fit: Fit{Model: FitLinear, A: -10, B: 0.001}}, capacity: 3000, want: 5},
		{name: "falling stored fit is refitted", profile: Profile{Rungs: p.Rungs, Fit: Fit{Model: FitLinear, A: 20, B: -0.01}}, capacity: 8192, want: FitProfile(p.firstRungs()).At(8192)},
		{name: "missing fit is computed", profile: Profile{Rungs: []Rung{{Capacity: 1000, MedianS: 3}, {Capacity: 2000, MedianS: 5}}}, capacity: 4000, want: 9},
		{name: "no rungs", profile: Profile{}, capacity: 4000, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, measured := tc.profile.Predict(tc.capacity)
			if math.Abs(got-tc.want) > 1e-9 || measured != tc.wantMeasured {
				t.Errorf("Predict(%d) = %v, %v; want %v, %v", tc.capacity, got, measured, tc.want, tc.wantMeasured)
			}
			if f := tc.profile.CompileFunc(); math.Abs(f(tc.capacity)-tc.want) > 1e-9 {
				t.Errorf("CompileFunc(%d) = %v, want %v", tc.capacity, f(tc.capacity), tc.want)
			}
		})
	}
}

func validProfile() Profile {
	return Profile{
		Model: "tiny", Device: "CPU", OpenVINOVersion: "2026.0.0",
		Rungs: []Rung{
			{Capacity: 64, CompileS: []float64{1.0, 1.2, 1.1}, CompileCPUS: []float64{1.9, 2.0, 2.1}, IRBuildS: []float64{0.01, 0.01, 0.02}, PeakRSSBytes: 1 << 28},
			{Capacity: 128, CompileS: []float64{1.5, 1.7}, IRBuildS: []float64{0.02, 0.02}, PeakRSSBytes: 1 << 29},
			{Capacity: 256, CompileS: []float64{2.4}, PeakRSSBytes: 1 << 29},
		},
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cost.json")
	p := validProfile()
	if err := p.Save(path); err != nil {
		t.Fatal(err)
	}
	// Save filled the derived fields in p.
	if p.Rungs[0].MedianS != 1.1 || p.Rungs[1].MedianS != 1.6 || p.Fit.Model == "" || p.Fit.N != 3 {
		t.Fatalf("derived fields not filled: %+v", p)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	// Nil ir_build_s is written as [] and read back empty.
	if got.Rungs[2].IRBuildS == nil || len(got.Rungs[2].IRBuildS) != 0 {
		t.Errorf("ir_build_s = %#v, want []", got.Rungs[2].IRBuildS)
	}
	got.Rungs[2].IRBuildS = nil
	if !reflect.DeepEqual(*got, p) {
		t.Errorf("round trip:\n got %+v\nwant %+v", *got, p)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"schema\": \"" + ProfileSchema + "\","; !strings.HasPrefix(string(b), want) {
		t.Errorf("saved file starts %.40q, want the schema first: %q", b, want)
	}
	for _, key := range []string{`"model"`, `"device"`, `"openvino_version"`, `"rungs"`, `"capacity"`, `"compile_s"`, `"compile_cpu_s"`, `"median_s"`, `"ir_build_s"`, `"peak_rss_bytes"`, `"fit"`, `"r2"`, `"max_rel_err"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("saved file lacks %s", key)
		}
	}
	if strings.Contains(string(b), `"precision"`) {
		t.Errorf("empty precision was written")
	}
	// No temporary files are left behind.
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want 1", len(entries))
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(p *Profile)
		wantMsg string // "" means valid
	}{
		{name: "valid", mutate: func(*Profile) {}},
		{name: "empty model", mutate: func(p *Profile) { p.Model = "" }, wantMsg: "model is empty"},
		{name: "empty device", mutate: func(p *Profile) { p.Device = "" }, wantMsg: "device is empty"},
		{name: "no rungs", mutate: func(p *Profile) { p.Rungs = nil }, wantMsg: "no rungs"},
		{name: "zero capacity", mutate: func(p *Profile) { p.Rungs[0].Capacity = 0 }, wantMsg: "capacity 0 is not positive"},
		{name: "negative capacity", mutate: func(p *Profile) { p.Rungs[0].Capacity = -64 }, wantMsg: "capacity -64 is not positive"},
		{name: "duplicate capacity", mutate: func(p *Profile) { p.Rungs[1].Capacity = 64 }, wantMsg: "capacity 64 is duplicated"},
		{name: "descending capacity", mutate: func(p *Profile) { p.Rungs[2].Capacity = 100 }, wantMsg: "capacity 100 is below the previous 128"},
		{name: "negative compile time", mutate: func(p *Profile) { p.Rungs[1].CompileS[1] = -1 }, wantMsg: "compile_s[1] = -1"},
		{name: "NaN cpu time", mutate: func(p *Profile) { p.Rungs[0].CompileCPUS[0] = math.NaN() }, wantMsg: "compile_cpu_s[0] = NaN"},
		{name: "infinite ir build", mutate: func(p *Profile) { p.Rungs[0].IRBuildS[2] = math.Inf(1) }, wantMsg: "ir_build_s[2] = +Inf"},
		{name: "negative median", mutate: func(p *Profile) { p.Rungs[0].MedianS = -2 }, wantMsg: "median_s[0] = -2"},
		{name: "no compile times", mutate: func(p *Profile) { p.Rungs[2].CompileS = nil }, wantMsg: "capacity 256: no compile times"},
		{name: "median without samples is fine", mutate: func(p *Profile) { p.Rungs[2].CompileS = nil; p.Rungs[2].MedianS = 2 }},
		{name: "negative rss", mutate: func(p *Profile) { p.Rungs[1].PeakRSSBytes = -1 }, wantMsg: "peak_rss_bytes -1"},
		{name: "unknown fit model", mutate: func(p *Profile) { p.Fit.Model = "spline" }, wantMsg: `fit model "spline"`},
		{name: "NaN fit", mutate: func(p *Profile) { p.Fit = Fit{Model: FitLinear, A: math.NaN()} }, wantMsg: "non-finite"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := validProfile()
			tc.mutate(&p)
			err := p.Validate()
			if tc.wantMsg == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidProfile) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Validate = %v, want ErrInvalidProfile mentioning %q", err, tc.wantMsg)
			}
			// Save refuses it and writes nothing.
			path := filepath.Join(t.TempDir(), "cost.json")
			if err := p.Save(path); !errors.Is(err, ErrInvalidProfile) {
				t.Errorf("Save = %v, want ErrInvalidProfile", err)
			}
			if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Save wrote %s for an invalid profile", path)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tests := []struct {
		name    string
		path    string
		is      error
		wantMsg string
	}{
		{name: "missing file", path: filepath.Join(dir, "nope.json"), is: fs.ErrNotExist},
		{name: "not JSON", path: write("bad.json", "{rungs"), wantMsg: "bad.json"},
		{name: "descending capacities", path: write("desc.json", `{"model":"m","device":"CPU","rungs":[{"capacity":2048,"compile_s":[2]},{"capacity":1024,"compile_s":[1]}]}`),
			is: ErrInvalidProfile, wantMsg: "capacity 1024 is below the previous 2048"},
		{name: "duplicate capacities", path: write("dup.json", `{"model":"m","device":"CPU","rungs":[{"capacity":1024,"compile_s":[2]},{"capacity":1024,"compile_s":[1]}]}`),
			is: ErrInvalidProfile, wantMsg: "duplicated"},
		{name: "zero capacity", path: write("zero.json", `{"model":"m","device":"CPU","rungs":[{"capacity":0,"compile_s":[2]}]}`),
			is: ErrInvalidProfile, wantMsg: "not positive"},
		{name: "a device", path: "/dev/zero", is: safefile.ErrNotRegular, wantMsg: "character device"},
		{name: "a newer schema", path: write("newer.json", `{"schema":"ovrun.cost/2","model":"m","device":"CPU","rungs":{"changed":true}}`),
			is: schema.ErrNewer, wantMsg: "ovrun.cost/2 is newer than this ovrun reads (ovrun.cost/1)"},
		{name: "a run summary", path: write("run.json", `{"schema":"ovrun.run/1","policy":"direct"}`),
			is: schema.ErrKind, wantMsg: "run.json: schema ovrun.run/1: another kind of file (want ovrun.cost)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.path)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("Load = %v, want errors.Is %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("Load = %v, want mention of %q", err, tc.wantMsg)
			}
		})
	}
}

func TestLoadComputesMissingFit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cost.json")
	body := `{"model":"m","device":"CPU","openvino_version":"x","rungs":[{"capacity":1000,"compile_s":[3],"ir_build_s":[],"peak_rss_bytes":0},{"capacity":2000,"compile_s":[5],"ir_build_s":[],"peak_rss_bytes":0}]}`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Fit.Model != FitLinear || !near(p.Fit.A, 1, 1e-12) || !near(p.Fit.B, 0.002, 1e-12) {
		t.Errorf("fit = %+v, want a+b*C with a=1 b=0.002", p.Fit)
	}
}

// FuzzLoad: any cost.json is refused with one line or gives a profile whose
// predictions are finite and non-negative at every capacity asked.
func FuzzLoad(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "cost.json")); err == nil {
		f.Add(b, 4096)
	}
	f.Add([]byte(`{"model":"m","device":"CPU","rungs":[{"capacity":1000,"compile_s":[3]},{"capacity":2000,"compile_s":[5]}]}`), 3000)
	f.Add([]byte(`{"model":"m","device":"CPU","rungs":[{"capacity":1,"median_s":1e308}],"fit":{"model":"power","a":1e308,"b":1e308}}`), 1<<30)
	f.Add([]byte(`{"model":"m","device":"CPU","rungs":[{"capacity":5,"compile_s":[0]}],"fit":{"model":"line","a":-1,"b":-1}}`), 9)
	f.Fuzz(func(t *testing.T, b []byte, capacity int) {
		path := filepath.Join(t.TempDir(), "cost.json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := Load(path)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
			return
		}
		s, _ := p.Predict(capacity)
		if math.IsNaN(s) || math.IsInf(s, 0) || s < 0 {
			t.Fatalf("Predict(%d) = %v", capacity, s)
		}
	})
}

func TestPredictImport(t *testing.T) {
	p := Profile{Model: "m", Device: "CPU", Rungs: []Rung{
		{Capacity: 100, CompileS: []float64{2}, ImportS: []float64{0.3, 0.1, 0.2}},
		{Capacity: 200, CompileS: []float64{3}, ImportS: []float64{0.4}},
		{Capacity: 400, CompileS: []float64{5}},
	}}
	if s, ok := p.PredictImport(100); !ok || s != 0.2 {
		t.Errorf("measured import at 100: %v %v, want the median 0.2", s, ok)
	}
	if s, ok := p.PredictImport(300); !ok || math.Abs(s-0.6) > 1e-9 {
		t.Errorf("import at 300: %v %v, want the line through the medians (0.6)", s, ok)
	}
	if s, _, basis := p.PredictReady(100, true); basis != BasisImport || s != 0.2 {
		t.Errorf("a cached rung is ready after its import: %v %v", s, basis)
	}
	if s, _, basis := p.PredictReady(100, false); basis == BasisImport || s != 2 {
		t.Errorf("an uncached rung is ready after its compile: %v %v", s, basis)
	}
	old := Profile{Model: "m", Device: "CPU", Rungs: []Rung{{Capacity: 100, CompileS: []float64{2}}}}
	if _, ok := old.PredictImport(100); ok {
		t.Error("a profile without imports predicted one")
	}
	if s, _, basis := old.PredictReady(100, true); basis == BasisImport || s != 2 {
		t.Errorf("without imports a cached rung falls back to its compile: %v %v", s, basis)
	}
	bad := p
	bad.Rungs = []Rung{{Capacity: 100, CompileS: []float64{2}, ImportS: []float64{math.NaN()}}}
	if err := bad.Validate(); err == nil {
		t.Error("a NaN import was accepted")
	}
}
