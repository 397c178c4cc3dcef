package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/engine"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/hugepages"
	"github.com/ovtoolkit/ovrun/internal/npy"
	"github.com/ovtoolkit/ovrun/internal/stats"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/ov"
	"github.com/ovtoolkit/ovrun/runtime"
)

var (
	capacityFlag     = &cli.IntFlag{Name: "capacity", Usage: "context capacity `C` (KV slots); default: prompt + --max-new-tokens rounded up to a power of two, at least 256"}
	maxNewTokensFlag = &cli.IntFlag{Name: "max-new-tokens", Value: 16, Usage: "`N` tokens to generate at most"}
	dumpLogitsFlag   = &cli.StringFlag{Name: "dump-logits", Usage: "write logits rows to `FILE.npy`"}
)

var generateCommand = &cli.Command{
	Name:  "generate",
	Usage: "generate text or tokens at one fixed capacity (no ladder)",
	Description: `Compiles a decode graph of --capacity slots (as --prefill decides, with a
prefill graph, or one shared graph for the prompt and decoding instead), runs the
prompt, and generates up to --max-new-tokens tokens, greedily unless
--temperature > 0. A text prompt (--prompt, --prompt-file) is tokenized with
the model's own tokenizer, the answer is printed as it is generated, and
generation stops at the model's end-of-generation token unless --ignore-eos:

   ovrun generate --model SmolLM2-135M-Instruct.Q4_1.gguf --prompt "The capital of France is" --max-new-tokens 32

Token prompts (--prompt-ids, --prompt-tokens) print the token ids and never
stop early. --dump-logits writes float32 [rows, vocab] as .npy: row 0 =
logits after the prompt, row i = after the i-th generated token (the last
generated token is not fed back). --json writes prompt_ids, generated_ids,
text, finish_reason and the timings (decode_step_ms: the 10th, 50th and
90th percentiles of the decode steps' infer times) and huge_pages (whether
malloc was started asking for transparent huge pages: ovrun starts itself
with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 where the kernel hands them out
on request; glibc.malloc.hugetlb=0 in GLIBC_TUNABLES keeps 4 KiB pages).
Every field, with its schema ovrun.generate/1: docs/outputs.md.`,
	Flags: append(append(compileFlags(),
		capacityFlag,
		promptFlag, promptFileFlag, promptIDsFlag, promptTokensFlag, seedFlag, prefillChunkFlag, prefillFlag,
		maxNewTokensFlag, dumpLogitsFlag,
		jsonFlag,
	), samplingFlags...),
	Action: generateAction,
}

func generateAction(c *cli.Context) error {
	capacity, chunk, newTokens := capacityFlag.Get(c), prefillChunkFlag.Get(c), maxNewTokensFlag.Get(c)
	if capacity != 0 {
		if err := cliutil.CheckInt(capacityFlag.Name, capacity, 1, runtime.MaxCapacity); err != nil {
			return err
		}
	}
	n, err := promptLen(c)
	if err != nil {
		return err
	}
	prefill, err := prefillMode(c)
	if err != nil {
		return err
	}
	for _, err := range []error{
		cliutil.CheckInt(maxNewTokensFlag.Name, newTokens, 1, runtime.MaxCapacity),
		checkCompileFlags(c),
		checkOutputs(c, jsonFlag, dumpLogitsFlag),
	} {
		if err != nil {
			return err
		}
	}
	if capacity != 0 && n > 0 { // n is 0 for a text prompt, known once tokenized
		if err := promptFits(n, capacity, newTokens); err != nil {
			return err
		}
	}
	cfg, err := modelConfig(c)
	if err != nil {
		return err
	}
	checkSizes := func(capacity int) error {
		if err := runtime.CheckCapacity(capacityFlag.Name, capacity, runtime.ShapeOf(cfg)); err != nil {
			return err
		}
		return runtime.CheckPrefillChunk(prefillChunkFlag.Name, chunk, capacity, cfg)
	}
	if capacity != 0 {
		if err := checkSizes(capacity); err != nil {
			return err
		}
	}
	ck, comp, err := openModel(c)
	if err != nil {
		return err
	}
	defer ck.Close()
	defer comp.Close()
	in, err := readPrompt(c, ck)
	if err != nil {
		return err
	}
	if jsonFlag.Get(c) != "" && in.tok == nil {
		// The JSON's text of a token prompt's answer: the tokenizer is
		// built while the graph compiles rather than after the answer
		// (25-30 ms of a SmolLM2 run), and before the model closes.
		go func() {
			ck.Tokenizer()
			debug.FreeOSMemory() // its build's garbage (9 MiB for SmolLM2's)
		}()
		defer ck.Tokenizer()
	}
	if capacity == 0 {
		capacity = defaultCapacity(len(in.ids) + newTokens)
		if err := checkSizes(capacity); err != nil {
			return err
		}
	}
	if err := promptFits(len(in.ids), capacity, newTokens); err != nil {
		return err
	}
	if dumpLogitsFlag.Get(c) != "" {
		if err := runtime.CheckMemory("--dump-logits", int64(newTokens)*int64(cfg.VocabSize)*4); err != nil {
			return err
		}
	}
	req, err := request(c, in, newTokens)
	if err != nil {
		return err
	}
	var stream *textStream
	if in.isText() {
		stream = newTextStream(os.Stdout, in.tok)
		req.Emit = stream.emit
	}
	dec, _, err := engine.Decoding(req)
	if err != nil {
		return err
	}
	// Where the memory is, taken once mid-answer: every graph compiled,
	// the KV cache half grown (the end of the run has closed the graphs).
	var mem runtime.MemoryParts
	emitted, onToken := 0, dec.OnToken
	dec.OnToken = func(tok int64) {
		if emitted++; emitted == newTokens/2+1 {
			mem = runtime.Memory(comp.WeightsRegion(), int64(len(in.ids)+emitted)*comp.KVShape().TokenBytes())
		}
		if onToken != nil {
			onToken(tok)
		}
	}
	res, genErr := runtime.Generate(c.Context, comp, comp.KVShape(), runtime.GenerateConfig{
		Capacity: capacity, PrefillChunk: prefillChunk(c, comp), Prefill: prefill,
		Prompt: in.ids, MaxNewTokens: newTokens, KeepLogits: dumpLogitsFlag.Get(c) != "",
		Decoding: dec,
	})
	if stream != nil {
		stream.flush()
		fmt.Println()
	}
	if res == nil {
		if !errors.Is(genErr, context.Canceled) || jsonFlag.Get(c) == "" {
			return genErr
		}
		// Ctrl-C before the first token (in a compile, or waiting for the
		// rung cache's lock): --json still says what happened.
		res = &runtime.GenerateResult{}
	}
	if errors.Is(genErr, context.Canceled) && res.FinishReason == "" {
		res.FinishReason = "interrupted"
	}
	// What was generated is reported, and saved, on failure and Ctrl-C too.
	if p := dumpLogitsFlag.Get(c); p != "" && len(res.Logits) > 0 {
		if err := npy.WriteFile(p, res.Logits); err != nil {
			return errors.Join(genErr, fmt.Errorf("write logits: %w", err))
		}
	}
	out := os.Stdout
	if stream != nil {
		out = os.Stderr // the answer alone on standard output
	} else {
		toks := make([]string, len(res.Tokens))
		for i, t := range res.Tokens {
			toks[i] = fmt.Sprint(t)
		}
		fmt.Printf("tokens: %s\n", strings.Join(toks, ","))
	}
	attention := comp.DescribeAttention(model.GraphSpec{Capacity: capacity, Chunk: 1, Shared: res.PrefillUsed == runtime.PrefillUsedShared})
	fmt.Fprintf(out, "compile %.3f s  prefill %.3f s (%d tokens)  decode %.2f tok/s (%d steps)  precision %s  attention %s  kv %s  finish %s\n",
		res.CompileS, res.PrefillS, len(in.ids), res.DecodeTokensPerS(), res.Steps(), comp.EffectivePrecision(), attention, comp.KVPrecision(), res.FinishReason)
	p := jsonFlag.Get(c)
	if p == "" {
		return cliutil.Interrupted(genErr, "")
	}
	ver, _ := ov.Version()
	tok := in.tok
	if tok == nil {
		tok, _ = ck.Tokenizer() // text of token prompts too, where the model has a tokenizer
	}
	js := generateOutput{Schema: generateSchema,
		Model: modelFlag.Get(c), Device: comp.Options().Device, OpenVINOVersion: ver, HugePages: hugepages.On(),
		Precision: comp.Options().Precision, PrecisionEffective: comp.EffectivePrecision(), Attention: attention, KVPrecision: comp.KVPrecision(),
		Capacity: capacity, Prompt: in.ids, PromptIDs: in.ids,
		Tokens: res.Tokens, GeneratedIDs: res.Tokens, Text: generatedText(tok, res.Tokens),
		FinishReason: res.FinishReason,
		CompileS:     res.CompileS, PrefillS: res.PrefillS,
		PrefillUsed: res.PrefillUsed, PrefillReason: res.PrefillReason, SharedStepPenalty: res.SharedStepPenalty,
		DecodeS: res.DecodeS, DecodeTokensPerS: res.DecodeTokensPerS(), DecodeStepMS: stepPercentiles(res.StepS),
		PeakRSSBytes: runtime.PeakRSS(),
		Weights:      string(comp.Weights().Format()), WeightBytes: comp.Weights().TensorBytes(),
		CompileIn: compileIn(comp), Startup: startup, Memory: mem,
	}
	if genErr != nil {
		js.Error = genErr.Error()
	}
	if err := cliutil.WriteJSON(p, js); err != nil {
		return errors.Join(genErr, err)
	}
	return cliutil.Interrupted(genErr, p)
}

// generateSchema is generateOutput's schema field (docs/outputs.md).
const generateSchema = "ovrun.generate/1"

// generateOutput is what generate --json writes: the ids, the text, the
// timings, and where they were made (docs/outputs.md, "ovrun generate
// --json"). Fields ending in _s are seconds, in _ms milliseconds, in
// _bytes bytes.
type generateOutput struct {
	Schema             string  `json:"schema"`
	Model              string  `json:"model"`
	Device             string  `json:"device"`
	OpenVINOVersion    string  `json:"openvino_version"`
	HugePages          bool    `json:"huge_pages"`
	Precision          string  `json:"precision"`           // asked for; "" the device's default
	PrecisionEffective string  `json:"precision_effective"` // what the device reports it runs
	Attention          string  `json:"attention"`
	KVPrecision        string  `json:"kv_precision"`
	Capacity           int     `json:"capacity"`
	Prompt             []int64 `json:"prompt"` // the same as prompt_ids, the older name
	PromptIDs          []int64 `json:"prompt_ids"`
	Tokens             []int64 `json:"tokens"` // the same as generated_ids, the older name
	GeneratedIDs       []int64 `json:"generated_ids"`
	Text               string  `json:"text"`
	FinishReason       string  `json:"finish_reason"`
	CompileS           float64 `json:"compile_s"`
	PrefillS           float64 `json:"prefill_s"`
	PrefillUsed        string  `json:"prefill_used"`
	PrefillReason      string  `json:"prefill_reason"`
	SharedStepPenalty  float64 `json:"shared_step_penalty"`
	DecodeS            float64 `json:"decode_s"`
	DecodeTokensPerS   float64 `json:"decode_tokens_per_s"`
	DecodeStepMS       stepMS  `json:"decode_step_ms"`
	PeakRSSBytes       int64   `json:"peak_rss_bytes"`
	Weights            string  `json:"weights"`
	WeightBytes        int64   `json:"weight_bytes"`
	CompileIn          string  `json:"compile_in"`
	// Startup is the seconds before the first graph; Memory where the
	// resident memory was mid-answer.
	Startup startupTimes        `json:"startup"`
	Memory  runtime.MemoryParts `json:"memory"`
	Error   string              `json:"error,omitempty"`
}

// stepMS are percentiles of decode step times in milliseconds.
type stepMS struct {
	P10 float64 `json:"p10"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
}

// stepPercentiles are the 10th, 50th and 90th percentiles of decode step
// times in milliseconds, for --json: on a shared machine the fastest steps
// show what the graph costs, the slow ones what the machine took from it.
func stepPercentiles(steps []float64) stepMS {
	q := func(p float64) float64 { return 1e3 * stats.Quantile(steps, p) }
	return stepMS{P10: q(0.1), P50: q(0.5), P90: q(0.9)}
}

// promptFits checks that a prompt of n tokens and newTokens generated
// tokens (the last one not fed back) fit capacity slots, naming what does
// not fit.
func promptFits(n, capacity, newTokens int) error {
	need := n + max(newTokens, 1) - 1
	switch {
	case n > capacity:
		return fmt.Errorf("%w: prompt of %d tokens does not fit --%s %d (give %d or more, or leave it out)",
			runtime.ErrCapacity, n, capacityFlag.Name, capacity, need)
	case newTokens > capacity-n+1:
		return fmt.Errorf("--%s %d: a prompt of %d tokens leaves room for %d at --%s %d (give %d or more, or leave it out)",
			maxNewTokensFlag.Name, newTokens, n, capacity-n+1, capacityFlag.Name, capacity, need)
	}
	return nil
}

// defaultCapacity is the static capacity for n tokens: a power of two, at
// least 256.
func defaultCapacity(n int) int {
	c := 256
	for c < n {
		c *= 2
	}
	return c
}
