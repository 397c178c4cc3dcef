// Command ovtrace measures and profiles OpenVINO compiles: per-capacity
// compile costs (compile), native profiles of one compile (profile, top,
// diff), counterbalanced A/B trials of compiler variants (ab), and run
// plans from a cost profile (plan).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/app/plan"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/hugepages"
)

func main() {
	hugepages.Reexec() // before anything else: glibc reads its tunables at start
	ctx, stop := cliutil.SignalContext(context.Background(), "ovtrace", os.Stderr)
	app := newApp()
	err := app.RunContext(ctx, flagsFirst(app, os.Args))
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ovtrace:", cliutil.OneLine(err))
		code := 1
		if errors.Is(err, context.Canceled) {
			code = cliutil.ExitInterrupted
		}
		os.Exit(code)
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:  "ovtrace",
		Usage: "measure, profile and A/B-test OpenVINO compiles",
		Description: `Compiler engineers ask three questions: what each capacity costs to compile,
where inside the compiler that time goes, and whether a patch really helps.

   ovtrace compile --model DIR --ladder 256,1024,4096 --reps 3 --json cost.json
   ovtrace profile --backend perf --model DIR --capacity 1024 --out c1024.pb.gz
   ovtrace top c1024.pb.gz
   ovtrace diff before.pb.gz after.pb.gz
   ovtrace ab --model DIR --capacity 1024 --pairs 6 \
       --variant base=lib:/opt/ov-base/libs --variant memo=lib:/opt/ov-memo/libs --json ab.json
   ovtrace plan --compile-cost cost.json --decode-rate 20 --prompt-tokens 128 --decode-tokens 8064

Every measured compile runs in a fresh process (ovtrace compile-once).
OpenVINO's C library is looked for, in order, in OVRUN_OPENVINO_LIB (a file or
folder; when set, nothing else), .venv/openvino/libs next to the executable or
one folder up, $VIRTUAL_ENV, and the loader's path; never in the working
directory or its parents.`,
		HideHelpCommand: true,
		// Variant specs and properties hold commas of their own.
		DisableSliceFlagSeparator: true,
		Commands: []*cli.Command{
			compileCommand,
			profileCommand,
			topCommand,
			diffCommand,
			abCommand,
			plan.Command,
			compileOnceCommand,
		},
	}
}

// flagsFirst lets flags follow positional arguments, as in
// "ovtrace top F.pb.gz --n 20" (urfave/cli v2 stops parsing flags at the
// first argument): for the command named in args[1], it moves the
// arguments that are not flags or flag values behind the flags. Anything
// after "--" stays where it is.
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 3 {
		return args
	}
	cmd := app.Command(args[1])
	if cmd == nil {
		return args
	}
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, name := range f.Names() {
			takesValue[name] = !isBool
		}
	}
	flags := []string{}
	var positional []string
	rest := args[2:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			positional = append(positional, rest[i:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && takesValue[name] && i+1 < len(rest) {
			i++
			flags = append(flags, rest[i])
		}
	}
	out := append([]string{args[0], args[1]}, flags...)
	return append(out, positional...)
}
