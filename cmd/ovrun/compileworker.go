package main

import (
	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/runtime/ovexec"
)

const compileWorkerName = "compile-worker"

var (
	workerOutFlag   = &cli.StringFlag{Name: "out", Required: true, Usage: "write the compiled model to `FILE`"}
	workerGraphFlag = &cli.StringFlag{Name: "graph", Required: true, Usage: "`NAME` of the graph the request on stdin asks for (decode-c256)"}
)

// compileWorkerCommand is the child process of --compile-in worker: it
// reads a request (checkpoint, compile options, graph) on stdin, compiles
// the graph, exports it to --out and prints one JSON line (load_s,
// compile_s, export_s, peak_rss_bytes, ir_bytes, precision).
var compileWorkerCommand = &cli.Command{
	Name:   compileWorkerName,
	Hidden: true,
	Usage:  "compile one graph for a parent ovrun and export it (--compile-in worker)",
	Flags:  []cli.Flag{workerGraphFlag, workerOutFlag},
	Action: func(c *cli.Context) error {
		return ovexec.WorkerMain(c.Context, c.App.Reader, c.App.Writer, workerGraphFlag.Get(c), workerOutFlag.Get(c))
	},
}
