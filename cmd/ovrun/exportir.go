package main

import (
	"fmt"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
	"github.com/ovtoolkit/ovrun/runtime/ovexec"
)

// exportPrecisionFlag is export-ir's --precision: an IR file has no
// inference precision, so this says which the graphs are written for.
var exportPrecisionFlag = &cli.StringFlag{Name: "precision", Usage: "inference precision `f32|bf16|f16` the graphs are written for, as the compiling commands lay them out for it on --device: bf16 on a CPU with AMX keeps 16-bit gate and up weights apart (the plugin fuses the MLP into one node), and --kv-precision auto stores the cache in it on the CPU (default: none, f32 caches)"}

var sharedGraphFlag = &cli.BoolFlag{Name: "shared", Usage: "write the graph of prefill mode shared (1 to --prefill-chunk tokens per call; bounded or paged attention) instead of the decode and prefill graphs"}

var exportIRCommand = &cli.Command{
	Name:  "export-ir",
	Usage: "write the decode (and prefill) graphs of one capacity as OpenVINO IR (XML + BIN)",
	Description: `The files open in OpenVINO's own tools (benchmark_app, Netron, ov.Core.read_model).
KV is explicit graph I/O: past_key.N / past_value.N are [capacity, kv_heads, head_dim]
in the --kv-precision type; a bounded graph declares them 1..capacity slots and
attends over the slots it is given: bind the first L = min(capacity, (p/64+1)*64)
slots for a call whose first position is p (what ovrun binds). The new rows come
back as present_key.N / present_value.N for the caller to store at their positions.
--attention and --device choose the graph's attention form (auto: on the CPU
static while the whole past cache takes at most 24 MiB, bounded above; bounded
on GPU; static on NPU). Auto never writes paged graphs here, as the compiling
commands do on the CPU: their PagedAttentionExtension layers read back only
where ovrun's extension library is added to the core (scripts/ovrun_core.py
shows how); ask for them with --attention paged. --kv-precision the
element type of the K/V inputs and outputs (auto is f32 here, an IR file has
no inference precision, unless --precision names the one the graphs are
written for); --weights how the weights are stored, as for run (kernel and
kernel-q8 write GGUFLinear and GGUFGather layers, which read back where
ovrun's kernel library, libovrun_gguf_linear.so, is added to the core).
--shared writes the one graph of prefill mode shared instead: it takes 1 to
--prefill-chunk tokens per call (a dynamic token axis) and bounded or paged
attention.`,
	Flags: []cli.Flag{
		modelFlag,
		capacityFlag,
		prefillChunkFlag,
		deviceFlag,
		attentionFlag,
		exportPrecisionFlag,
		kvPrecisionFlag,
		weightsFlag,
		sharedGraphFlag,
		outDirFlag,
	},
	Action: func(c *cli.Context) error {
		capacity, chunk, out := capacityFlag.Get(c), prefillChunkFlag.Get(c), outDirFlag.Get(c)
		if _, err := cliutil.ParsePrecision(exportPrecisionFlag.Get(c)); err != nil {
			return err
		}
		for _, err := range []error{
			cliutil.CheckInt(capacityFlag.Name, capacity, 1, runtime.MaxCapacity),
			cliutil.CheckInt(prefillChunkFlag.Name, chunk, 0, runtime.MaxPrefillChunk),
			safefile.MkdirAll(out),
		} {
			if err != nil {
				return err
			}
		}
		attention, err := attentionOf(c)
		if err != nil {
			return err
		}
		format, err := model.ParseWeightFormat(weightsFlag.Get(c))
		if err != nil {
			return err
		}
		kv, err := ovexec.ParseKVPrecision(kvPrecisionFlag.Get(c))
		if err != nil {
			return fmt.Errorf("--kv-precision: %w", err)
		}
		precision := exportPrecisionFlag.Get(c)
		if kv == "auto" {
			kv = ovexec.CachePrecisionAt(deviceFlag.Get(c), precision) // as the compiling commands store it
		}
		ck, err := model.Load(modelFlag.Get(c))
		if err != nil {
			return err
		}
		defer ck.Close()
		shape := runtime.ShapeOf(ck.Config)
		shape.ElemBytes = ovexec.KVElemBytes(kv)
		// auto never picks paged here: an IR file with paged attention
		// reads back only where ovrun's extension is added to the core.
		attention = ovexec.ResolveAttention(attention, deviceFlag.Get(c), shape.BufferBytes(capacity), false)
		w := model.NewWeightsWith(ck, model.WeightOptions{Format: format, SplitMLP: ovexec.SplitsMLPAt(deviceFlag.Get(c), precision)})
		blob := make([]byte, w.Size())
		if err := w.Bind(blob); err != nil {
			return err
		}
		specs := []model.GraphSpec{{Capacity: capacity, Chunk: 1, Attention: attention, KVPrecision: kv}}
		if sharedGraphFlag.Get(c) {
			if chunk < 2 {
				return fmt.Errorf("--shared needs a --prefill-chunk above 1, got %d", chunk)
			}
			shared := model.AttentionBounded
			if attention == model.AttentionPaged {
				shared = attention
			}
			specs = []model.GraphSpec{{Capacity: capacity, Chunk: chunk, Shared: true, Attention: shared, KVPrecision: kv}}
		} else if chunk > 1 {
			specs = append(specs, model.GraphSpec{Capacity: capacity, Chunk: chunk, Attention: attention, KVPrecision: kv})
		}
		for _, s := range specs {
			xml, err := model.BuildIR(w, s)
			if err != nil {
				return err
			}
			base := filepath.Join(out, s.Name())
			if err := safefile.WriteFile(base+".xml", xml); err != nil {
				return err
			}
			// The pool grows while graphs are built: write the blob after.
			if err := safefile.WriteFile(base+".bin", w.Bytes()); err != nil {
				return err
			}
			fmt.Printf("wrote %s.xml (%d bytes) and %s.bin (%d bytes)\n", base, len(xml), base, len(w.Bytes()))
		}
		return nil
	},
}
