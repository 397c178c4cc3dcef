package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/npy"
	"github.com/ovtoolkit/ovrun/ov"
	"github.com/ovtoolkit/ovrun/runtime"
)

var generateCommand = &cli.Command{
	Name:  "generate",
	Usage: "greedy decoding with one static graph of a given capacity",
	Description: `Compiles a decode graph (and a prefill graph) of --capacity slots, runs the
prompt, and greedily generates --max-new-tokens tokens. --dump-logits writes
float32 [rows, vocab] as .npy: row 0 = logits after the prompt, row i = after
the i-th generated token (the last generated token is not fed back).`,
	Flags: append(compileFlags(),
		&cli.IntFlag{Name: "capacity", Usage: "context capacity `C`", Required: true},
		promptIDsFlag, promptTokensFlag, seedFlag, prefillChunkFlag,
		&cli.IntFlag{Name: "max-new-tokens", Value: 16, Usage: "tokens to generate"},
		&cli.StringFlag{Name: "dump-logits", Usage: "write logits rows to `FILE.npy`"},
		jsonFlag,
	),
	Action: func(c *cli.Context) error {
		capacity, chunk, newTokens := c.Int("capacity"), c.Int(prefillChunkFlag.Name), c.Int("max-new-tokens")
		if err := cliutil.CheckInt("capacity", capacity, 1, runtime.MaxCapacity); err != nil {
			return err
		}
		n, err := promptLen(c)
		if err != nil {
			return err
		}
		if n > capacity {
			return fmt.Errorf("%w: prompt of %d tokens is longer than capacity %d", runtime.ErrCapacity, n, capacity)
		}
		for _, err := range []error{
			cliutil.CheckInt("max-new-tokens", newTokens, 1, capacity-n+1),
			checkCompileFlags(c),
			checkOutputs(c, jsonFlag.Name, "dump-logits"),
		} {
			if err != nil {
				return err
			}
		}
		cfg, err := modelConfig(c)
		if err != nil {
			return err
		}
		if err := runtime.CheckCapacity("capacity", capacity, runtime.ShapeOf(cfg)); err != nil {
			return err
		}
		if err := runtime.CheckPrefillChunk(prefillChunkFlag.Name, chunk, capacity, cfg); err != nil {
			return err
		}
		if c.String("dump-logits") != "" {
			if err := runtime.CheckMemory("--dump-logits", int64(newTokens)*int64(cfg.VocabSize)*4); err != nil {
				return err
			}
		}
		ids, err := prompt(c, cfg.VocabSize)
		if err != nil {
			return err
		}
		ck, comp, err := openModel(c)
		if err != nil {
			return err
		}
		defer ck.Close()
		defer comp.Close()
		res, genErr := runtime.Generate(c.Context, comp, runtime.ShapeOf(ck.Config), runtime.GenerateConfig{
			Capacity: capacity, PrefillChunk: chunk,
			Prompt: ids, MaxNewTokens: newTokens, KeepLogits: c.String("dump-logits") != "",
		})
		if res == nil {
			return genErr
		}
		// What was generated is reported, and saved, on failure and Ctrl-C too.
		if p := c.String("dump-logits"); p != "" && len(res.Logits) > 0 {
			if err := npy.WriteFile(p, res.Logits); err != nil {
				return errors.Join(genErr, fmt.Errorf("write logits: %w", err))
			}
		}
		toks := make([]string, len(res.Tokens))
		for i, t := range res.Tokens {
			toks[i] = fmt.Sprint(t)
		}
		fmt.Printf("tokens: %s\n", strings.Join(toks, ","))
		fmt.Printf("compile %.3f s  prefill %.3f s (%d tokens)  decode %.2f tok/s (%d steps)  precision %s\n",
			res.CompileS, res.PrefillS, len(ids), res.DecodeTokensPerS(), res.Steps, comp.EffectivePrecision())
		p := c.String(jsonFlag.Name)
		if p == "" {
			return cliutil.Interrupted(genErr, "")
		}
		ver, _ := ov.Version()
		out := map[string]any{
			"model": c.String("model"), "device": comp.Options().Device, "openvino_version": ver,
			"precision": comp.Options().Precision, "precision_effective": comp.EffectivePrecision(),
			"capacity": capacity, "prompt": ids,
			"tokens": res.Tokens, "compile_s": res.CompileS, "prefill_s": res.PrefillS,
			"decode_s": res.DecodeS, "decode_tokens_per_s": res.DecodeTokensPerS(),
			"peak_rss_bytes": runtime.PeakRSS(),
		}
		if genErr != nil {
			out["error"] = genErr.Error()
		}
		if err := cliutil.WriteJSON(p, out); err != nil {
			return errors.Join(genErr, err)
		}
		return cliutil.Interrupted(genErr, p)
	},
}
