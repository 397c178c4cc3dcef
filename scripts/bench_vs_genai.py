#!/usr/bin/env python3
"""ovrun generate against OpenVINO GenAI's LLMPipeline on the same weights.

For every case (precision x prompt length x ovrun capacity) it runs GenAI
(scripts/genai_generate.py) and `ovrun generate` in --pairs pairs, each a
fresh process, with the same prompt ids, greedy, exactly --new-tokens
tokens. The pairs are counterbalanced: GenAI runs first in odd pairs and
second in even ones (A B, B A, A B, ...), so neither tool always gets the
page cache or the quiet moment the other just left. It prints one Markdown
table of medians (each tool's own runs) and ratios (ovrun / GenAI), each
ratio the median of the per-pair ratios: the two runs of a pair share the
machine's state of that minute, so a slow minute on a shared machine moves
both and not their ratio:

  decode tok/s     ovrun: decode_tokens_per_s; GenAI: 1 / mean TPOT
  fast step        the 10th percentile of each run's decode step times
                   (decode_step_ms p10; GenAI's include its sampler), its
                   ratio GenAI / ovrun so that above 1 is ovrun faster, as
                   for tok/s: on a machine whose speed swings within a run
                   (memory bandwidth shared with other guests), the fastest
                   steps show what each tool's step costs and the mean what
                   the machine gave it
  TTFT             ovrun: prefill_s; GenAI: perf_metrics TTFT
  load+compile     ovrun: the process's wall time less prefill and decode,
                   an upper bound on what its first token waits for (start,
                   loading OpenVINO, mapping and repacking the weights,
                   compiling the decode and prefill graphs, tear-down);
                   GenAI: LLMPipeline construction alone (its Python start
                   and imports are left out)
  first token      load+compile plus TTFT: what a user waits from start to
                   the first generated token (a prompt fed through the
                   decode graph is slower per token but needs no second
                   compile; this column weighs both)
  peak RSS         of each process (wait4's ru_maxrss)
  equal            leading generated tokens equal between the two tools
                   (first pair), and at f32 equal to the float64 numpy
                   reference (model/testdata/reference.py over the exactly
                   dequantized weights) for its first --reference-tokens:
                   ovrun must match the reference there (the script fails
                   otherwise); GenAI's GGUF conversion is not exact, so its
                   count is reported, not required

--models names what is measured, one table row group after another:
  smollm2        the SmolLM2 GGUF (--smollm2), precisions default,f32
  small          ovrun synth --preset small --seed 1 (F32), precision f32
  qwen           ovrun synth --preset qwen2.5-0.5b --seed 1 (BF16), precision bf16
  a .gguf file   as it is, precisions default,f32
  a folder       a checkpoint folder (config.json, model.safetensors)
A synthetic preset is synthesized into .cache/models/ once. GenAI's GGUF
reader builds F16 and quantized matrices only (F32 and BF16 ones fail with
"Unsupported quantization type"), so a folder is converted once by
scripts/synth_to_gguf.py --dtype f16 into DIR.f16.gguf and both tools run
that same F16 file; prompts are seeded random token ids (synthetic
checkpoints have no real tokenizer). At f32 the "equal" cell also gives
ovrun on a safetensors folder against ovrun on the GGUF: for an F32 preset
the F16 folder of the same seed (ovrun synth --dtype f16, exactly the
GGUF's values), for an F16 or BF16 folder the folder itself (BF16 -> F16
changes the few values below 2^-17; synth_to_gguf.py prints how many).
--precisions, when given, applies to every model.

Raw JSON of every run goes to --out. Used by scripts/bench-vs-genai.sh.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ovrun_json  # noqa: E402  ovrun's outputs, their schema checked (docs/outputs.md)

# Fixed English text, tokenized by the model's own tokenizer and repeated
# until the longest prompt is covered.
TEXT = (
    "The history of computing is the story of people who wanted machines to do "
    "arithmetic faster than any clerk could. Charles Babbage designed engines of "
    "brass and steam; Ada Lovelace saw that they could manipulate symbols as well "
    "as numbers. A century later, vacuum tubes, then transistors, then integrated "
    "circuits made those ideas cheap, small and fast, and the compiler turned "
    "human notation into the instructions those circuits obey. "
)


def run(cmd, log):
    """Runs cmd as a fresh process; returns (wall seconds, peak RSS bytes)."""
    t0 = time.perf_counter()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        with open(log) as f:
            tail = f.read()[-2000:]
        sys.exit(f"{' '.join(cmd[:4])} ... exited {p.returncode}:\n{tail}")
    return wall, ru.ru_maxrss * 1024


PRESETS = {"small": "small", "qwen": "qwen2.5-0.5b"}
DEFAULT_PRECISIONS = {"small": "f32", "qwen": "bf16"}


def prepare(a, spec):
    """(GGUF file, its source folder or None, safetensors folder to check
    ovrun's GGUF reading against or None, default precisions) of one
    --models entry."""
    if spec == "smollm2":
        return a.smollm2, None, None, "default,f32"
    prec = DEFAULT_PRECISIONS.get(spec, "default,f32")
    if spec in PRESETS:
        folder = f".cache/models/{PRESETS[spec]}-seed1"
        synth(a.ovrun, PRESETS[spec], folder, None)
    elif os.path.isdir(spec):
        folder = spec.rstrip("/")
    else:
        return spec, None, None, prec
    gguf_file = folder + ".f16.gguf"
    if not os.path.exists(gguf_file):
        out = subprocess.run([a.reference_python, os.path.join(HERE, "synth_to_gguf.py"), "--dtype", "f16",
                              folder, gguf_file], check=True, capture_output=True, text=True).stdout
        print(out.strip(), file=sys.stderr, flush=True)
    check = folder
    if json.load(open(os.path.join(folder, "config.json"))).get("torch_dtype") == "float32":
        check = folder + "-f16"
        if spec in PRESETS:
            synth(a.ovrun, PRESETS[spec], check, "f16")
        elif not os.path.isdir(check):
            check = None
    return gguf_file, folder, check, prec


def synth(ovrun, preset, folder, dtype):
    if os.path.exists(os.path.join(folder, "config.json")):
        return
    cmd = [ovrun, "synth", "--preset", preset, "--seed", "1", "--out", folder]
    subprocess.run(cmd + (["--dtype", dtype] if dtype else []), check=True, capture_output=True)


def prompt_ids(ovrun, model, n, folder=None):
    """n prompt ids: the model's own tokens of TEXT, or for a checkpoint
    folder (no real tokenizer) seeded random ids, the eos id left out."""
    if folder:
        import random
        cfg = json.load(open(os.path.join(folder, "config.json")))
        eos = cfg.get("eos_token_id")
        eos = cfg["vocab_size"] - 1 if eos is None else (eos[0] if isinstance(eos, list) else eos)
        r, ids = random.Random(1), []
        while len(ids) < n:
            t = r.randrange(cfg["vocab_size"])
            if t != eos:
                ids.append(t)
        return ids
    out = subprocess.run([ovrun, "tokenize", "--model", model, TEXT * 40],
                         check=True, capture_output=True, text=True).stdout
    ids = [int(t) for t in out.strip().split(",")]
    if len(ids) < n:
        sys.exit(f"the text has {len(ids)} tokens, {n} wanted")
    return ids[:n]


def agree(a, b):
    k = 0
    for x, y in zip(a, b):
        if x != y:
            break
        k += 1
    return k


def reference(py, model, ids, n, out, tag):
    """The first n greedy tokens of the float64 reference forward pass."""
    toks = f"{out}/reference-{tag}-p{len(ids)}.json"
    subprocess.run([py, os.path.join(HERE, "..", "model", "testdata", "reference.py"), "--model", model,
                    "--ids", ",".join(map(str, ids)), "--steps", str(n - 1), "--tokens-out", toks,
                    "--out", toks[:-len(".json")] + ".npy"],
                   check=True, capture_output=True)
    return json.load(open(toks))["argmax"][:n]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2",
                    help="comma-separated: smollm2, small, qwen, a .gguf file or a checkpoint folder")
    ap.add_argument("--model", help="one .gguf file or checkpoint folder (the same as --models MODEL)")
    ap.add_argument("--smollm2", default=".venv/SmolLM2-135M-Instruct.Q4_1.gguf", help="the SmolLM2 GGUF file")
    ap.add_argument("--ovrun", default="bin/ovrun")
    ap.add_argument("--genai-python", required=True, help="python of the GenAI virtual environment")
    ap.add_argument("--precisions", help="default, f32, bf16 (default: each model's own, see above)")
    ap.add_argument("--prompts", default="16,512", help="prompt lengths in tokens")
    ap.add_argument("--capacities", default="256,1024,4096", help="ovrun capacities (those that fit)")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--pairs", type=int, default=3, help="A B pairs per case")
    ap.add_argument("--reference-python", default=".venv/bin/python", help="python with numpy and gguf")
    ap.add_argument("--reference-tokens", type=int, default=8, help="greedy tokens of the f32 reference (0: none)")
    ap.add_argument("--ovrun-arg", action="append", default=[], help="extra argument for ovrun generate")
    ap.add_argument("--out", default=".cache/bench/vs-genai")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    prompts = [int(x) for x in a.prompts.split(",")]
    rows, failures = [], []
    t_start = time.perf_counter()
    for spec in (a.model or a.models).split(","):
        model, folder, check, precs = prepare(a, spec)
        measure(a, model, folder, check, (a.precisions or precs).split(","), prompts, rows, failures, t_start)

    print(f"| model | precision | prompt + new | ovrun capacity | decode tok/s ovrun / GenAI | ratio "
          f"| fast step ms ovrun / GenAI | ratio "
          f"| TTFT ms ovrun / GenAI | ratio | load+compile s ovrun / GenAI | ratio "
          f"| first token s ovrun / GenAI | ratio "
          f"| peak RSS MiB ovrun / GenAI | ratio | leading tokens equal ovrun = GenAI; at f32 vs reference ovrun / GenAI |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cells = [r["model"], r["prec"], f"{r['P']} + {a.new_tokens}", str(r["C"])]
        for key, fmt in (("dec", "{:.1f}"), ("step", "{:.1f}"), ("ttft", "{:.0f}"), ("load", "{:.2f}"), ("first", "{:.2f}"), ("rss", "{:.0f}")):
            x, y, ratio = r[key]
            cells += [f"{fmt.format(x)} / {fmt.format(y)}", f"{ratio:.2f}"]
        cells.append(r["agree"])
        print("| " + " | ".join(cells) + " |")
    print(f"\n{a.pairs} counterbalanced pairs per row: medians, ratios the median of the pairs' ratios; {time.perf_counter() - t_start:.0f} s in all; "
          f"raw JSON in {a.out}", file=sys.stderr)
    if failures:
        sys.exit("f32 check failed: " + "; ".join(failures))


def measure(a, model, folder, check, precisions, prompts, rows, failures, t_start):
    """Runs every case of one model, appending a row per case."""
    tag = os.path.basename(model)[:-len(".gguf")] if model.endswith(".gguf") else os.path.basename(model)
    ids_all = prompt_ids(a.ovrun, model, max(prompts), folder)
    ref = {}
    if a.reference_tokens > 0 and "f32" in precisions:
        for P in prompts:
            ref[P] = reference(a.reference_python, model, ids_all[:P], min(a.reference_tokens, a.new_tokens),
                               a.out, tag)
        print(f"{tag}: reference tokens ready ({time.perf_counter() - t_start:.0f} s)", file=sys.stderr, flush=True)
    for prec in precisions:
        for P in prompts:
            ids = ",".join(str(t) for t in ids_all[:P])
            for C in [int(x) for x in a.capacities.split(",")]:
                if P + a.new_tokens - 1 > C:
                    continue
                name = f"{tag}-{prec}-p{P}-c{C}"
                g, o = [], []
                for i in range(a.pairs):
                    for tool in (("genai", "ovrun") if i % 2 == 0 else ("ovrun", "genai")):
                        if tool == "genai":
                            g.append(run_genai(a, model, ids, prec, f"{a.out}/{name}-genai-{i}.json"))
                        else:
                            o.append(run_ovrun(a, model, C, ids, prec, f"{a.out}/{name}-ovrun-{i}.json"))
                    print(f"{name} pair {i + 1}/{a.pairs}: ovrun {o[-1]['decode_tokens_per_s']:.1f} tok/s "
                          f"(fast step {o[-1].get('decode_step_ms', {}).get('p10', 0):.1f} ms), "
                          f"GenAI {g[-1]['decode_tokens_per_s']:.1f} tok/s "
                          f"(fast step {g[-1].get('decode_step_ms', {}).get('p10', 0):.1f} ms) "
                          f"({time.perf_counter() - t_start:.0f} s)", file=sys.stderr, flush=True)
                k = agree(g[0]["generated_ids"], o[0]["generated_ids"])
                eq = f"{k}/{a.new_tokens}"
                if prec == "f32" and P in ref:
                    ko, kg = agree(ref[P], o[0]["generated_ids"]), agree(ref[P], g[0]["generated_ids"])
                    eq += f"; vs reference {ko}/{len(ref[P])} / {kg}/{len(ref[P])}"
                    if ko < len(ref[P]):
                        failures.append(f"{name}: ovrun leaves the reference after {ko} tokens")
                if prec == "f32" and check:
                    jf = f"{a.out}/{name}-ovrun-folder.json"
                    run(ovrun_cmd(a, check, C, ids, prec, jf), jf + ".log")
                    kf = agree(ovrun_json.load(jf, "generate")["generated_ids"], o[0]["generated_ids"])
                    st = json.load(open(os.path.join(check, "config.json"))).get("torch_dtype", "?")
                    eq += f"; ovrun {st} folder = GGUF {kf}/{a.new_tokens}"
                for tool, runs in (("ovrun", o), ("GenAI", g)):
                    if any(r["generated_ids"] != runs[0]["generated_ids"] for r in runs):
                        print(f"note: {name}: {tool}'s tokens differ between its runs", file=sys.stderr)
                p10 = lambda r: r.get("decode_step_ms", {}).get("p10", 0)  # noqa: E731
                med = lambda runs, key, scale=1: statistics.median(r[key] for r in runs) * scale  # noqa: E731
                paired = lambda ko, kg: statistics.median(x[ko] / y[kg] for x, y in zip(o, g) if y[kg])  # noqa: E731
                rows.append(dict(
                    model=os.path.basename(model),
                    prec=prec + (f" ({o[0].get('precision_effective')})" if o[0].get("precision_effective") else ""),
                    P=P, C=C, agree=eq,
                    # (ovrun median, GenAI median, median of the pairs' ratios)
                    dec=(med(o, "decode_tokens_per_s"), med(g, "decode_tokens_per_s"),
                         paired("decode_tokens_per_s", "decode_tokens_per_s")),
                    step=(statistics.median(p10(r) for r in o), statistics.median(p10(r) for r in g),
                          statistics.median(p10(y) / p10(x) for x, y in zip(o, g) if p10(x))),
                    ttft=(med(o, "prefill_s", 1e3), med(g, "ttft_s", 1e3), paired("prefill_s", "ttft_s")),
                    load=(med(o, "load_compile_s"), med(g, "load_compile_s"), paired("load_compile_s", "load_compile_s")),
                    first=(med(o, "first_token_s"), med(g, "first_token_s"), paired("first_token_s", "first_token_s")),
                    rss=(med(o, "rusage_peak_rss_bytes", 2**-20), med(g, "rusage_peak_rss_bytes", 2**-20),
                         paired("rusage_peak_rss_bytes", "rusage_peak_rss_bytes")),
                ))


def run_genai(a, model, ids, prec, jg):
    """One GenAI generation in a fresh process; its JSON with wall, peak
    RSS, load+compile and first-token times added."""
    wall, rss = run([a.genai_python, os.path.join(HERE, "genai_generate.py"),
                     "--model", model, "--prompt-ids", ids,
                     "--max-new-tokens", str(a.new_tokens),
                     "--precision", prec, "--json", jg], jg + ".log")
    d = json.load(open(jg))
    d.update(wall_s=wall, rusage_peak_rss_bytes=rss, load_compile_s=d["load_s"],
             first_token_s=d["load_s"] + d["ttft_s"])
    return d


def run_ovrun(a, model, C, ids, prec, jo):
    """One ovrun generate in a fresh process, the same fields as run_genai."""
    wall, rss = run(ovrun_cmd(a, model, C, ids, prec, jo), jo + ".log")
    d = ovrun_json.load(jo, "generate")
    d.update(wall_s=wall, rusage_peak_rss_bytes=rss,
             load_compile_s=wall - d["prefill_s"] - d["decode_s"],
             first_token_s=wall - d["decode_s"])
    return d


def ovrun_cmd(a, model, C, ids, prec, json_out):
    cmd = [a.ovrun, "generate", "--model", model, "--capacity", str(C),
           "--prompt-ids", ids, "--max-new-tokens", str(a.new_tokens), "--json", json_out]
    if prec != "default":
        cmd += ["--precision", prec]
    return cmd + a.ovrun_arg


if __name__ == "__main__":
    main()
