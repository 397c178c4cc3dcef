package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/app/compilebench"
	"github.com/ovtoolkit/ovrun/app/profiling"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/safefile"
)

// compileEntry is the C API function a compile runs inside; callgrind
// collects only there by default.
const compileEntry = "ov_core_compile_model"

var (
	backendFlag   = &cli.StringFlag{Name: "backend", Value: profiling.BackendPerf, Usage: "`PROFILER`: perf or callgrind", Action: cliutil.OneOf("backend", profiling.BackendPerf, profiling.BackendCallgrind)}
	outFlag       = &cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "the pprof profile to write, `F.pb.gz`", Required: true}
	callGraphFlag = &cli.StringFlag{Name: "call-graph", Value: "dwarf", Usage: "perf --call-graph `MODE`: dwarf, fp, lbr or none", Action: cliutil.OneOf("call-graph", "dwarf", "fp", "lbr", "none")}
	frequencyFlag = &cli.IntFlag{Name: "frequency", Value: 999, Usage: "perf sampling frequency, `HZ`"}
	inlineFlag    = &cli.BoolFlag{Name: "inline", Usage: "perf: resolve inlined frames (slow)"}
	collectFlag   = &cli.StringFlag{Name: "collect", Value: "compile", Usage: "callgrind: `WHAT` to count for --model: compile (inside ov_core_compile_model) or all", Action: cliutil.OneOf("collect", "compile", "all")}
	rawDirFlag    = &cli.StringFlag{Name: "raw-dir", Usage: "keep the profiler's raw output (perf.data, callgrind.out) in `DIR`"}
	topFlag       = &cli.IntFlag{Name: "top", Value: 10, Usage: "print the top `N` functions afterwards (0: none)"}
	profVariant   = &cli.StringFlag{Name: "variant", Usage: "profile the compile as the ab variant `SPEC` would run it (prop:, env:, lib:, preload:)"}
)

var profileCommand = &cli.Command{
	Name:      "profile",
	Usage:     "profile the compile of one capacity (or any command) into a pprof profile with native frames",
	ArgsUsage: "[-- CMD ARGS...]",
	Description: `With --model and --capacity, profiles one "ovtrace compile-once" of that graph;
after "--", profiles any command instead. Writes a pprof profile (.pb.gz) that
"ovtrace top", "ovtrace diff" and "go tool pprof -http=: F.pb.gz" read.

--backend perf samples the software clock (perf record -e cpu-clock, the
hardware counters are not available on these machines) with DWARF call
chains, and converts "perf script". For a compile, only the samples taken
while ov_core_compile_model ran are kept (all threads). Sample values are
nanoseconds of CPU time.

--backend callgrind runs the command under valgrind's callgrind (about 50x
slower: keep graphs small) and converts its exact instruction counts (self,
per function) and call counts (per caller/callee edge). For a compile, only
the inside of ov_core_compile_model is collected (--collect all: everything).
Stacks are reconstructed from the call graph, so cumulative values are
estimates; see docs/ovtrace.md.

--variant SPEC profiles the compile as "ovtrace ab --variant NAME=SPEC" runs
it: with its properties, environment, OpenVINO build or preloaded patch. A
preloaded memoization patch's counters for the compile are printed and kept
in the profile's comments.

perf comes from Debian's linux-perf ("make profilers" installs it).`,
	Flags: append(compileFlags(), capacityFlag,
		backendFlag, outFlag, callGraphFlag, frequencyFlag, inlineFlag, collectFlag, rawDirFlag, topFlag, profVariant,
	),
	Action: profileAction,
}

func profileAction(c *cli.Context) error {
	rc := profiling.RecordConfig{
		Backend:   backendFlag.Get(c),
		CallGraph: callGraphFlag.Get(c),
		Frequency: frequencyFlag.Get(c),
		Inline:    inlineFlag.Get(c),
		RawDir:    rawDirFlag.Get(c),
		Stderr:    os.Stderr,
	}
	for _, err := range []error{
		cliutil.CheckInt("frequency", rc.Frequency, 1, 100000),
		cliutil.CheckInt("top", topFlag.Get(c), 0, 1<<20),
		safefile.Check(outFlag.Get(c)),
	} {
		if err != nil {
			return err
		}
	}
	if rc.RawDir != "" {
		if err := safefile.MkdirAll(rc.RawDir); err != nil {
			return err
		}
	}
	var meta [][2]string
	var once *compilebench.Measurement
	if c.Args().Len() > 0 {
		if c.IsSet(modelFlag.Name) || c.IsSet(capacityFlag.Name) || c.IsSet(profVariant.Name) {
			return fmt.Errorf("give either --model and --capacity (and --variant) or a command after --, not both")
		}
		rc.Command = c.Args().Slice()
		rc.Stdout = c.App.Writer
	} else {
		cfg, err := onceConfig(c, capacityFlag.Get(c))
		if err != nil {
			return err
		}
		if cfg.Capacity < 1 {
			return fmt.Errorf("give the graph to profile, --capacity C (or a command after --)")
		}
		exe, err := selfExe()
		if err != nil {
			return err
		}
		v, err := compilebench.ParseVariant("profiled=" + profVariant.Get(c))
		if err != nil {
			return fmt.Errorf("--variant: %w", err)
		}
		if err := v.Check(); err != nil {
			return fmt.Errorf("--variant: %w", err)
		}
		stats, cleanup, err := compilebench.NewMemoStatsPath()
		if err != nil {
			return err
		}
		defer cleanup()
		rc.Env = append(v.Environ(os.Environ()), compilebench.EnvMemoStats+"="+stats)
		rc.Command = append([]string{exe}, onceArgs(cfg, v)...)
		collect := collectFlag.Get(c)
		if collect != "compile" && collect != "all" {
			return fmt.Errorf("--collect %q: want compile or all", collect)
		}
		if collect == "compile" {
			rc.ToggleCollect = compileEntry
		}
		rc.Window = func(stdout []byte) (float64, float64, bool) {
			m, err := parseMeasurement(stdout)
			if err != nil {
				return 0, 0, false
			}
			once = m
			return m.CompileStartMonoS, m.CompileEndMonoS, collect == "compile" && m.CompileEndMonoS > 0
		}
		meta = [][2]string{{"model", cfg.Model}, {"capacity", strconv.Itoa(cfg.Capacity)}, {"device", cfg.Device}}
		if v.Spec != "" {
			meta = append(meta, [2]string{"variant", v.Spec})
		}
	}
	p, err := profiling.Record(c.Context, rc)
	if err != nil {
		return err
	}
	for _, kv := range meta {
		profiling.SetMeta(p, kv[0], kv[1])
	}
	if once != nil {
		profiling.SetMeta(p, profiling.MetaGraphNodes, strconv.Itoa(once.GraphNodes))
		profiling.SetMeta(p, "compile_s", fmt.Sprintf("%.3f", once.CompileS))
		if once.Memo != nil {
			profiling.SetMeta(p, "memo", memoLine(once.Memo))
		}
	}
	if err := profiling.WriteFile(outFlag.Get(c), p); err != nil {
		return err
	}
	w := c.App.Writer
	fmt.Fprintf(w, "wrote %s: %d samples, %d functions", outFlag.Get(c), len(p.Sample), len(p.Function))
	if win, ok := profiling.Meta(p, "window"); ok {
		fmt.Fprintf(w, "; kept the samples of the compile, %s", win)
	}
	if col, ok := profiling.Meta(p, "collect"); ok {
		fmt.Fprintf(w, "; collected %s", col)
	}
	fmt.Fprintln(w)
	if once != nil && once.Memo != nil {
		fmt.Fprintf(w, "memo: %s\n", memoLine(once.Memo))
	}
	if n := topFlag.Get(c); n > 0 {
		rep, err := profiling.Top(p, profiling.TopOptions{N: n})
		if err != nil {
			return err
		}
		return profiling.WriteTop(w, rep, 100)
	}
	return nil
}

// memoLine prints a patch's counters for one compile on one line.
func memoLine(m *compilebench.MemoStats) string {
	line := fmt.Sprintf("%s: %d calls, hit rate %.2f%%", m.Patch, m.Counters["calls"], 100*m.HitRate())
	for _, k := range slices.Sorted(maps.Keys(m.Counters)) {
		if k != "calls" && k != "hits" {
			line += fmt.Sprintf(", %s %d", k, m.Counters[k])
		}
	}
	return line
}
