"""An OpenVINO core that reads every graph ovrun writes, paged ones too.

A graph with --attention paged holds OpenVINO's PagedAttentionExtension
operation, which only ovrun's extension library (built by `make build`
beside the wheel's libopenvino) lets the IR reader build.
"""
import os

import numpy as np
import openvino as ov

EXTENSIONS = ("libovrun_paged_attention.so", "libovrun_gguf_linear.so")


def new_core():
    """ov.Core with ovrun's extensions added where `make build` put them."""
    core = ov.Core()
    for name in EXTENSIONS:
        path = os.path.join(os.path.dirname(ov.__file__), "libs", name)
        if os.path.exists(path):
            core.add_extension(path)
    return core


def precision_props(precision):
    """Compile properties for a --precision flag ("" leaves the device's
    default): INFERENCE_PRECISION_HINT, and for f32 no dynamic quantization
    of activations, as ovrun compiles an f32 run (f32 throughout)."""
    if not precision:
        return {}
    props = {"INFERENCE_PRECISION_HINT": precision}
    if precision == "f32":
        props["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = "0"
    return props


def paged(model):
    """Whether the graph attends paged (its caches are blocks of 32 slots)."""
    return any(op.get_type_name() == "PagedAttentionExtension" for op in model.get_ops())


def compile_props(model, props):
    """props plus, for a paged graph, KV_CACHE_PRECISION set to the type its
    caches are declared in, and the inference precision too unless props
    set it: the CPU plugin reads a paged cache only in the inference
    precision (export with --kv-precision bf16 to run at bf16)."""
    if not paged(model):
        return props
    kv = next(i.get_element_type() for i in model.inputs if i.get_any_name().startswith("past_key")).get_type_name()
    return dict({"INFERENCE_PRECISION_HINT": kv}, **props, KV_CACHE_PRECISION=kv)


def past_rows(model, live, declared_max):
    """The first dimension of the past inputs the runtime binds with live
    tokens in the cache: a bounded graph's live prefix (model.LiveSlots,
    the position rounded up to 64 slots), a paged graph's blocks of 32
    slots that hold live + 1 tokens."""
    rows = live // 32 + 1 if paged(model) else (live // 64 + 1) * 64
    return min(declared_max, rows)


def kv_table(model, fill=None):
    """The kv_table input of a graph that attends through ovrun's Attend (a
    kernel graph's decode graph): each layer's K and V caches allocated in
    the paged layout its Attend operation names (attributes blocks,
    kv_heads, block, head_size, cache_type), zeros or fill(shape, dtype),
    and their addresses, 8 bytes each, K then V per layer. Returns the
    table and the arrays, which must outlive every call (the graph writes
    into them)."""
    ops = [op for op in model.get_ops() if op.get_type_name() == "Attend"]
    table = np.zeros(16 * len(ops), np.uint8)
    keep = [table]
    for op in ops:
        a = op.get_attributes()
        shape = (int(a["blocks"]), int(a["kv_heads"]), int(a["block"]), int(a["head_size"]))
        dtype = np.uint16 if a["cache_type"] == "bf16" else np.float32
        for i in range(2):
            c = fill(shape, dtype) if fill else np.zeros(shape, dtype)
            keep.append(c)
            table[16 * int(a["layer"]) + 8 * i:][:8] = np.frombuffer(np.uint64(c.ctypes.data).tobytes(), np.uint8)
    return table, keep
