package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/app/compilebench"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/ladder"
	"github.com/ovtoolkit/ovrun/model"
)

// Flags shared by the commands that compile.
var (
	modelFlag     = cliutil.ModelFlag(false)
	capacityFlag  = &cli.IntFlag{Name: "capacity", Usage: "context capacity `C` of the graph"}
	chunkFlag     = &cli.IntFlag{Name: "chunk", Value: 1, Usage: "tokens per call of the graph: 1 is the decode graph, >1 a prefill graph"}
	deviceFlag    = cliutil.DeviceFlag()
	precisionFlag = cliutil.PrecisionFlag()
	propFlag      = cliutil.PropFlag()
	attentionFlag = &cli.StringFlag{Name: "attention", Value: string(model.AttentionAuto), Usage: "`FORM` of attention of the measured graphs, as ovrun's --attention: auto (what ovrun compiles on this device: paged on the CPU with ovrun's extension), static (every shape fixed, as an NPU needs: measure this for ovrun --attention static or --graph-per-rung budgets), bounded or paged"}
	jsonFlag      = &cli.StringFlag{Name: "json", Usage: "write the machine-readable result to `FILE`"}
	quietFlag     = cliutil.QuietFlag()
)

func compileFlags() []cli.Flag {
	return []cli.Flag{modelFlag, chunkFlag, deviceFlag, precisionFlag, propFlag, attentionFlag}
}

// maxCapacity is the largest capacity accepted.
const maxCapacity = ladder.MaxCapacity

// onceConfig reads the compile flags; capacity is the graph's (0 where the
// command measures a whole ladder).
func onceConfig(c *cli.Context, capacity int) (compilebench.OnceConfig, error) {
	cfg := compilebench.OnceConfig{
		Model:    modelFlag.Get(c),
		Capacity: capacity,
		Chunk:    chunkFlag.Get(c),
		Device:   strings.ToUpper(deviceFlag.Get(c)),
		Props:    map[string]string{},
	}
	if cfg.Model == "" {
		return cfg, fmt.Errorf("give the checkpoint: --model DIR")
	}
	if _, err := os.Stat(cfg.Model); err != nil {
		return cfg, fmt.Errorf("--model: %w", err)
	}
	if cfg.Chunk < 1 {
		return cfg, fmt.Errorf("--chunk %d: want >= 1", cfg.Chunk)
	}
	if err := cliutil.CheckInt(capacityFlag.Name, cfg.Capacity, 0, maxCapacity); err != nil {
		return cfg, err
	}
	if cfg.Capacity > 0 && cfg.Chunk > cfg.Capacity {
		return cfg, fmt.Errorf("--chunk %d: want at most the capacity %d", cfg.Chunk, cfg.Capacity)
	}
	var err error
	if cfg.Precision, err = cliutil.ParsePrecision(precisionFlag.Get(c)); err != nil {
		return cfg, err
	}
	a, err := model.ParseAttention(attentionFlag.Get(c))
	if err != nil {
		return cfg, fmt.Errorf("--attention: %w", err)
	}
	if a != model.AttentionAuto {
		cfg.Attention = a
	}
	cfg.Props, err = cliutil.ParseProps(propFlag.Get(c))
	return cfg, err
}

func eta(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Second).String()
}

// printJSON writes v as indented JSON to w.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
