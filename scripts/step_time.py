#!/usr/bin/env python3
"""Decode-step time of several graphs, interleaved in one process.

Each argument is an ovrun decode graph that `ovrun export-ir` wrote, or
genai:XML, the stateful model OpenVINO GenAI builds from a GGUF file
(LLMPipeline(path, "CPU", enable_save_ov_model=True) saves it beside the
file as openvino_model.xml), or genai-paged:XML, that model turned into
PagedAttention as GenAI's pipeline runs it on the CPU (one sequence,
caches of 32-slot blocks in the inference precision). Every graph is compiled on the CPU, then the
graphs take turns, three decode steps each, --rounds times, so a busy or
throttled machine slows all of them alike. Each step starts with --live
tokens in the cache (GenAI's cache is refilled by a prefill every three
steps, outside the timing). Prints min, first quartile and median ms:

  bin/ovrun export-ir --model M --capacity 1024 --prefill-chunk 0 --attention static --precision bf16 --out /tmp/s
  bin/ovrun export-ir --model M --capacity 1024 --prefill-chunk 0 --attention bounded --precision bf16 --out /tmp/b
  bin/ovrun export-ir --model M --capacity 1024 --shared --precision bf16 --out /tmp/h
  bin/ovrun export-ir --model M --capacity 1024 --prefill-chunk 0 --attention paged --precision bf16 --out /tmp/p
  .venv/bin/python scripts/step_time.py --live 500 /tmp/s/decode-c1024.xml /tmp/b/decode-c1024.xml /tmp/h/shared-c1024-t64.xml genai:DIR/openvino_model.xml

--precision f32 compiles at f32 (then export with --precision f32).
export-ir's --precision writes the graphs as ovrun lays them out for that
precision (bf16 on a CPU with AMX: gate and up apart, for the plugin's
fused MLP node, and the cache in bf16); ovrun compiles with
SNIPPETS_MODE=DISABLE on the CPU, so add +SNIPPETS_MODE=DISABLE to compare
its graphs as it runs them.
GRAPH+KEY=VALUE compiles that graph with an extra property (repeatable):
/tmp/h/shared-c1024-t128.xml+SNIPPETS_MODE=IGNORE_CALLBACK.
"""
import argparse
import time

import numpy as np
import openvino as ov
from ovrun_core import compile_props, kv_table, new_core, past_rows, precision_props


def timed(req, keep):
    """A step that times one infer call of req; keep holds the arrays its
    tensors share, alive as long as the step."""
    def step():
        t0 = time.perf_counter()
        req.infer()
        return time.perf_counter() - t0
    step.keep = keep
    return step


def ovrun_step(core, path, live, props):
    """A timed decode step of an ovrun graph: position live, zero cache."""
    m = core.read_model(path)
    cm = core.compile_model(m, "CPU", compile_props(m, props))
    req, keep = cm.create_infer_request(), []
    for p in m.inputs:  # as declared: the plugin may relax a paged cache's shape
        # Dynamic dimensions: a shared graph's token axis takes the one
        # token of a decode step; a bounded graph's past inputs (declared
        # 1..C) get the live prefix the runtime binds (model.LiveSlots), a
        # paged graph's the blocks of 32 slots that hold live + 1 tokens.
        shape, name = [d.get_max_length() for d in p.get_partial_shape()], p.get_any_name()
        if p.get_partial_shape()[0].is_dynamic:
            shape[0] = past_rows(m, live, shape[0])
        if name in ("input_ids", "position_ids") and p.get_partial_shape()[1].is_dynamic:
            shape[1] = 1
        if name == "input_ids":
            t = ov.Tensor(np.full(shape, 5, np.int64))
        elif name == "position_ids":
            t = ov.Tensor(np.full(shape, live, np.int64))
        elif name == "logits_index":
            t = ov.Tensor(np.zeros(shape, np.int64))
        elif name == "kv_table":  # a kernel decode graph's caches, by address
            table, arrays = kv_table(m)
            keep.extend(arrays)
            t = ov.Tensor(table)
        elif p.get_element_type() == ov.Type.bf16:
            a = np.zeros(shape, np.uint16)
            keep.append(a)
            t = ov.Tensor(a, shape, ov.Type.bf16)
        else:
            t = ov.Tensor(np.zeros(shape, p.get_element_type().to_dtype()))
        keep.append(t)  # the tensors share the arrays' memory
        req.set_tensor(name, t)

    return timed(req, keep)


def genai_step(core, path, live, props):
    """A timed decode step of GenAI's stateful model at positions live..live+2."""
    cm = core.compile_model(core.read_model(path), "CPU", props)
    req = cm.create_infer_request()
    names = {i.get_any_name() for i in cm.inputs}
    n = [0]

    def feed(ids, first):
        total = first + len(ids)
        d = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, total), np.int64),
             "position_ids": np.arange(first, total, dtype=np.int64)[None], "beam_idx": np.zeros(1, np.int32)}
        return {k: v for k, v in d.items() if k in names}

    def step():
        if n[0] % 3 == 0:
            req.reset_state()
            req.infer(feed(list(range(1, live + 1)), 0))
        pos = live + n[0] % 3
        n[0] += 1
        f = feed([5], pos)
        t0 = time.perf_counter()
        req.infer(f)
        return time.perf_counter() - t0
    return step


def genai_paged_step(core, path, live, props):
    """A timed decode step of GenAI's model as its pipeline runs it on the
    CPU: turned into PagedAttention (openvino's paged_attention_transformation,
    as GenAI does when it loads), caches of 32-slot blocks in the inference
    precision, one sequence with live tokens, decoding position live."""
    from openvino._offline_transformations import paged_attention_transformation
    m = core.read_model(path)
    paged_attention_transformation(m, False, False)
    kv = ov.Type.bf16 if props.get("INFERENCE_PRECISION_HINT", "bf16") == "bf16" else ov.Type.f32
    pa = next(op for op in m.get_ordered_ops() if op.get_type_name() == "PagedAttentionExtension")
    heads = {c: (int(pa.get_rt_info()[f"num_{c}_heads"].astype(int)), int(pa.get_rt_info()[f"{c}_head_size"].astype(int)))
             for c in ("k", "v")}
    for p in m.get_parameters():
        name = p.get_output_tensor(0).get_any_name()
        if "_cache." in name:
            h, d = heads["k" if name.startswith("key") else "v"]
            p.set_element_type(kv)
            p.set_partial_shape(ov.PartialShape([-1, h, 32, d]))
    m.validate_nodes_and_infer_types()
    cm = core.compile_model(m, "CPU", dict({"KV_CACHE_PRECISION": kv.get_type_name()}, **props))
    req, keep = cm.create_infer_request(), []
    blocks = live // 32 + 1
    for i in cm.inputs:
        name = i.get_any_name()
        if "_cache." in name:  # [blocks, kv heads, 32, head size]
            shape = [blocks] + [d.get_length() for d in list(i.get_partial_shape())[1:]]
            a = np.zeros(shape, np.uint16 if kv == ov.Type.bf16 else np.float32)
            keep.append(a)
            req.set_tensor(name, ov.Tensor(a, shape, kv))
    feeds = {"input_ids": np.array([5], np.int64), "position_ids": np.array([live], np.int64),
             "max_context_len": np.array(live + 1, np.int32), "past_lens": np.array([live], np.int32),
             "subsequence_begins": np.array([0, 1], np.int32), "block_indices_begins": np.array([0, blocks], np.int32),
             "block_indices": np.arange(blocks, dtype=np.int32)}
    for k, v in feeds.items():
        keep.append(v)
        req.set_tensor(k, ov.Tensor(v))

    return timed(req, keep)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graphs", nargs="+", help="decode graph XML, genai:XML or genai-paged:XML")
    ap.add_argument("--live", type=int, default=144, help="tokens already in the cache")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--precision", default="", help="INFERENCE_PRECISION_HINT (default: the device's)")
    a = ap.parse_args()
    props = precision_props(a.precision)
    core = new_core()
    runs = []
    for g in a.graphs:
        # GRAPH+KEY=VALUE+... compiles GRAPH with extra properties.
        path, *extra = g.split("+")
        p = dict(props, **dict(e.split("=", 1) for e in extra))
        if path.startswith("genai-paged:"):
            step = genai_paged_step(core, path[len("genai-paged:"):], a.live, p)
        elif path.startswith("genai:"):
            step = genai_step(core, path[len("genai:"):], a.live, p)
        else:
            step = ovrun_step(core, path, a.live, p)
        step()  # warm-up
        runs.append((g, step, []))
    for _ in range(a.rounds):
        for _, step, times in runs:
            times.extend(step() for _ in range(3))
    width = max(len(g) for g in a.graphs)
    for g, _, times in runs:
        t = np.sort(times) * 1e3
        print(f"{g:{width}s}  min {t[0]:6.2f}  p25 {t[len(t) // 4]:6.2f}  median {np.median(t):6.2f} ms")


if __name__ == "__main__":
    main()
