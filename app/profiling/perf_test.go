package profiling

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

func TestParsePerfScriptGolden(t *testing.T) {
	if _, err := exec.LookPath("c++filt"); err != nil {
		t.Skip("c++filt (binutils) is needed to demangle the fixture's _Z name")
	}
	p, err := ParsePerfScript(open(t, "perf-script.txt"), PerfOptions{})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "perf-script.golden", describe(p))
}

func TestParsePerfScriptValues(t *testing.T) {
	p, err := ParsePerfScript(open(t, "perf-script.txt"), PerfOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(p.Sample); got != 6 {
		t.Fatalf("samples = %d, want 6 (the two TBB samples differ in stack)", got)
	}
	var n, ns int64
	for _, s := range p.Sample {
		n += s.Value[0]
		ns += s.Value[1]
	}
	if n != 6 || ns != 6_000_000 {
		t.Errorf("totals = %d samples, %d ns; want 6 samples of 1 ms", n, ns)
	}
	if p.Period != 1_000_000 || p.PeriodType.Type != "cpu-clock" || p.PeriodType.Unit != "nanoseconds" {
		t.Errorf("period = %d %+v", p.Period, p.PeriodType)
	}
	byFile := map[string]*profile.Mapping{}
	for _, m := range p.Mapping {
		byFile[m.File] = m
	}
	npu := byFile["/opt/ov/libs/libopenvino_intel_npu_compiler.so"]
	if npu == nil || npu.Limit != 0x3f0ae9 || !npu.HasFunctions {
		t.Errorf("npu compiler mapping = %+v, want one covering 0x3f0ae8 with functions", npu)
	}
	if _, ok := byFile["[unknown]"]; ok {
		t.Error("frames with neither symbol nor object should be dropped")
	}
	// The inlined frame takes the object of its physical frame.
	for _, s := range p.Sample {
		for _, l := range s.Location {
			if strings.HasPrefix(l.Line[0].Function.Name, "std::__introsort_loop") && l.Mapping.File != "/opt/ov/libs/libopenvino_intel_npu_compiler.so" {
				t.Errorf("inlined frame in %s", l.Mapping.File)
			}
		}
	}
}

func TestParsePerfScriptWindow(t *testing.T) {
	p, err := ParsePerfScript(open(t, "perf-script.txt"), PerfOptions{From: 1340.25, To: 1340.2605})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, s := range p.Sample {
		n += s.Value[0]
	}
	if n != 2 {
		t.Errorf("window kept %d samples, want 2 (1340.255235 and 1340.260001)", n)
	}
}

func TestParsePerfHeader(t *testing.T) {
	tests := []struct {
		name, line string
		comm       string
		period     int64
		event      string
		frames     int
	}{
		{"pid/tid", "ovtrace  8331/8334   1328.099506:     250000 cpu-clock: ", "ovtrace", 250000, "cpu-clock", 0},
		{"thread name with spaces and cpu", "TBB Worker 3 12/13 [001] 5.5: 100 cpu-clock:u: ", "TBB Worker 3", 100, "cpu-clock", 0},
		{"no period, ip on the line", "true 2059 1218.611799: cpu-clock:  162bd init_cpu+0xc2d (/lib/ld.so)", "true", 0, "cpu-clock", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parsePerfHeader(tt.line)
			if err != nil {
				t.Fatal(err)
			}
			if s.comm != tt.comm || s.period != tt.period || s.event != tt.event || len(s.stack) != tt.frames {
				t.Errorf("got comm %q period %d event %q frames %d", s.comm, s.period, s.event, len(s.stack))
			}
		})
	}
}

func TestParsePerfScriptErrors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"frame before header", "\t1234 foo (/lib/x.so)\n", "line 1: stack frame outside a sample"},
		{"no timestamp", "garbage line\n", "line 1: no timestamp"},
		{"bad frame", "a 1/1 1.5: 1 cpu-clock:\n\tnot-hex foo\n", "line 2: not a stack frame"},
		{"two events", "a 1/1 1.5: 1 cpu-clock:\n\na 1/1 1.6: 1 task-clock:\n", "several events"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePerfScript(strings.NewReader(tt.in), PerfOptions{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestFrameName(t *testing.T) {
	tests := []struct {
		fr   Frame
		want string
	}{
		{Frame{Function: "ov::Model::validate", Object: "/lib/libopenvino.so"}, "ov::Model::validate"},
		{Frame{Function: "[unknown]", Object: "/lib/libopenvino_intel_cpu_plugin.so"}, "[libopenvino_intel_cpu_plugin.so]"},
		{Frame{Object: "/tmp/perf-4049.map"}, "[JIT code]"},
		{Frame{Function: "[unknown]", Object: "[unknown]"}, "[unknown]"},
	}
	for _, tt := range tests {
		if got := tt.fr.name(); got != tt.want {
			t.Errorf("name(%+v) = %q, want %q", tt.fr, got, tt.want)
		}
	}
}
