package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/model"
)

var synthCommand = &cli.Command{
	Name:  "synth",
	Usage: "write a deterministic random-weight checkpoint with a real architecture's shapes",
	Description: `Writes config.json and model.safetensors in Hugging Face layout. The same
preset, seed and dtype always give byte-identical files. Presets: ` + strings.Join(model.Presets(), ", ") + `.`,
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "preset", Value: "tiny", Usage: "architecture `NAME`"},
		&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "random seed"},
		&cli.StringFlag{Name: "dtype", Usage: "storage `f32|f16|bf16` (default: bf16 for real-shape presets, f32 otherwise)"},
		&cli.StringFlag{Name: "out", Usage: "output `DIR`", Required: true},
	},
	Action: func(c *cli.Context) error {
		preset := c.String("preset")
		dt := model.DefaultDType(preset)
		if s := c.String("dtype"); s != "" {
			dt = model.DType(strings.ToUpper(s))
		}
		if err := model.Synthesize(preset, c.Uint64("seed"), dt, c.String("out")); err != nil {
			return err
		}
		fmt.Printf("wrote %s checkpoint (%s, seed %d) to %s\n", preset, dt, c.Uint64("seed"), c.String("out"))
		return nil
	},
}
