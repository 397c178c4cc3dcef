#!/usr/bin/env python3
"""GGUF test data made with the `gguf` package (llama.cpp's gguf-py), which
shares no code with the Go reader: raw blocks with their reference
dequantization, and small random GGUF models.

    gguf_helper.py blocks OUTDIR [--seed N]
        For F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K and Q6_K: TYPE.raw holds 64
        random blocks (every bit pattern of the quants, and block scales drawn
        from extreme f16 values: +-0, subnormals, the largest finite, inf, as
        well as ordinary ones); TYPE.f32 holds gguf.quants.dequantize of them
        (little-endian float32).

    gguf_helper.py real FILE OUTDIR --rows N NAME...
        For each tensor NAME of the GGUF FILE: NAME.raw, the stored bytes of
        its first N rows, and NAME.f32, their dequantization. Also, for llama
        q/k projections, NAME.hf.f32: every row dequantized and put back in
        Hugging Face order the way reference.py does it.

    gguf_helper.py model OUT.gguf --arch llama|qwen2|gemma [--seed N]
        A random 2-layer model (hidden 256, FFN 512, vocab 512, 4 heads of 64,
        2 KV heads) whose matrices use every block type (raw random blocks
        with scales that give weights of a sensible size); llama stores q/k
        permuted as llama.cpp's converter does; qwen2 has q/k/v biases and
        tied embeddings; gemma is tied, without biases, with its key and
        value lengths written as llama.cpp writes them (its norm weights
        stand for 1 + w, as the converter stores them).
"""

import argparse
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"]
# byte offsets of the f16 scale fields of each block type
SCALES = {"Q8_0": [0], "Q4_0": [0], "Q4_1": [0, 2], "Q4_K": [0, 2], "Q6_K": [208]}
EXTREME_F16 = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x3C00]


def random_blocks(qt, n, rng):
    _, size = gguf.GGML_QUANT_SIZES[Q[qt]]
    raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    for off in SCALES.get(qt, []):
        vals = np.where(rng.random(n) < 0.5,
                        rng.choice(EXTREME_F16, n),
                        (rng.standard_normal(n) * 0.05).astype(np.float16).view(np.uint16))
        raw[:, off:off + 2] = vals.astype("<u2").view(np.uint8).reshape(n, 2)
    return raw


def cmd_blocks(a):
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    for qt in TYPES:
        raw = random_blocks(qt, 64 if SCALES.get(qt) else 1024, rng)
        deq = gguf.quants.dequantize(raw, Q[qt])
        raw.tofile(os.path.join(a.out, qt + ".raw"))
        deq.astype("<f4").tofile(os.path.join(a.out, qt + ".f32"))


def cmd_real(a):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import reference

    r = gguf.GGUFReader(a.file)
    arch = r.fields["general.architecture"].contents()
    tensors = {t.name: t for t in r.tensors}
    os.makedirs(a.out, exist_ok=True)
    for name in a.names:
        t = tensors[name]
        rows = t.data[: a.rows] if t.data.ndim > 1 else t.data
        np.ascontiguousarray(rows).view(np.uint8).tofile(os.path.join(a.out, name + ".raw"))
        gguf.quants.dequantize(rows, t.tensor_type).astype("<f4").tofile(os.path.join(a.out, name + ".f32"))
        kind = name.split(".")[2] if name.startswith("blk.") else ""
        if arch == "llama" and kind in ("attn_q", "attn_k"):
            heads = r.fields[arch + ".attention.head_count" + ("_kv" if kind == "attn_k" else "")].contents()
            full = gguf.quants.dequantize(t.data, t.tensor_type)
            reference.gguf_unpermute(full, int(heads)).astype("<f4").tofile(os.path.join(a.out, name + ".hf.f32"))


def permute(w, n_head):
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute (HF -> GGUF rows)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def quant_rows(qt, rows, cols, std, rng):
    """rows x cols weights of block type qt as raw blocks, with scales chosen so
    the weights have roughly standard deviation std and mean 0."""
    be, size = gguf.GGML_QUANT_SIZES[Q[qt]]
    n = rows * cols // be
    raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)

    def f16(v):
        return np.asarray(v, dtype=np.float16).view(np.uint8).reshape(n, 2)

    if qt == "Q8_0":  # q int8 uniform: std ~ 74 d
        raw[:, 0:2] = f16(np.full(n, std / 74))
    elif qt == "Q4_0":  # q-8 uniform: std ~ 4.6 d
        raw[:, 0:2] = f16(np.full(n, std / 4.6))
    elif qt == "Q4_1":  # d*q + m, m = -7.5 d
        d = std / 4.6
        raw[:, 0:2], raw[:, 2:4] = f16(np.full(n, d)), f16(np.full(n, -7.5 * d))
    elif qt == "Q4_K":  # (d*sc)*q - dmin*m with m = sc and dmin = 7.5 d
        sc = rng.integers(16, 64, size=(n, 8))
        d = std / 4.6 / 40
        raw[:, 0:2], raw[:, 2:4] = f16(np.full(n, d)), f16(np.full(n, 7.5 * d))
        s = np.zeros((n, 12), dtype=np.uint8)  # 6-bit sc/m of sub-blocks 0-3 plain, 4-7 split
        s[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
        s[:, 4:8] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
        s[:, 8:12] = (sc[:, 4:8] & 15) | ((sc[:, 4:8] & 15) << 4)
        raw[:, 4:16] = s
    elif qt == "Q6_K":  # d*sc*(q-32): q-32 uniform std ~ 18.5
        raw[:, 192:208] = rng.integers(20, 100, size=(n, 16)).astype(np.int8).view(np.uint8)
        raw[:, 208:210] = f16(np.full(n, std / 18.5 / 60))
    return raw.reshape(rows, -1)


def cmd_model(a):
    rng = np.random.default_rng(a.seed)
    H, I, V, L, Nh, Nkv, D = 256, 512, 512, 2, 4, 2, 64
    w = gguf.GGUFWriter(a.out, a.arch)
    w.add_block_count(L)
    w.add_context_length(4096)
    w.add_embedding_length(H)
    w.add_feed_forward_length(I)
    w.add_head_count(Nh)
    w.add_head_count_kv(Nkv)
    w.add_rope_freq_base(1e6 if a.arch == "qwen2" else 10000.0)
    w.add_layer_norm_rms_eps(1e-5 if a.arch == "llama" else 1e-6)
    if a.arch == "gemma":
        w.add_key_length(D)
        w.add_value_length(D)
    w.add_vocab_size(V)
    w.add_string("tokenizer.chat_template", "  {{ messages }}\n")

    def add(name, qt, arr=None, rows=0, cols=0, std=0.0, n_head=0):
        if arr is None:
            raw = quant_rows(qt, rows, cols, std, rng)
            if n_head:  # permute whole rows of blocks, as llama.cpp does before quantizing
                raw = permute(raw, n_head)
            w.add_tensor(name, raw, raw_dtype=Q[qt])
            return
        if n_head:
            arr = permute(arr, n_head)
        w.add_tensor(name, arr.astype(np.float16) if qt == "F16" else arr.astype(np.float32))

    llama = a.arch == "llama"
    # With tied embeddings the residual stream must move well away from the
    # input token's embedding, or the model just repeats its input; Gemma
    # scales the embeddings by sqrt(H) = 16.
    out_std = {"llama": 1 / 16, "qwen2": 1, "gemma": 16}[a.arch]
    add("token_embd.weight", "Q6_K", rows=V, cols=H, std=1.0)
    for i in range(L):
        p = "blk.%d." % i
        add(p + "attn_norm.weight", "F32", 1 + 0.1 * rng.standard_normal(H))
        add(p + "ffn_norm.weight", "F32", 1 + 0.1 * rng.standard_normal(H))
        add(p + "attn_q.weight", "Q4_K", rows=Nh * D, cols=H, std=3 / 16, n_head=Nh if llama else 0)
        add(p + "attn_k.weight", "Q4_0", rows=Nkv * D, cols=H, std=3 / 16, n_head=Nkv if llama else 0)
        add(p + "attn_v.weight", "Q8_0", rows=Nkv * D, cols=H, std=1 / 16)
        add(p + "attn_output.weight", "Q4_1", rows=H, cols=Nh * D, std=out_std)
        add(p + "ffn_gate.weight", "Q6_K", rows=I, cols=H, std=1 / 16)
        add(p + "ffn_up.weight", "F16", rng.standard_normal((I, H)) / 16)
        add(p + "ffn_down.weight", "Q4_K", rows=H, cols=I, std=out_std)
        if a.arch == "qwen2":
            add(p + "attn_q.bias", "F32", 0.5 * rng.standard_normal(Nh * D))
            add(p + "attn_k.bias", "F32", 0.5 * rng.standard_normal(Nkv * D))
            add(p + "attn_v.bias", "F32", 0.5 * rng.standard_normal(Nkv * D))
    add("output_norm.weight", "F32", 1 + 0.1 * rng.standard_normal(H))
    if llama:
        add("output.weight", "Q8_0", rows=V, cols=H, std=1 / 16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    np.seterr(all="ignore")  # inf and nan scales are part of the test data
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("blocks")
    b.add_argument("out")
    b.add_argument("--seed", type=int, default=1)
    r = sub.add_parser("real")
    r.add_argument("file")
    r.add_argument("out")
    r.add_argument("--rows", type=int, default=16)
    r.add_argument("names", nargs="+")
    m = sub.add_parser("model")
    m.add_argument("out")
    m.add_argument("--arch", choices=["llama", "qwen2", "gemma"], required=True)
    m.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    {"blocks": cmd_blocks, "real": cmd_real, "model": cmd_model}[a.cmd](a)


if __name__ == "__main__":
    main()
