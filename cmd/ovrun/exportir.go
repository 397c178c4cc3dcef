package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/model"
)

var exportIRCommand = &cli.Command{
	Name:  "export-ir",
	Usage: "write the decode (and prefill) graphs of one capacity as OpenVINO IR (XML + BIN)",
	Description: `The files open in OpenVINO's own tools (benchmark_app, Netron, ov.Core.read_model).
KV is explicit graph I/O: past_key.N / past_value.N are f32 [capacity, kv_heads, head_dim].`,
	Flags: []cli.Flag{
		modelFlag,
		capacityFlag,
		prefillChunkFlag,
		outDirFlag,
	},
	Action: func(c *cli.Context) error {
		ck, err := model.Load(modelFlag.Get(c))
		if err != nil {
			return err
		}
		defer ck.Close()
		w := model.NewWeights(ck)
		blob := make([]byte, w.Size())
		if err := w.Bind(blob); err != nil {
			return err
		}
		specs := []model.GraphSpec{{Capacity: capacityFlag.Get(c), Chunk: 1}}
		if n := prefillChunkFlag.Get(c); n > 1 {
			specs = append(specs, model.GraphSpec{Capacity: capacityFlag.Get(c), Chunk: n})
		}
		out := outDirFlag.Get(c)
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		for _, s := range specs {
			xml, err := model.BuildIR(w, s)
			if err != nil {
				return err
			}
			base := filepath.Join(out, s.Name())
			if err := os.WriteFile(base+".xml", xml, 0o644); err != nil {
				return err
			}
			// The pool grows while graphs are built: write the blob after.
			if err := os.WriteFile(base+".bin", w.Bytes(), 0o644); err != nil {
				return err
			}
			fmt.Printf("wrote %s.xml (%d bytes) and %s.bin (%d bytes)\n", base, len(xml), base, len(w.Bytes()))
		}
		return nil
	},
}
