#!/usr/bin/env python3
"""One OpenVINO GenAI generation, the peer that ovrun is measured against.

Builds an LLMPipeline on the CPU from a model file (GenAI reads GGUF files
directly), feeds it token ids (no tokenizer in the loop), generates exactly
--max-new-tokens tokens greedily (end-of-generation ignored), and writes one
JSON object with the fields ovrun generate --json uses where they mean the
same thing:

  load_s               LLMPipeline construction (read, convert, compile), wall
  ttft_s               GenAI's time to first token (prefill + first sample)
  decode_tokens_per_s  1 / GenAI's mean time per output token after the first
  decode_step_ms       10th, 50th and 90th percentiles of GenAI's time per
                       output token after the first (raw_metrics.m_durations;
                       each includes its sampler)
  peak_rss_bytes       VmHWM of this process (Python and numpy included)
  generated_ids        the tokens

--precision f32 asks for f32 throughout (inference, KV cache, no dynamic
quantization of activations), as ovrun --precision f32 does; bf16 asks for
bf16 inference and a bf16 KV cache, as ovrun --precision bf16 stores its
cache on the CPU; default leaves GenAI's own defaults (bf16 and a u8 KV
cache on CPUs with AMX).

Run with the virtual environment scripts/bench-vs-genai.sh makes.
"""
import argparse
import json
import sys
import time


def peak_rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="GGUF file or OpenVINO IR folder")
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    ap.add_argument("--max-new-tokens", type=int, required=True)
    ap.add_argument("--precision", choices=["default", "f32", "bf16"], default="default")
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--json", required=True, help="output file")
    a = ap.parse_args()

    t_import = time.perf_counter()
    import numpy as np
    import openvino as ov
    import openvino_genai as genai
    import_s = time.perf_counter() - t_import

    props = {}
    if a.precision == "f32":
        props = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32",
                 "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
    elif a.precision == "bf16":
        props = {"INFERENCE_PRECISION_HINT": "bf16", "KV_CACHE_PRECISION": "bf16"}
    t0 = time.perf_counter()
    pipe = genai.LLMPipeline(a.model, a.device, **props)
    load_s = time.perf_counter() - t0

    ids = np.array([[int(t) for t in a.prompt_ids.split(",")]], dtype=np.int64)
    inputs = genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))
    cfg = genai.GenerationConfig()
    cfg.max_new_tokens = a.max_new_tokens
    cfg.min_new_tokens = a.max_new_tokens
    cfg.ignore_eos = True
    cfg.do_sample = False
    t1 = time.perf_counter()
    res = pipe.generate(inputs, cfg)
    generate_s = time.perf_counter() - t1
    pm = res.perf_metrics
    tokens = [int(t) for t in res.tokens[0]]
    if len(tokens) != a.max_new_tokens:
        sys.exit(f"genai generated {len(tokens)} tokens, asked for {a.max_new_tokens}")
    tpot_ms = pm.get_tpot().mean
    steps = sorted(d / 1e3 for d in pm.raw_metrics.m_durations)  # ms, as ovrun's nearest-rank percentiles
    step_ms = {f"p{q}": steps[min(len(steps) - 1, q * len(steps) // 100)] if steps else 0 for q in (10, 50, 90)}
    out = {
        "tool": "genai", "genai_version": genai.__version__, "model": a.model,
        "precision": a.precision, "properties": props,
        "prompt_ids": ids[0].tolist(), "generated_ids": tokens,
        "import_s": import_s, "load_s": load_s, "genai_load_time_s": pm.get_load_time() / 1e3,
        "ttft_s": pm.get_ttft().mean / 1e3,
        "tpot_s": tpot_ms / 1e3,
        "decode_tokens_per_s": 1e3 / tpot_ms if tpot_ms > 0 else 0,
        "decode_step_ms": step_ms,
        "generate_s": generate_s,
        "peak_rss_bytes": peak_rss(),
    }
    with open(a.json, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
