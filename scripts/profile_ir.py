#!/usr/bin/env python3
"""Where a decode step of an ovrun graph spends its time on the CPU plugin.

Reads an IR that `ovrun export-ir` wrote, compiles it with PERF_COUNT, runs
--steps calls with --live tokens already in the cache, and prints the
per-step time of each executed node type (summed over layers) and the nodes
of the compiled (runtime) model that touch the past K/V inputs, so layout
changes (Reorder, Transpose, Concat) on the KV path show up by name:

  bin/ovrun export-ir --model M --capacity 1024 --prefill-chunk 0 --precision bf16 --out /tmp/ir
  .venv/bin/python scripts/profile_ir.py /tmp/ir/decode-c1024.xml --live 144 --precision bf16

(export with the --precision you profile at: export-ir lays the weights out
for it, e.g. bf16 on a CPU with AMX keeps gate and up apart so that the
plugin runs each MLP as one LLMMLP node)
"""
import argparse
import collections
import re
import time

import numpy as np
import openvino as ov
from ovrun_core import compile_props, kv_table, new_core, past_rows, precision_props


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("xml")
    ap.add_argument("--live", type=int, default=144, help="tokens already in the cache (first position)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--tokens", type=int, default=1, help="tokens per call of a shared graph, or the real ones of a kernel decode graph's 8")
    ap.add_argument("--precision", default="", help="INFERENCE_PRECISION_HINT (default: the device's)")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()

    core = new_core()
    m = core.read_model(a.xml)
    props = dict(precision_props(a.precision), PERF_COUNT="YES")
    t0 = time.perf_counter()
    cm = core.compile_model(m, "CPU", compile_props(m, props))
    print(f"compile {time.perf_counter() - t0:.2f} s, runs as {cm.get_property('INFERENCE_PRECISION_HINT')}")

    rng = np.random.default_rng(0)

    def random_cache(shape, dtype):
        """Random values; for a bf16 cache (uint16) the top half of f32's bits."""
        v = rng.standard_normal(shape).astype(np.float32)
        return (v.view(np.uint32) >> 16).astype(np.uint16) if dtype == np.uint16 else v

    req = cm.create_infer_request()
    feeds = {}
    # A kernel decode graph's token axis is padded (8): token_count says
    # how many of them are real, --tokens of them (default 1, a decode step).
    counted = any(p.get_any_name() == "token_count" for p in m.inputs)
    real = lambda T: min(T, a.tokens) if counted else T  # the chunk's real tokens
    for p in m.inputs:  # as declared: the plugin may relax a paged cache's shape
        # Dynamic dimensions: a shared graph's token axis takes --tokens
        # (default 1, a decode step); a bounded graph's past inputs
        # (declared 1..C) get the live prefix the runtime binds
        # (model.LiveSlots), a paged graph's the blocks that hold it.
        shape = [d.get_max_length() for d in p.get_partial_shape()]
        name = p.get_any_name()
        if p.get_partial_shape()[0].is_dynamic:
            shape[0] = past_rows(m, a.live, shape[0])
        if name in ("input_ids", "position_ids") and p.get_partial_shape()[1].is_dynamic:
            shape[1] = a.tokens
        if name == "input_ids":
            feeds[name] = rng.integers(0, 1000, shape).astype(np.int64)
        elif name == "position_ids":
            feeds[name] = (a.live + np.arange(shape[1])).reshape(shape).astype(np.int64)
        elif name == "logits_index":
            feeds[name] = np.array([real(feeds["input_ids"].shape[1]) - 1], dtype=np.int64)  # the last (real) token of the chunk
        elif name == "token_count":
            feeds[name] = np.array([real(feeds["input_ids"].shape[1])], dtype=np.int64)
        elif name == "kv_table":  # a kernel decode graph's caches, by address
            feeds[name], caches = kv_table(m, random_cache)
        elif p.get_element_type() == ov.Type.bf16:  # a cache stored in bf16
            feeds[name] = ov.Tensor(random_cache(shape, np.uint16), shape, ov.Type.bf16)
        else:
            feeds[name] = random_cache(shape, np.float32)
    for k, v in feeds.items():
        req.set_tensor(k, v if isinstance(v, ov.Tensor) else ov.Tensor(v))  # shares the numpy memory, as ovrun binds its own

    req.infer()  # warm-up
    per_type = collections.Counter()
    per_node = collections.Counter()
    per_op = collections.Counter()  # Reference nodes by operation (ovrun's kernel: GGUFLinear, RMSNorm, RoPE)
    node_type = {}
    wall = []
    for _ in range(a.steps):
        t = time.perf_counter()
        req.infer()
        wall.append(time.perf_counter() - t)
        for pi in req.profiling_info:
            if pi.status != pi.Status.EXECUTED:
                continue
            us = pi.real_time.total_seconds() * 1e6
            per_type[pi.node_type] += us
            per_node[pi.node_name] += us
            per_op[re.sub(r"_\d+$", "", pi.node_name) if pi.node_type == "Reference" else pi.node_type] += us
            node_type[pi.node_name] = f"{pi.node_type} ({pi.exec_type})"
    n = a.steps
    total = sum(per_type.values()) / n
    print(f"step wall median {1e3 * float(np.median(wall)):.2f} ms; nodes sum {total / 1e3:.2f} ms")
    fc = sum(us for t, us in per_op.items() if t.startswith(("FullyConnected", "Gather", "GGUF"))) / n
    print(f"weights (FullyConnected, Gather, GGUFLinear, GGUFGather) {fc / 1e3:.2f} ms; the rest (attention, KV layout, norms) "
          f"{(total - fc) / 1e3:.2f} ms = {(total - fc) / fc:.2f} x weights")
    print("\nper node type, us per step:")
    for t, us in per_type.most_common():
        print(f"  {t:28s} {us / n:9.1f}  {100 * us / n / total:5.1f}%")
    print("\nper operation (Reference nodes by name), us per step:")
    for t, us in per_op.most_common():
        print(f"  {t:28s} {us / n:9.1f}  {100 * us / n / total:5.1f}%")
    print(f"\ntop {a.top} nodes, us per step:")
    for name, us in per_node.most_common(a.top):
        print(f"  {us / n:9.1f}  {node_type[name]:40s} {name}")

    rt = cm.get_runtime_model()
    print("\nruntime model: consumers of past_key.0 / past_value.0 (two levels):")
    for op in rt.get_ordered_ops():
        if op.get_type_name() == "Parameter" and op.get_friendly_name() in ("past_key.0", "past_value.0"):
            frontier = [op]
            for depth in range(2):
                nxt = []
                for node in frontier:
                    for out in node.outputs():
                        for inp in out.get_target_inputs():
                            c = inp.get_node()
                            rti = c.get_rt_info()
                            lt = rti["layerType"].astype(str) if "layerType" in rti else c.get_type_name()
                            ot = rti["outputPrecisions"].astype(str) if "outputPrecisions" in rti else ""
                            # A Result (a paged cache is read and written in place) has no output.
                            shape = c.get_output_partial_shape(0) if c.get_output_size() else ""
                            print(f"  {'  ' * depth}{op.get_friendly_name()} -> {lt} {c.get_friendly_name()} "
                                  f"{shape} {ot}")
                            nxt.append(c)
                frontier = nxt
    counts = collections.Counter(
        (o.get_rt_info()["layerType"].astype(str) if "layerType" in o.get_rt_info() else o.get_type_name())
        for o in rt.get_ordered_ops())
    print("\nruntime model node types:", dict(counts.most_common()))


if __name__ == "__main__":
    main()
