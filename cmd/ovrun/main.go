// Command ovrun runs decoder LLMs on a ladder of statically compiled context
// capacities with OpenVINO, growing the KV cache with the context and
// compiling the next capacity while the current one decodes.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/app/plan"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/hugepages"
	"github.com/ovtoolkit/ovrun/internal/procfs"
)

func main() {
	hugepages.Reexec() // before anything else: glibc reads its tunables at start
	startup.ProcessS = procfs.Age()
	ctx, stop := cliutil.SignalContext(context.Background(), "ovrun", os.Stderr)
	defer stop()
	app := newApp()
	if err := app.RunContext(ctx, os.Args); err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "ovrun:", cliutil.InterruptMessage(err))
			os.Exit(cliutil.ExitInterrupted)
		}
		fmt.Fprintln(os.Stderr, "ovrun:", cliutil.OneLine(err))
		os.Exit(1)
	}
}

// newApp is the whole command-line interface; tests run it in process.
func newApp() *cli.App {
	return &cli.App{
		Name:  "ovrun",
		Usage: "run decoder LLMs on a ladder of compiled context capacities (compile ahead, not up front)",
		Description: `ovrun compiles a Llama, Qwen2 or Gemma checkpoint into OpenVINO graphs of static context
capacity and decodes with them. Start with:

   ovrun synth --preset small --out /tmp/small          # a synthetic checkpoint
   ovrun generate --model /tmp/small --capacity 256 --prompt-tokens 16 --max-new-tokens 32
   ovrun run --model /tmp/small --ladder 256,512,1024 --policy grow-one-ahead \
       --prompt-tokens 64 --decode-tokens 900 --json run.json

OpenVINO's C library is looked for, in order, in OVRUN_OPENVINO_LIB (a file or
folder; when set, nothing else), .venv/openvino/libs next to the executable or
one folder up, $VIRTUAL_ENV, and the loader's path; never in the working
directory or its parents.`,
		HideHelpCommand: true,
		// --prop and --run-flag values hold commas of their own.
		DisableSliceFlagSeparator: true,
		Commands: []*cli.Command{
			synthCommand,
			exportIRCommand,
			generateCommand,
			chatCommand,
			serveCommand,
			loadCommand,
			tokenizeCommand,
			runCommand,
			timelineCommand,
			contentionCommand,
			plan.Command,
			benchCommand,
			cacheCommand,
			compileWorkerCommand,
			workerCommand,
		},
	}
}
