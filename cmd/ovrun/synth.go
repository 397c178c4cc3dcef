package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/model"
)

var (
	presetFlag = &cli.StringFlag{Name: "preset", Value: "tiny", Usage: "architecture `NAME`: " + strings.Join(model.Presets(), ", "),
		Action: func(_ *cli.Context, v string) error {
			if !slices.Contains(model.Presets(), v) {
				return fmt.Errorf("--preset %q: want one of %s", v, strings.Join(model.Presets(), ", "))
			}
			return nil
		}}
	synthSeedFlag = &cli.Uint64Flag{Name: "seed", Value: 1, Usage: "random `SEED`"}
	dtypeFlag     = &cli.StringFlag{Name: "dtype", Usage: "storage `f32|f16|bf16` (default: bf16 for real-shape presets, f32 otherwise)",
		Action: func(_ *cli.Context, v string) error {
			if !slices.Contains([]string{"f32", "f16", "bf16"}, strings.ToLower(v)) {
				return fmt.Errorf("--dtype %q: want f32, f16 or bf16", v)
			}
			return nil
		}}
)

var synthCommand = &cli.Command{
	Name:  "synth",
	Usage: "write a deterministic random-weight checkpoint with a real architecture's shapes",
	Description: `Writes config.json and model.safetensors in Hugging Face layout. The same
preset, seed and dtype always give byte-identical files. Presets, smallest
first, with their architectures (model/family_*.go):
` + presetList() + `.
scripts/synth_to_gguf.py writes such a folder as one GGUF file.`,
	Flags: []cli.Flag{
		presetFlag, synthSeedFlag, dtypeFlag, outDirFlag,
	},
	Action: func(c *cli.Context) error {
		preset := presetFlag.Get(c)
		dt := model.DefaultDType(preset)
		if s := dtypeFlag.Get(c); s != "" {
			dt = model.DType(strings.ToUpper(s))
		}
		if err := model.Synthesize(preset, synthSeedFlag.Get(c), dt, outDirFlag.Get(c)); err != nil {
			return err
		}
		fmt.Printf("wrote %s checkpoint (%s, seed %d) to %s\n", preset, dt, synthSeedFlag.Get(c), outDirFlag.Get(c))
		return nil
	},
}

// presetList names the presets with their architectures: "tiny (qwen2), ...".
func presetList() string {
	names := model.Presets()
	for i, p := range names {
		if c, err := model.PresetConfig(p); err == nil {
			names[i] = fmt.Sprintf("%s (%s)", p, c.ModelType)
		}
	}
	return strings.Join(names, ", ")
}
