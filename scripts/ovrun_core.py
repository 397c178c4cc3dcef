"""An OpenVINO core that reads every graph ovrun writes, paged ones too.

A graph with --attention paged holds OpenVINO's PagedAttentionExtension
operation, which only ovrun's extension library (built by `make build`
beside the wheel's libopenvino) lets the IR reader build.
"""
import os

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
