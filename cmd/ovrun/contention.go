package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/runtime"
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
   ovrun contention ... --compile-nice 19`,
	Flags: append(compileFlags(),
		&cli.IntFlag{Name: "capacity", Value: 1024, Usage: "decode graph capacity"},
		&cli.IntFlag{Name: "compile-capacity", Value: 2048, Usage: "capacity of the graph compiled in the background"},
		&cli.IntFlag{Name: "steps", Value: 200, Usage: "decode steps measured alone"},
		&cli.StringFlag{Name: "compile-cpus", Usage: "pin the compile thread to `CPUS`"},
		&cli.StringFlag{Name: "decode-cpus", Usage: "pin the decoding thread to `CPUS`"},
		&cli.IntFlag{Name: "compile-nice", Usage: "nice `N` for the compile thread"},
		jsonFlag,
	),
	Action: func(c *cli.Context) error {
		ccpus, err := parseCPUList(c, "compile-cpus")
		if err != nil {
			return err
		}
		dcpus, err := parseCPUList(c, "decode-cpus")
		if err != nil {
			return err
		}
		for _, err := range []error{
			cliutil.CheckInt("capacity", c.Int("capacity"), 2, runtime.MaxCapacity),
			cliutil.CheckInt("compile-capacity", c.Int("compile-capacity"), 1, runtime.MaxCapacity),
			cliutil.CheckInt("steps", c.Int("steps"), 1, 1<<20),
			runtime.CheckNice("compile-nice", c.Int("compile-nice")),
			checkCompileFlags(c),
			checkOutputs(c, jsonFlag.Name),
		} {
			if err != nil {
				return err
			}
		}
		cfg, err := modelConfig(c)
		if err != nil {
			return err
		}
		if err := runtime.CheckCapacity("capacity", c.Int("capacity"), runtime.ShapeOf(cfg)); err != nil {
			return err
		}
		ck, comp, err := openModel(c)
		if err != nil {
			return err
		}
		defer ck.Close()
		defer comp.Close()
		res, err := runtime.MeasureContention(c.Context, comp, runtime.ShapeOf(ck.Config), runtime.ContentionConfig{
			Capacity: c.Int("capacity"), CompileCapacity: c.Int("compile-capacity"), Steps: c.Int("steps"),
			Background: runtime.BackgroundOptions{CPUs: ccpus, Nice: c.Int("compile-nice")}, DecodeCPUs: dcpus,
		})
		if err != nil {
			return err // nothing to save: the measurement is all or nothing
		}
		fmt.Printf("decode alone          %8.1f tok/s\n", res.AloneTokensPerS)
		fmt.Printf("decode under compile  %8.1f tok/s  (%+.1f%%, %d steps)\n", res.UnderCompileTokensPer, -res.DecodeSlowdownPct, res.StepsUnderCompile)
		fmt.Printf("compile alone         %8.2f s\n", res.CompileAloneS)
		fmt.Printf("compile under decode  %8.2f s  (%+.1f%%)\n", res.CompileUnderDecodeS, res.CompileSlowdownPct)
		if p := c.String(jsonFlag.Name); p != "" {
			return cliutil.WriteJSON(p, res)
		}
		return nil
	},
}
