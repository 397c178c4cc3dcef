package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/app/compilebench"
	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

var (
	ladderFlag = &cli.StringFlag{Name: "ladder", Value: "1024,2048,4096,8192", Usage: "ascending `CAPACITIES` to measure"}
	repsFlag   = &cli.IntFlag{Name: "reps", Value: 3, Usage: "compiles per capacity"}
	// The runtime's default chunk: the prefill graph ovrun run compiles.
	compilePrefillChunkFlag = &cli.IntFlag{Name: "prefill-chunk", Value: runtime.DefaultPrefillChunk, Usage: "also measure the prefill graph of `N` tokens per call at every capacity of at least N (0: decode graphs only; when not given, 512 where the graphs attend paged, as ovrun's do)"}
	measureImportFlag       = &cli.BoolFlag{Name: "import", Value: true, Usage: "also export every decode graph compiled first and import it back in the same process, timing both: what a compiled-rung cache (ovrun --cache-dir) hit costs instead of the compile"}
	successorsFlag          = &cli.BoolFlag{Name: "successors", Value: true, Usage: "also measure every graph compiled after its predecessor in the same process (the runtime's order), not only first in a fresh process"}
	underDecodeBatchFlag    = &cli.IntFlag{Name: "under-decode-batch", Value: 1, Usage: "with --under-decode and --attention static, measure as a batched server compiles (ovrun serve --attention static --batching on): the next rung's variant for `B` sequences, while the rung below's variant for B decodes beside it; recorded as under_decode_batch"}
	underDecodeFlag         = &cli.BoolFlag{Name: "under-decode", Usage: "also measure every decode rung but the first as ovrun compiles it in the background: on the runtime's compile thread at --compile-nice, while the rung below decodes on the same cores (what ovrun run --compile-cost then budgets with)"}
)

var compileCommand = &cli.Command{
	Name:  "compile",
	Usage: "measure the compile cost of every capacity of a ladder, each compile in a fresh process",
	Description: `Compiles the decode graph (--chunk 1) of every --ladder capacity --reps times,
each in a fresh "ovtrace compile-once" process, ascending in odd repetitions
and descending in even ones. Per capacity it records the IR build time (emit
and read), the compile wall and CPU time (user+sys of all threads) and the
peak RSS, and fits compile time against capacity (line or power law, the one
with the higher R²).

Then it measures the other kinds of compile the runtime makes, each --reps
times in a fresh process: the prefill graph of --prefill-chunk tokens per
call compiled first, and with --successors every graph compiled after the
graph the runtime compiles before it, held in the same process (a decode
rung after the rung below it, the first rung after its prefill graph, a
prefill graph after its capacity's decode graph). The two differ: an NPU
pays one-time set-up in the first compile, a CPU pays for faulting in fresh
memory in later ones. With --under-decode it also measures each decode rung
but the first as ovrun compiles it in production: through the runtime, on
its background compile thread at --compile-nice, while the rung below
decodes on the same cores (under_decode_s[], with the decode rate meanwhile
in under_decode_tokens_per_s[]); ovrun's budgets then use those figures and
correct them online from each compile that finishes. --attention static
measures the graphs of ovrun --attention static (the NPU's form):

   ovtrace compile --model SmolLM2-135M-Instruct.Q4_1.gguf --attention static --ladder 64,128,256,512 --reps 3 --under-decode --json cost.json
   ovrun run --model SmolLM2-135M-Instruct.Q4_1.gguf --attention static --ladder 64,128,256,512 --compile-cost cost.json --json run.json

--json writes the compile-cost profile (cost.json: model, device,
openvino_version, huge_pages, rungs[{capacity, compile_s[], compile_cpu_s[], median_s,
ir_build_s[], peak_rss_bytes, import_s[], export_s[], successor_s[], successor_median_s,
under_decode_s[], under_decode_median_s, under_decode_tokens_per_s[], prefill[{chunk, first_s[], first_median_s, successor_s[],
successor_median_s, peak_rss_bytes}]}], fit{model, a, b, r2, max_rel_err, n}
for the decode graph compiled first, fits{KIND: fit} for the others) that
"ovrun run --compile-cost", "ovrun plan" and "ovtrace plan" read; readers of
the older profile (one number per rung) see the fields they knew. A failed
compile or Ctrl-C still writes what was measured, and exits non-zero.

With --import (the default) every decode graph compiled first is then
exported and imported back in the same process: import_s[] and export_s[]
are what a compiled-rung cache (ovrun --cache-dir) hit and miss cost, and
budgets (ovrun run --compile-cost) and ovrun plan --cached use the import
for the rungs that are cached.`,
	Flags: append(compileFlags(),
		ladderFlag,
		repsFlag,
		compilePrefillChunkFlag,
		successorsFlag,
		underDecodeFlag,
		underDecodeBatchFlag,
		compileNiceFlag,
		measureImportFlag,
		jsonFlag, quietFlag,
	),
	Action: compileAction,
}

// compileKinds are the kinds measured after the decode graphs compiled
// first: the prefill graph (unless --prefill-chunk 0) and, with
// --successors, each kind as a successor.
func compileKinds(c *cli.Context) ([]compilecost.Kind, error) {
	chunk := compilePrefillChunkFlag.Get(c)
	if chunk != 0 {
		if err := cliutil.CheckInt(compilePrefillChunkFlag.Name, chunk, 2, maxCapacity); err != nil {
			return nil, fmt.Errorf("%w (0 measures decode graphs only)", err)
		}
	}
	var kinds []compilecost.Kind
	if successorsFlag.Get(c) {
		kinds = append(kinds, compilecost.Kind{Graph: compilecost.GraphDecode, Chunk: 1, Successor: true})
	}
	if underDecodeFlag.Get(c) {
		if err := runtime.CheckNice(compileNiceFlag.Name, compileNiceFlag.Get(c)); err != nil {
			return nil, err
		}
		kinds = append(kinds, compilecost.UnderDecodeKind)
	}
	if chunk > 1 {
		kinds = append(kinds, compilecost.Kind{Graph: compilecost.GraphPrefill, Chunk: chunk})
		if successorsFlag.Get(c) {
			kinds = append(kinds, compilecost.Kind{Graph: compilecost.GraphPrefill, Chunk: chunk, Successor: true})
		}
	}
	return kinds, nil
}

// withPrefillChunk gives the prefill kinds among kinds chunk tokens a call.
func withPrefillChunk(kinds []compilecost.Kind, chunk int) []compilecost.Kind {
	out := slices.Clone(kinds)
	for i, k := range out {
		if k.Graph == compilecost.GraphPrefill {
			out[i].Chunk = chunk
		}
	}
	return out
}

func compileAction(c *cli.Context) error {
	cfg, err := onceConfig(c, 0)
	if err != nil {
		return err
	}
	ladder, err := cliutil.ParseInts("ladder", ladderFlag.Get(c))
	if err != nil {
		return err
	}
	for _, r := range ladder {
		if err := cliutil.CheckInt("ladder", r, 1, maxCapacity); err != nil {
			return err
		}
	}
	if err := cliutil.CheckInt("reps", repsFlag.Get(c), 1, 1000); err != nil {
		return err
	}
	kinds, err := compileKinds(c)
	if err != nil {
		return err
	}
	if err := checkUnderDecodeBatch(underDecodeBatchFlag.Name, underDecodeBatchFlag.Get(c), underDecodeFlag.Get(c), string(cfg.Attention)); err != nil {
		return err
	}
	if p := jsonFlag.Get(c); p != "" {
		if err := safefile.Check(p); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	st := cliutil.NewStatus(os.Stderr, quietFlag.Get(c))
	sweep := compilebench.SweepConfig{Ladder: ladder, Reps: repsFlag.Get(c), Model: cfg.Model, Device: cfg.Device, Precision: cfg.Precision}
	run := func(ctx context.Context, capacity int) (*compilebench.Measurement, error) {
		once := cfg
		once.Capacity, once.Import = capacity, measureImportFlag.Get(c)
		return runOnce(ctx, once, compilebench.Variant{})
	}
	st.Show("compile 1/%d: capacity %d", len(ladder)*sweep.Reps, ladder[0])
	prof, err := compilebench.Sweep(c.Context, sweep, run, func(p compilebench.SweepProgress) {
		left := p.Elapsed / time.Duration(p.Done) * time.Duration(p.Total-p.Done)
		st.Show("compile %d/%d done: capacity %d in %.2f s  ETA %s", p.Done, p.Total, p.Capacity, p.Last.CompileS, eta(left))
	})
	chunk := compilePrefillChunkFlag.Get(c)
	if prof != nil && !c.IsSet(compilePrefillChunkFlag.Name) && prof.Attention == string(model.AttentionPaged) {
		// ovrun's paged graphs take runtime.PagedPrefillChunk tokens a
		// call unless told otherwise: measure the graphs it compiles.
		kinds, chunk = withPrefillChunk(kinds, runtime.PagedPrefillChunk), runtime.PagedPrefillChunk
	}
	if prof != nil && err == nil && len(kinds) > 0 {
		run := func(ctx context.Context, capacity int, k compilecost.Kind, after []model.GraphSpec) (*compilebench.Measurement, error) {
			once := cfg
			once.Capacity, once.Chunk, once.After = capacity, k.Chunk, after
			once.UnderDecode, once.CompileNice = k.UnderDecode, compileNiceFlag.Get(c)
			if k.UnderDecode {
				once.Batch = underDecodeBatchFlag.Get(c)
			}
			return runOnce(ctx, once, compilebench.Variant{})
		}
		err = compilebench.SweepKinds(c.Context, sweep, prof, kinds, chunk, run, func(p compilebench.KindsSweepProgress) {
			left := p.Elapsed / time.Duration(p.Done) * time.Duration(p.Total-p.Done)
			st.Show("other kinds %d/%d done: capacity %d %s in %.2f s  ETA %s", p.Done, p.Total, p.Capacity, p.Kind, p.Last.CompileS, eta(left))
		})
	}
	st.Clear()
	if prof != nil && underDecodeBatchFlag.Get(c) > 1 {
		prof.UnderDecodeBatch = underDecodeBatchFlag.Get(c)
	}
	if prof != nil {
		if path := jsonFlag.Get(c); path != "" {
			if serr := prof.Save(path); serr != nil {
				return errors.Join(err, serr)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "ovtrace: wrote the partial profile to %s\n", path)
			}
		}
		if werr := compilebench.WriteProfile(c.App.Writer, prof); werr != nil {
			return errors.Join(err, werr)
		}
	}
	return err
}
