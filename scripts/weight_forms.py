#!/usr/bin/env python3
"""Time of the compressed matrix products of a decoder in each weight form.

Builds 30 layers of SmolLM2-shaped matrix products (hidden 576, FFN 1536,
q/k/v 576/192/192) over random u4 weights with groups of 32 in one of these
forms, compiles each on the CPU and times them interleaved (--rounds
rounds of 5 calls each), so machine load hits all alike:

  native   (q - zp) * scale, an f32 zero point per group (Q4_1's exact form
           as a zero point: ovrun's gathered weights)
  rounded  the zero point rounded to u8 (OpenVINO GenAI's form)
  zp16     the zero point as f16
  min      q * scale, and groupsums(x) @ min^T added (ovrun's linear weights)
  minmul   min with the small product as Multiply and ReduceSum
  minmlp   min for the MLP, zpcalc for attention
  zpcalc   the f32 zero point computed from min and scale in the graph
           (folded at compile time: ovrun's shared graphs)

A "+f" suffix stores q, k, v and gate, up as one matrix each (ovrun's fused
projections):

  .venv/bin/python scripts/weight_forms.py native,rounded,min,native+f,rounded+f,min+f bf16 [--tokens 1] [--dynamic]

--dynamic declares the token axis dynamic, as a shared graph does. Prints
each compile's time, then the medians.
"""
import argparse
import time

import numpy as np
import openvino as ov
import openvino.opset13 as op

H, F, L, G = 576, 1536, 30, 32
DYNAMIC = False
rng = np.random.default_rng(0)


def u4(q):
    t = ov.Tensor(ov.Type.u4, ov.Shape(list(q.shape)))
    flat = q.reshape(-1)
    t.data.view(np.uint8).reshape(-1)[:] = flat[0::2] | (flat[1::2] << 4)
    return op.constant(t)


def weight(out, inp, form):
    """The [out, in] weight of a form, and the minimum plane for "min"."""
    q = rng.integers(0, 16, (out, inp // G, G)).astype(np.uint8)
    d = rng.uniform(0.001, 0.01, (out, inp // G, 1)).astype(np.float16)
    m = (-rng.uniform(0, 15, (out, inp // G, 1)) * d).astype(np.float16)
    zp = -m.astype(np.float32) / d.astype(np.float32)
    x = op.convert(u4(q), ov.Type.f32)
    mins = None
    if form == "native":
        x = op.subtract(x, op.constant(zp))
    elif form == "zp16":
        x = op.subtract(x, op.convert(op.constant(zp.astype(np.float16)), ov.Type.f32))
    elif form == "rounded":
        x = op.subtract(x, op.convert(op.constant(np.clip(np.round(zp), 0, 255).astype(np.uint8)), ov.Type.f32))
    elif form == "zpcalc":
        sc = op.convert(op.constant(d), ov.Type.f32)
        z = op.divide(op.negative(op.convert(op.constant(m), ov.Type.f32)), sc)
        z = op.select(op.equal(sc, op.constant(np.float32(0))), op.constant(np.float32(0)), z)
        x = op.subtract(x, z)
    elif form in ("min", "minmul"):
        mins = op.convert(op.constant(m.reshape(out, inp // G)), ov.Type.f32)
    x = op.multiply(x, op.convert(op.constant(d), ov.Type.f32))
    return op.reshape(x, op.constant(np.array([out, inp], np.int64)), False), mins


def linear(x, out, inp, form):
    w, mins = weight(out, inp, form)
    y = op.matmul(x, w, False, True)
    if mins is not None:
        groups = op.reshape(x, op.constant(np.array([0, 0, inp // G, G], np.int64)), True)
        if form == "minmul":  # the small product as Multiply and ReduceSum
            sums = op.reduce_sum(groups, op.constant(np.array([-1], np.int64)), True)  # [1, T, in/G, 1]
            sums = op.reshape(sums, op.constant(np.array([0, 0, 1, inp // G], np.int64)), True)  # [1, T, 1, in/G]
            y = op.add(y, op.reduce_sum(op.multiply(sums, mins), op.constant(np.array([-1], np.int64)), False))
        else:
            sums = op.reduce_sum(groups, op.constant(np.array([-1], np.int64)), False)
            y = op.add(y, op.matmul(sums, mins, False, True))
    return y


def split(y, sizes):
    return op.variadic_split(y, op.constant(np.int64(-1)), op.constant(np.array(sizes, np.int64))).outputs()


def build(form, tokens):
    fused = form.endswith("+f")
    form = form.removesuffix("+f")
    mlp = form
    if form == "minmlp":  # minimum planes for the MLP only, zero points for attention
        form, mlp = "zpcalc", "min"
    p = op.parameter([1, -1 if DYNAMIC else tokens, H], ov.Type.f32, name="x")
    x = p.output(0)
    for _ in range(L):
        if fused:
            q, k, v = split(linear(x, H + 384, H, form), [H, 192, 192])
        else:
            q, k, v = linear(x, H, H, form), linear(x, 192, H, form), linear(x, 192, H, form)
        x = op.add(x, linear(op.add(q, op.concat([k, v, k], 2)), H, H, form))
        if fused:
            g, u = split(linear(x, 2 * F, H, mlp), [F, F])
        else:
            g, u = linear(x, F, H, mlp), linear(x, F, H, mlp)
        down = linear(op.multiply(op.swish(g), u), H, F, mlp)
        x = op.add(x, op.multiply(down, op.constant(np.float32(0.01))))
    return ov.Model([x], [p], form)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("forms")
    ap.add_argument("precision", help="INFERENCE_PRECISION_HINT: bf16 or f32")
    ap.add_argument("--tokens", type=int, default=1, help="rows of the input (1: a decode step)")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--dynamic", action="store_true", help="declare the token axis dynamic, as a shared graph does")
    a = ap.parse_args()
    global DYNAMIC
    DYNAMIC = a.dynamic
    core = ov.Core()
    props = {"INFERENCE_PRECISION_HINT": a.precision, "NUM_STREAMS": "1"}
    if a.precision == "f32":
        props["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = "0"
    runs = {}
    for f in a.forms.split(","):
        t0 = time.perf_counter()
        req = core.compile_model(build(f, a.tokens), "CPU", props).create_infer_request()
        print(f"{f:10s} compile {time.perf_counter() - t0:.2f} s")
        x = rng.standard_normal((1, a.tokens, H)).astype(np.float32)
        req.infer({0: x})
        runs[f] = (req, x, [])
    for _ in range(a.rounds):
        for req, x, times in runs.values():
            t0 = time.perf_counter()
            for _ in range(5):
                req.infer({0: x})
            times.append((time.perf_counter() - t0) / 5 * 1e3)
    for f, (_, _, times) in runs.items():
        print(f"{f:10s} {a.precision} tokens {a.tokens}: median {np.median(times):.2f} ms, min {np.min(times):.2f}")


if __name__ == "__main__":
    main()
