package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/internal/npy"
	"github.com/ovtoolkit/ovrun/ov"
	"github.com/ovtoolkit/ovrun/runtime"
)

var (
	capacityFlag     = &cli.IntFlag{Name: "capacity", Usage: "context capacity `C` (KV slots)", Required: true}
	maxNewTokensFlag = &cli.IntFlag{Name: "max-new-tokens", Value: 16, Usage: "`N` tokens to generate"}
	dumpLogitsFlag   = &cli.StringFlag{Name: "dump-logits", Usage: "write logits rows to `FILE.npy`"}
)

var generateCommand = &cli.Command{
	Name:  "generate",
	Usage: "greedy decoding with one static graph of a given capacity",
	Description: `Compiles a decode graph (and a prefill graph) of --capacity slots, runs the
prompt, and greedily generates --max-new-tokens tokens. --dump-logits writes
float32 [rows, vocab] as .npy: row 0 = logits after the prompt, row i = after
the i-th generated token (the last generated token is not fed back).`,
	Flags: append(compileFlags(),
		capacityFlag,
		promptIDsFlag, promptTokensFlag, seedFlag, prefillChunkFlag,
		maxNewTokensFlag, dumpLogitsFlag,
		jsonFlag,
	),
	Action: func(c *cli.Context) error {
		ck, comp, err := openModel(c)
		if err != nil {
			return err
		}
		defer ck.Close()
		defer comp.Close()
		ids, err := prompt(c, ck.Config.VocabSize)
		if err != nil {
			return err
		}
		res, err := runtime.Generate(c.Context, comp, runtime.ShapeOf(ck.Config), runtime.GenerateConfig{
			Capacity: capacityFlag.Get(c), PrefillChunk: prefillChunkFlag.Get(c),
			Prompt: ids, MaxNewTokens: maxNewTokensFlag.Get(c), KeepLogits: dumpLogitsFlag.Get(c) != "",
		})
		if err != nil {
			return err
		}
		if p := dumpLogitsFlag.Get(c); p != "" {
			if err := npy.WriteFile(p, res.Logits); err != nil {
				return fmt.Errorf("write logits: %w", err)
			}
		}
		toks := make([]string, len(res.Tokens))
		for i, t := range res.Tokens {
			toks[i] = fmt.Sprint(t)
		}
		fmt.Printf("tokens: %s\n", strings.Join(toks, ","))
		fmt.Printf("compile %.3f s  prefill %.3f s (%d tokens)  decode %.2f tok/s (%d steps)  precision %s\n",
			res.CompileS, res.PrefillS, len(ids), res.DecodeTokensPerS(), res.Steps, comp.EffectivePrecision())
		if p := jsonFlag.Get(c); p != "" {
			ver, _ := ov.Version()
			out := map[string]any{
				"model": modelFlag.Get(c), "device": comp.Options().Device, "openvino_version": ver,
				"precision": comp.Options().Precision, "precision_effective": comp.EffectivePrecision(),
				"capacity": capacityFlag.Get(c), "prompt": ids,
				"tokens": res.Tokens, "compile_s": res.CompileS, "prefill_s": res.PrefillS,
				"decode_s": res.DecodeS, "decode_tokens_per_s": res.DecodeTokensPerS(),
				"peak_rss_bytes": runtime.PeakRSS(),
			}
			b, _ := json.MarshalIndent(out, "", "  ")
			return os.WriteFile(p, append(b, '\n'), 0o644)
		}
		return nil
	},
}
