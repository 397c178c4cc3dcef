package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/app/compilebench"
	"github.com/ovtoolkit/ovrun/internal/childproc"
	"github.com/ovtoolkit/ovrun/runtime"
)

const compileOnceName = "compile-once"

// compileOnceCommand is the child process of compile, profile and ab: one
// measured compile, printed as one JSON line (compilebench.Measurement).
var (
	dumpLogitsFlag   = &cli.StringFlag{Name: "dump-logits", Usage: "after measuring, write the logits of a seeded prompt and one decode step to `FILE.npy`"}
	promptTokensFlag = &cli.IntFlag{Name: "prompt-tokens", Value: 8, Usage: "prompt length for --dump-logits"}
	seedFlag         = &cli.Uint64Flag{Name: "seed", Value: 1, Usage: "prompt seed for --dump-logits"}
	exportHashFlag   = &cli.BoolFlag{Name: "export-hash", Usage: "after measuring, export the compiled model and print the SHA-256 of its bytes"}
	importFlag       = &cli.BoolFlag{Name: "import", Usage: "after measuring, export the compiled model and import it back, timing both (import_s, export_s)"}
	afterFlag        = &cli.StringFlag{Name: "after", Usage: "compile these graphs first, untimed (`CAPACITY:CHUNK`, comma-separated): the measured compile is a successor"}
	onceUnderDecode  = &cli.BoolFlag{Name: "under-decode", Usage: "with --after CAPACITY:1, compile the measured graph as ovrun compiles its next rung: through the runtime, on its background compile thread at --compile-nice, while the --after decode graph decodes on this process's main thread"}
	onceBatch        = &cli.IntFlag{Name: "batch", Value: 1, Usage: "with --under-decode and --attention static, `B` sequences: the measured graph is the static batched variant for B, and the --after graph's variant for B decodes beside it"}
	compileNiceFlag  = &cli.IntFlag{Name: "compile-nice", Value: runtime.MaxNice, Usage: "with --under-decode, the nice value `N` of the compile thread (ovrun's background compiles: 19)"}
)

var compileOnceCommand = &cli.Command{
	Name:   compileOnceName,
	Hidden: true,
	Usage:  "compile one graph in this process and print its costs as one JSON line",
	Flags: append(compileFlags(), capacityFlag,
		dumpLogitsFlag,
		promptTokensFlag,
		seedFlag,
		exportHashFlag,
		importFlag,
		afterFlag,
		onceUnderDecode,
		onceBatch,
		compileNiceFlag,
	),
	Action: func(c *cli.Context) error {
		cfg, err := onceConfig(c, capacityFlag.Get(c))
		if err != nil {
			return err
		}
		if cfg.Capacity < 1 {
			return fmt.Errorf("give the graph's capacity: --capacity C")
		}
		cfg.DumpLogits = dumpLogitsFlag.Get(c)
		cfg.PromptTokens = promptTokensFlag.Get(c)
		cfg.Seed = seedFlag.Get(c)
		cfg.ExportHash = exportHashFlag.Get(c)
		cfg.Import = importFlag.Get(c)
		if cfg.After, err = compilebench.ParseSpecs(afterFlag.Get(c), maxCapacity); err != nil {
			return fmt.Errorf("--after: %w", err)
		}
		if cfg.UnderDecode = onceUnderDecode.Get(c); cfg.UnderDecode {
			if len(cfg.After) != 1 || cfg.After[0].Chunk != 1 || cfg.Chunk != 1 {
				return fmt.Errorf("--under-decode measures a decode graph after one decode graph: want --chunk 1 and --after CAPACITY:1")
			}
			if err := runtime.CheckNice(compileNiceFlag.Name, compileNiceFlag.Get(c)); err != nil {
				return err
			}
			cfg.CompileNice = compileNiceFlag.Get(c)
		}
		if b := onceBatch.Get(c); b != 1 {
			if err := checkUnderDecodeBatch(onceBatch.Name, b, cfg.UnderDecode, string(cfg.Attention)); err != nil {
				return err
			}
			cfg.Batch = b
		}
		m, err := compilebench.MeasureCompile(c.Context, cfg)
		if err != nil {
			return err
		}
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.App.Writer, "%s\n", b)
		return err
	},
}

// onceArgs is the command line of a compile-once child (without the
// executable); the variant's properties override cfg's.
func onceArgs(cfg compilebench.OnceConfig, v compilebench.Variant) []string {
	args := []string{compileOnceName, "--model", cfg.Model, "--capacity", fmt.Sprint(cfg.Capacity),
		"--chunk", fmt.Sprint(max(cfg.Chunk, 1)), "--device", cmp.Or(cfg.Device, "CPU")}
	if cfg.Precision != "" {
		args = append(args, "--precision", cfg.Precision)
	}
	if cfg.Attention != "" {
		args = append(args, "--attention", string(cfg.Attention))
	}
	if cfg.UnderDecode {
		args = append(args, "--under-decode", "--compile-nice", fmt.Sprint(cfg.CompileNice))
	}
	if cfg.Batch > 1 {
		args = append(args, "--batch", fmt.Sprint(cfg.Batch))
	}
	props := maps.Clone(cfg.Props)
	if props == nil {
		props = map[string]string{}
	}
	maps.Copy(props, v.Props)
	for _, k := range slices.Sorted(maps.Keys(props)) {
		args = append(args, "--prop", k+"="+props[k])
	}
	if cfg.DumpLogits != "" {
		args = append(args, "--dump-logits", cfg.DumpLogits)
	}
	if cfg.ExportHash {
		args = append(args, "--export-hash")
	}
	if cfg.Import {
		args = append(args, "--import")
	}
	if len(cfg.After) > 0 {
		args = append(args, "--after", compilebench.FormatSpecs(cfg.After))
	}
	return args
}

// selfExe is the ovtrace binary the children run.
func selfExe() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the ovtrace executable: %w", err)
	}
	return exe, nil
}

// runOnce runs one compile-once child for variant v and parses its line.
// The child's OVTRACE_MEMO_STATS names a fresh file (on /dev/shm), where a
// preloaded memoization patch keeps its counters.
func runOnce(ctx context.Context, cfg compilebench.OnceConfig, v compilebench.Variant) (*compilebench.Measurement, error) {
	exe, err := selfExe()
	if err != nil {
		return nil, err
	}
	stats, cleanup, err := compilebench.NewMemoStatsPath()
	if err != nil {
		return nil, err
	}
	defer cleanup()
	out, err := childproc.Run(ctx, childproc.Cmd{Name: compileOnceName, Path: exe, Args: onceArgs(cfg, v),
		Env: append(v.Environ(os.Environ()), compilebench.EnvMemoStats+"="+stats)})
	var ce *childproc.Error
	if errors.As(err, &ce) && ce.LastStderr != "" {
		return nil, fmt.Errorf("compile-once: %s", strings.TrimPrefix(ce.LastStderr, "ovtrace: "))
	}
	if err != nil {
		return nil, err
	}
	return parseMeasurement(out)
}

// parseMeasurement reads the last JSON line of a compile-once output.
func parseMeasurement(out []byte) (*compilebench.Measurement, error) {
	var m compilebench.Measurement
	if err := childproc.DecodeLastJSONLine(out, &m); err != nil {
		return nil, fmt.Errorf("compile-once %w", err)
	}
	return &m, nil
}

// checkUnderDecodeBatch refuses a decode batch the measurement cannot make.
func checkUnderDecodeBatch(flag string, b int, underDecode bool, attention string) error {
	switch {
	case b < 1 || b > 256:
		return fmt.Errorf("--%s %d: want 1..256 sequences", flag, b)
	case b > 1 && !underDecode:
		return fmt.Errorf("--%s %d applies to the compile under decode: give --under-decode", flag, b)
	case b > 1 && attention != "static":
		return fmt.Errorf("--%s %d measures static batched graphs (a batched server's form on static shapes): give --attention static", flag, b)
	}
	return nil
}
