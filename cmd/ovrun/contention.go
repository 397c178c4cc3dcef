package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/runtime"
	"github.com/ovtoolkit/ovrun/runtime/ovexec"
)

var (
	contCapacityFlag    = &cli.IntFlag{Name: "capacity", Value: 1024, Usage: "decode graph capacity `C`"}
	compileCapacityFlag = &cli.IntFlag{Name: "compile-capacity", Value: 2048, Usage: "capacity `C` of the graph compiled in the background"}
	stepsFlag           = &cli.IntFlag{Name: "steps", Value: 200, Usage: "decode `STEPS` measured alone"}
	decodeCPUsFlag      = &cli.StringFlag{Name: "decode-cpus", Usage: "pin the decoding thread to `CPUS`"}
	contNiceFlag        = &cli.IntFlag{Name: "compile-nice", Usage: "nice `N` for the compile thread"}
)

var contentionCommand = &cli.Command{
	Name:  "contention",
	Usage: "measure how much a background compile slows decode on this host, and what the knobs buy",
	Description: `Decodes alone, compiles alone, then decodes while the same graph compiles on
the background thread, and reports both slowdowns. On a CPU device decode and
compile share the cores; on an NPU decode runs on the device and only the
compile uses the host. Try:

   ovrun contention --model M --capacity 1024 --compile-capacity 2048
   ovrun contention ... --infer-threads 1 --compile-cpus 1 --decode-cpus 0
   ovrun contention ... --compile-nice 19
   ovrun contention ... --compile-in worker --compile-cpus 1 --decode-cpus 0

With --compile-in worker the background compile runs in a child process
started from the compile thread: --compile-cpus and --compile-nice then
reach every thread of the compile, OpenVINO's TBB workers included. The
first line says where the compile ran.`,
	Flags: append(compileFlags(),
		contCapacityFlag, compileCapacityFlag, stepsFlag, compileCPUsFlag, decodeCPUsFlag, contNiceFlag,
		jsonFlag,
	),
	Action: func(c *cli.Context) error {
		ccpus, err := parseCPUList(c, compileCPUsFlag)
		if err != nil {
			return err
		}
		dcpus, err := parseCPUList(c, decodeCPUsFlag)
		if err != nil {
			return err
		}
		for _, err := range []error{
			cliutil.CheckInt("capacity", contCapacityFlag.Get(c), 2, runtime.MaxCapacity),
			cliutil.CheckInt("compile-capacity", compileCapacityFlag.Get(c), 1, runtime.MaxCapacity),
			cliutil.CheckInt("steps", stepsFlag.Get(c), 1, 1<<20),
			runtime.CheckNice("compile-nice", contNiceFlag.Get(c)),
			checkCompileFlags(c),
			checkOutputs(c, jsonFlag),
		} {
			if err != nil {
				return err
			}
		}
		cfg, err := modelConfig(c)
		if err != nil {
			return err
		}
		if err := runtime.CheckCapacity("capacity", contCapacityFlag.Get(c), runtime.ShapeOf(cfg)); err != nil {
			return err
		}
		// It measures a compile: the background graph is compiled even
		// where it could reuse the decoding one.
		ck, comp, err := openModel(c, func(o *ovexec.Options) { o.GraphPerRung = true })
		if err != nil {
			return err
		}
		defer ck.Close()
		defer comp.Close()
		res, err := runtime.MeasureContention(c.Context, comp, comp.KVShape(), runtime.ContentionConfig{
			Capacity: contCapacityFlag.Get(c), CompileCapacity: compileCapacityFlag.Get(c), Steps: stepsFlag.Get(c),
			Background: runtime.BackgroundOptions{CPUs: ccpus, Nice: contNiceFlag.Get(c)}, DecodeCPUs: dcpus,
		})
		if err != nil {
			return err // nothing to save: the measurement is all or nothing
		}
		res.CompileIn = compileIn(comp)
		fmt.Printf("compile in            %8s\n", res.CompileIn)
		fmt.Printf("decode alone          %8.1f tok/s\n", res.AloneTokensPerS)
		fmt.Printf("decode under compile  %8.1f tok/s  (%+.1f%%, %d steps)\n", res.UnderCompileTokensPer, -res.DecodeSlowdownPct, res.StepsUnderCompile)
		fmt.Printf("compile alone         %8.2f s\n", res.CompileAloneS)
		fmt.Printf("compile under decode  %8.2f s  (%+.1f%%)\n", res.CompileUnderDecodeS, res.CompileSlowdownPct)
		if p := jsonFlag.Get(c); p != "" {
			return cliutil.WriteJSON(p, res)
		}
		return nil
	},
}
