#!/usr/bin/env python3
"""Independent float64 reference forward pass for Hugging Face Llama / Qwen2 /
Gemma decoder checkpoints, written with numpy only.

It shares nothing with the Go code of this repository: it parses config.json
and safetensors files itself and follows the Hugging Face `transformers`
modeling code (modeling_llama.py / modeling_qwen2.py / modeling_gemma.py)
directly, with every weight and every intermediate value in float64. Gemma
(v1) differs from Llama in four places, each marked "Gemma" below:
GemmaRMSNorm multiplies by (1 + w), the embeddings are multiplied by
sqrt(hidden_size), the MLP's activation is GELU's tanh approximation
(hidden_activation, default gelu_pytorch_tanh; hidden_act is ignored as
GemmaMLP of transformers 4.38-4.46 does), and GemmaConfig's defaults tie
the embeddings and set head_dim 256.

Usage:
    reference.py --model DIR|FILE.gguf (--ids 1,2,3 | --ids-file F) --steps N \
                 --out LOGITS.npy [--tokens-out TOKENS.json] [--force 5,6,7]
                 [--round-zero-points]
    reference.py --selftest

Greedy run: the prompt ids are processed (in one chunk, filling a KV cache)
and the logits of the last prompt position become row 0. Then for i = 1..N the
token fed is the argmax of row i-1, or the i-th token of --force when given
(teacher forcing; when --force lists fewer than N tokens the remaining steps
fall back to argmax), and its logits become row i. LOGITS.npy holds a float32
array of shape [1+N, vocab]. TOKENS.json holds
    {"tokens": [the N tokens fed after the prompt],
     "argmax": [argmax of each of the 1+N rows]}.

--model may name a GGUF file (llama, qwen2 or gemma): the `gguf` package
(llama.cpp's gguf-py) reads it and gguf.quants.dequantize decodes every
tensor exactly to float32; the weights are then widened to float64, renamed
to Hugging Face names, for llama the q/k rows llama.cpp's converter
permuted are put back, and for gemma the 1 the converter added to every
norm weight is taken off again (exact in float64; see load_gguf). With --round-zero-points, Q4_1
and Q4_K blocks are decoded as OpenVINO GenAI's GGUF reader (and ovrun
--weights rounded) store them: w = d * (q - z) with the block minimum's
zero point z = -m/d (Q4_1) or dm/d (Q4_K sub-blocks) rounded half away
from zero to an integer and clamped to 0..255 (dequantize_rounded).

--ids-file accepts a JSON list of ints, or ints separated by commas and/or
whitespace.

--selftest builds small random models in a temporary directory (written as
real safetensors files, in F32 / F16 / BF16, single-file and sharded), and
checks that
  * the safetensors reader returns exactly what was written;
  * incremental decoding with the KV cache equals a full recompute of the whole
    sequence without cache at every step (max abs diff < 1e-9), for plain
    multi-head, grouped-query and multi-query attention, with and without an
    explicit head_dim that differs from hidden/heads, with biases and tied
    embeddings;
  * the vectorised forward equals a deliberately naive per-head / per-position
    loop implementation of the same formulas (guards the GQA head mapping and
    the rotary layout);
  * the command-line path writes the documented files.
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np


# ---------------------------------------------------------------------------
# safetensors reader
# ---------------------------------------------------------------------------

def _decode_tensor(raw, dtype, shape):
    """Decode little-endian raw bytes of one tensor into a float64 array."""
    if dtype == "F64":
        arr = np.frombuffer(raw, dtype="<f8")
    elif dtype == "F32":
        arr = np.frombuffer(raw, dtype="<f4")
    elif dtype == "F16":
        arr = np.frombuffer(raw, dtype="<f2")
    elif dtype == "BF16":
        # bfloat16 is the upper half of a float32: shift the 16 bits into the
        # high half of a uint32 and reinterpret the result as float32.
        u16 = np.frombuffer(raw, dtype="<u2")
        arr = (u16.astype(np.uint32) << np.uint32(16)).view(np.float32)
    else:
        raise ValueError("unsupported safetensors dtype %r" % dtype)
    return arr.astype(np.float64).reshape(shape)


def read_safetensors(path, wanted=None):
    """Return {name: float64 ndarray} for the tensors in one .safetensors file.

    Layout: 8-byte little-endian header length n, n bytes of JSON header, then
    the data section; each header entry gives dtype, shape and data_offsets
    [begin, end) relative to the start of the data section.
    If `wanted` is a set, only those names are decoded.
    """
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
        data_start = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            if wanted is not None and name not in wanted:
                continue
            begin, end = info["data_offsets"]
            f.seek(data_start + begin)
            raw = f.read(end - begin)
            if len(raw) != end - begin:
                raise ValueError("%s: tensor %s truncated" % (path, name))
            out[name] = _decode_tensor(raw, info["dtype"], info["shape"])
    return out


def load_weights(model_dir):
    """Load every tensor of a checkpoint directory as float64.

    Uses model.safetensors, or the shards listed in
    model.safetensors.index.json ("weight_map": name -> shard file).
    """
    index = os.path.join(model_dir, "model.safetensors.index.json")
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        shards = {}
        for name, shard in weight_map.items():
            shards.setdefault(shard, set()).add(name)
        weights = {}
        for shard, names in sorted(shards.items()):
            got = read_safetensors(os.path.join(model_dir, shard), names)
            missing = names - set(got)
            if missing:
                raise ValueError("shard %s lacks %s" % (shard, sorted(missing)))
            weights.update(got)
        return weights
    if os.path.exists(single):
        return read_safetensors(single)
    raise FileNotFoundError("no model.safetensors(.index.json) in %s" % model_dir)


# ---------------------------------------------------------------------------
# GGUF reader (through the gguf package)
# ---------------------------------------------------------------------------

GGUF_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight",
               "output_norm.weight": "model.norm.weight",
               "output.weight": "lm_head.weight"}
GGUF_LAYER = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
              "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
              "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
              "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def gguf_unpermute(w, n_head):
    """Undo llama.cpp's convert_hf_to_gguf permute() of q/k rows:
    permute(w) = w.reshape(n_head, 2, D/2, ...).swapaxes(1, 2).reshape(w.shape)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def dequantize_rounded(data, qtype):
    """Q4_1 / Q4_K blocks decoded with integer zero points (see the module
    docstring); None for any other type. d, m and the zero point are
    float32 as in the packing; a block with d = 0 holds its minimum exactly."""
    import gguf

    name = qtype.name
    if name not in ("Q4_1", "Q4_K"):
        return None
    blocks = np.asarray(data, dtype=np.uint8).reshape(-1, {"Q4_1": 20, "Q4_K": 144}[name])
    f16 = lambda b: b.copy().view(np.float16).astype(np.float32)  # noqa: E731
    if name == "Q4_1":
        d, m = f16(blocks[:, 0:2]), f16(blocks[:, 2:4])      # [n, 1]
        qs = blocks[:, 4:]
        q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.float32)  # [n, 32]
        zp = -m / np.where(d == 0, 1, d)
        off = m                                              # value where d = 0
    else:
        d0, dmin = f16(blocks[:, 0:2]), f16(blocks[:, 2:4])
        sc, mn = gguf.quants.Q4_K.get_scale_min(blocks[:, 4:16])
        d = (d0 * sc.astype(np.float32)).reshape(-1, 8, 1)
        dm = (dmin * mn.astype(np.float32)).reshape(-1, 8, 1)
        qs = blocks[:, 16:].reshape(-1, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
        q = (qs & 15).reshape(-1, 8, 32).astype(np.float32)
        zp = dm / np.where(d == 0, 1, d)
        off = -dm
    z = np.clip(np.floor(zp.astype(np.float64) + 0.5), 0, 255).astype(np.float32)
    w = np.where(d == 0, off, d * (q - z))
    return w.reshape(-1)


def load_gguf(path, round_zero_points=False):
    """(config dict, {HF name: float64 array}) of a llama / qwen2 / gemma GGUF file."""
    import gguf  # only GGUF runs need the package

    r = gguf.GGUFReader(path)

    def field(key, default=None):
        f = r.fields.get(key)
        return default if f is None else f.contents()

    arch = field("general.architecture")
    names = {t.name for t in r.tensors}
    heads = int(field(arch + ".attention.head_count"))
    d = dict(model_type=arch,
             hidden_size=int(field(arch + ".embedding_length")),
             intermediate_size=int(field(arch + ".feed_forward_length")),
             num_hidden_layers=int(field(arch + ".block_count")),
             num_attention_heads=heads,
             num_key_value_heads=int(field(arch + ".attention.head_count_kv", heads)),
             rms_norm_eps=float(field(arch + ".attention.layer_norm_rms_epsilon")),
             rope_theta=float(field(arch + ".rope.freq_base", 10000.0)),
             tie_word_embeddings="output.weight" not in names,
             attention_bias="blk.0.attn_q.bias" in names)
    if arch == "gemma":
        d["hidden_activation"] = "gelu_pytorch_tanh"  # what llama.cpp runs
    vocab = field(arch + ".vocab_size")
    d["vocab_size"] = int(vocab) if vocab is not None else len(field("tokenizer.ggml.tokens"))
    key_length = field(arch + ".attention.key_length")
    if key_length is not None:
        d["head_dim"] = int(key_length)
    weights = {}
    for t in r.tensors:
        if t.name in GGUF_GLOBAL:
            name = GGUF_GLOBAL[t.name]
        else:
            parts = t.name.split(".")  # blk.N.attn_q.weight
            if parts[0] != "blk" or parts[2] not in GGUF_LAYER:
                continue
            name = "model.layers.%s.%s.%s" % (parts[1], GGUF_LAYER[parts[2]], parts[3])
        # dequantize() returns float32 in numpy order: a GGUF [ne0, ne1]
        # tensor comes back as ne1 rows of ne0.
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        if round_zero_points:
            r = dequantize_rounded(t.data, t.tensor_type)
            if r is not None:
                w = r.astype(np.float64).reshape(w.shape)
        if arch == "llama" and ".q_proj." in name:
            w = gguf_unpermute(w, heads)
        elif arch == "llama" and ".k_proj." in name:
            w = gguf_unpermute(w, d["num_key_value_heads"])
        if arch == "gemma" and name.endswith("norm.weight"):
            # convert_hf_to_gguf.py's GemmaModel stores norm weights + 1.
            w = w - 1.0
        weights[name] = w
    return d, weights


# ---------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------

class Config:
    """The config.json fields the Llama / Qwen2 / Gemma decoders use, with HF defaults."""

    def __init__(self, d):
        self.model_type = d.get("model_type")
        if self.model_type not in ("llama", "qwen2", "gemma"):
            raise ValueError("unsupported model_type %r" % self.model_type)
        gemma = self.model_type == "gemma"
        self.vocab_size = int(d["vocab_size"])
        self.hidden_size = int(d["hidden_size"])
        self.intermediate_size = int(d["intermediate_size"])
        self.num_layers = int(d["num_hidden_layers"])
        self.num_heads = int(d["num_attention_heads"])
        nkv = d.get("num_key_value_heads")
        self.num_kv_heads = int(nkv) if nkv else self.num_heads
        # GemmaConfig's head_dim defaults to 256, the others' to hidden/heads.
        hd = d.get("head_dim", 256 if gemma else None)
        self.head_dim = int(hd) if hd else self.hidden_size // self.num_heads
        self.rms_norm_eps = float(d.get("rms_norm_eps", 1e-6))
        self.rope_theta = float(d.get("rope_theta", 10000.0))
        self.rope_scaling = d.get("rope_scaling")
        # LlamaConfig and Qwen2Config default tie_word_embeddings=False,
        # GemmaConfig True.
        self.tie_word_embeddings = bool(d.get("tie_word_embeddings", gemma))
        # Gemma: GemmaRMSNorm scales by (1 + w), GemmaModel multiplies the
        # embeddings by sqrt(hidden_size).
        self.norm_offset = 1.0 if gemma else 0.0
        self.embed_scale = math.sqrt(self.hidden_size) if gemma else 1.0
        if gemma:
            # GemmaAttention: attention_bias on q, k, v and o; GemmaMLP: none.
            self.qkv_bias = bool(d.get("attention_bias", False))
            self.o_bias = self.qkv_bias
            self.mlp_bias = False
        elif self.model_type == "qwen2":
            # Qwen2 always has q/k/v biases and no o_proj bias.
            self.qkv_bias = True
            self.o_bias = False
            self.mlp_bias = False
        else:
            # Llama: attention_bias adds biases to q, k, v and o projections;
            # mlp_bias to gate, up and down.
            self.qkv_bias = bool(d.get("attention_bias", False))
            self.o_bias = self.qkv_bias
            self.mlp_bias = bool(d.get("mlp_bias", False))
        if gemma:
            # GemmaMLP: hidden_activation, or gelu_pytorch_tanh when absent.
            act = d.get("hidden_activation") or "gelu_pytorch_tanh"
            if act != "gelu_pytorch_tanh":
                raise ValueError("unsupported hidden_activation %r" % act)
        else:
            act = d.get("hidden_act", "silu")
            if act != "silu":
                raise ValueError("unsupported hidden_act %r" % act)
        self.act = act
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_attention_heads not a multiple of num_key_value_heads")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even for rotary embeddings")

    @classmethod
    def load(cls, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            return cls(json.load(f))


def rope_inv_freq(cfg):
    """Rotary inverse frequencies, HF style: 1 / theta^(arange(0, D, 2) / D).

    Supports no scaling ("default"), "linear" and "llama3" rope_scaling.
    """
    D = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (np.arange(0, D, 2, dtype=np.float64) / D))
    rs = cfg.rope_scaling
    if not rs:
        return inv_freq
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / float(rs["factor"])
    if kind == "llama3":
        # transformers.modeling_rope_utils._compute_llama3_parameters
        factor = float(rs["factor"])
        low = float(rs["low_freq_factor"])
        high = float(rs["high_freq_factor"])
        old_ctx = float(rs["original_max_position_embeddings"])
        low_wavelen = old_ctx / low
        high_wavelen = old_ctx / high
        wavelen = 2 * math.pi / inv_freq
        out = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return np.where(medium, smoothed, out)
    raise ValueError("unsupported rope_scaling type %r" % kind)


# ---------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------

def rms_norm(x, w, eps):
    """x * 1/sqrt(mean(x^2) + eps) * w over the last axis, in float64."""
    return x * (1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    """torch.nn.functional.gelu(x, approximate="tanh") (gelu_pytorch_tanh)."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


ACTIVATIONS = {"silu": silu, "gelu_pytorch_tanh": gelu_tanh}


def rotate_half(x):
    """concat(-x2, x1) where x1, x2 are the two halves of the last axis."""
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


class Model:
    def __init__(self, cfg, weights):
        self.cfg = cfg
        self.inv_freq = rope_inv_freq(cfg)
        self.act = ACTIVATIONS[cfg.act]
        W = weights

        def get(name, shape):
            if name not in W:
                raise KeyError("checkpoint lacks tensor %s" % name)
            t = W[name]
            if tuple(t.shape) != tuple(shape):
                raise ValueError("%s has shape %s, want %s" % (name, t.shape, shape))
            return t

        def opt_bias(name, n, required):
            if name in W:
                return get(name, (n,))
            if required:
                raise KeyError("checkpoint lacks tensor %s" % name)
            return None

        H, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
        D, Nh, Nkv = cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
        self.embed = get("model.embed_tokens.weight", (V, H))
        self.layers = []
        for i in range(cfg.num_layers):
            p = "model.layers.%d." % i
            L = {
                "in_norm": get(p + "input_layernorm.weight", (H,)),
                "post_norm": get(p + "post_attention_layernorm.weight", (H,)),
                "q": get(p + "self_attn.q_proj.weight", (Nh * D, H)),
                "k": get(p + "self_attn.k_proj.weight", (Nkv * D, H)),
                "v": get(p + "self_attn.v_proj.weight", (Nkv * D, H)),
                "o": get(p + "self_attn.o_proj.weight", (H, Nh * D)),
                "gate": get(p + "mlp.gate_proj.weight", (I, H)),
                "up": get(p + "mlp.up_proj.weight", (I, H)),
                "down": get(p + "mlp.down_proj.weight", (H, I)),
                "q_b": None, "k_b": None, "v_b": None, "o_b": None,
                "gate_b": None, "up_b": None, "down_b": None,
            }
            if cfg.qkv_bias:
                L["q_b"] = opt_bias(p + "self_attn.q_proj.bias", Nh * D, True)
                L["k_b"] = opt_bias(p + "self_attn.k_proj.bias", Nkv * D, True)
                L["v_b"] = opt_bias(p + "self_attn.v_proj.bias", Nkv * D, True)
            if cfg.o_bias:
                L["o_b"] = opt_bias(p + "self_attn.o_proj.bias", H, True)
            if cfg.mlp_bias:
                L["gate_b"] = opt_bias(p + "mlp.gate_proj.bias", I, True)
                L["up_b"] = opt_bias(p + "mlp.up_proj.bias", I, True)
                L["down_b"] = opt_bias(p + "mlp.down_proj.bias", H, True)
            self.layers.append(L)
        self.final_norm = get("model.norm.weight", (H,))
        if cfg.tie_word_embeddings:
            self.lm_head = self.embed
        else:
            self.lm_head = get("lm_head.weight", (V, H))

    def new_cache(self):
        """Empty KV cache: per layer, keys and values of shape [Nkv, T, D]."""
        D, Nkv = self.cfg.head_dim, self.cfg.num_kv_heads
        return {
            "len": 0,
            "k": [np.zeros((Nkv, 0, D)) for _ in self.layers],
            "v": [np.zeros((Nkv, 0, D)) for _ in self.layers],
        }

    @staticmethod
    def _linear(x, w, b):
        y = x @ w.T
        return y if b is None else y + b

    def forward(self, ids, cache):
        """Run tokens `ids` (at positions cache.len, cache.len+1, ...) through
        the decoder, appending their keys/values to `cache`.

        Returns float64 logits of shape [len(ids), vocab].
        """
        cfg = self.cfg
        D, Nh, Nkv = cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
        group = Nh // Nkv
        S = len(ids)
        start = cache["len"]
        T = start + S  # total keys after this call

        # Rotary tables for the new positions: emb = concat(freqs, freqs).
        pos = np.arange(start, T, dtype=np.float64)
        freqs = np.outer(pos, self.inv_freq)            # [S, D/2]
        emb = np.concatenate([freqs, freqs], axis=-1)   # [S, D]
        cos, sin = np.cos(emb), np.sin(emb)

        # Causal mask: new query i (absolute position start+i) sees keys 0..start+i.
        qpos = np.arange(start, T)[:, None]
        kpos = np.arange(T)[None, :]
        masked = kpos > qpos                            # [S, T]
        scale = 1.0 / math.sqrt(D)

        x = self.embed[np.asarray(ids, dtype=np.int64)] * cfg.embed_scale  # [S, H]
        off = cfg.norm_offset
        for li, L in enumerate(self.layers):
            # --- self attention ---
            h = rms_norm(x, off + L["in_norm"], cfg.rms_norm_eps)
            q = self._linear(h, L["q"], L["q_b"]).reshape(S, Nh, D).transpose(1, 0, 2)
            k = self._linear(h, L["k"], L["k_b"]).reshape(S, Nkv, D).transpose(1, 0, 2)
            v = self._linear(h, L["v"], L["v_b"]).reshape(S, Nkv, D).transpose(1, 0, 2)
            q = q * cos + rotate_half(q) * sin          # [Nh, S, D]
            k = k * cos + rotate_half(k) * sin          # [Nkv, S, D]
            K = np.concatenate([cache["k"][li], k], axis=1)  # [Nkv, T, D]
            Vv = np.concatenate([cache["v"][li], v], axis=1)
            cache["k"][li], cache["v"][li] = K, Vv

            # Grouped-query attention: query head hq uses kv head hq // group.
            kv_of_q = np.arange(Nh) // group
            Kq, Vq = K[kv_of_q], Vv[kv_of_q]            # [Nh, T, D]
            scores = (q @ Kq.transpose(0, 2, 1)) * scale  # [Nh, S, T]
            scores = np.where(masked[None], -np.inf, scores)
            scores = scores - scores.max(axis=-1, keepdims=True)
            p = np.exp(scores)
            p /= p.sum(axis=-1, keepdims=True)
            attn = (p @ Vq).transpose(1, 0, 2).reshape(S, Nh * D)
            x = x + self._linear(attn, L["o"], L["o_b"])

            # --- MLP: down(act(gate(x)) * up(x)) ---
            h = rms_norm(x, off + L["post_norm"], cfg.rms_norm_eps)
            g = self._linear(h, L["gate"], L["gate_b"])
            u = self._linear(h, L["up"], L["up_b"])
            x = x + self._linear(self.act(g) * u, L["down"], L["down_b"])

        cache["len"] = T
        x = rms_norm(x, off + self.final_norm, cfg.rms_norm_eps)
        return x @ self.lm_head.T


def greedy(model, prompt, steps, force=None):
    """Greedy / teacher-forced decoding with the KV cache.

    Returns (logits [1+steps, vocab] float64, tokens fed after the prompt).
    """
    if not prompt:
        raise ValueError("empty prompt")
    force = list(force or [])
    if len(force) > steps:
        raise ValueError("--force lists %d tokens but --steps is %d" % (len(force), steps))
    V = model.cfg.vocab_size
    for t in list(prompt) + force:
        if not 0 <= t < V:
            raise ValueError("token id %d outside vocab [0, %d)" % (t, V))
    cache = model.new_cache()
    rows = [model.forward(prompt, cache)[-1]]
    fed = []
    for i in range(1, steps + 1):
        tok = force[i - 1] if i <= len(force) else int(np.argmax(rows[-1]))
        fed.append(tok)
        rows.append(model.forward([tok], cache)[-1])
    return np.stack(rows), fed


def full_recompute(model, prompt, fed):
    """Same rows as greedy(), but each row recomputes the whole sequence
    from scratch with a fresh cache (no incremental state is reused)."""
    seq = list(prompt)
    rows = [model.forward(seq, model.new_cache())[-1]]
    for tok in fed:
        seq.append(tok)
        rows.append(model.forward(seq, model.new_cache())[-1])
    return np.stack(rows)


# ---------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------

def parse_ids(text):
    text = text.strip()
    if text.startswith("["):
        return [int(t) for t in json.loads(text)]
    return [int(t) for t in text.replace(",", " ").split()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="checkpoint directory or GGUF file")
    ap.add_argument("--ids", help="comma-separated prompt token ids")
    ap.add_argument("--ids-file", help="file with prompt token ids")
    ap.add_argument("--steps", type=int, default=0, help="tokens to decode after the prompt")
    ap.add_argument("--out", help="output .npy, float32 [1+steps, vocab]")
    ap.add_argument("--tokens-out", help="output JSON {tokens, argmax}")
    ap.add_argument("--force", help="comma-separated tokens to feed instead of argmax")
    ap.add_argument("--round-zero-points", action="store_true",
                    help="GGUF: decode Q4_1/Q4_K with rounded integer zero points (GenAI's form)")
    ap.add_argument("--selftest", action="store_true", help="run the self test")
    a = ap.parse_args(argv)

    if a.selftest:
        return selftest()
    if not a.model or not a.out or (a.ids is None) == (a.ids_file is None):
        ap.error("--model, --out and exactly one of --ids / --ids-file are required")
    if a.steps < 0:
        ap.error("--steps must be >= 0")
    if a.ids is not None:
        prompt = parse_ids(a.ids)
    else:
        with open(a.ids_file) as f:
            prompt = parse_ids(f.read())
    force = parse_ids(a.force) if a.force else None

    if os.path.isfile(a.model):
        cfgd, weights = load_gguf(a.model, a.round_zero_points)
        cfg = Config(cfgd)
    else:
        cfg, weights = Config.load(a.model), load_weights(a.model)
    model = Model(cfg, weights)
    logits, fed = greedy(model, prompt, a.steps, force)
    np.save(a.out, logits.astype(np.float32))
    if a.tokens_out:
        with open(a.tokens_out, "w") as f:
            json.dump({"tokens": fed,
                       "argmax": [int(i) for i in np.argmax(logits, axis=-1)]}, f)
    return 0


# ---------------------------------------------------------------------------
# self test
# ---------------------------------------------------------------------------

def _encode_tensor(arr, dtype):
    """float64 array -> (raw little-endian bytes, value the reader must return)."""
    if dtype == "F32":
        a = arr.astype("<f4")
        return a.tobytes(), a.astype(np.float64)
    if dtype == "F16":
        a = arr.astype("<f2")
        return a.tobytes(), a.astype(np.float64)
    if dtype == "BF16":
        # Truncate float32 to its upper 16 bits (round-toward-zero is fine:
        # the test only needs the reader to reproduce what was written).
        u32 = arr.astype("<f4").view("<u4")
        u16 = (u32 >> np.uint32(16)).astype("<u2")
        back = (u16.astype(np.uint32) << np.uint32(16)).view(np.float32)
        return u16.tobytes(), back.astype(np.float64)
    raise ValueError(dtype)


def write_safetensors(path, tensors, dtype):
    """Write {name: float64 array} as safetensors in `dtype`; return the
    float64 values a correct reader must produce."""
    header, blobs, expect, off = {"__metadata__": {"format": "pt"}}, [], {}, 0
    for name in sorted(tensors):
        raw, back = _encode_tensor(tensors[name], dtype)
        header[name] = {"dtype": dtype, "shape": list(tensors[name].shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        expect[name] = back
        off += len(raw)
    hj = json.dumps(header).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)  # pad like the reference writer
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    return expect


def random_checkpoint(cfg_dict, seed):
    """Random float64 tensors for a config (scaled so activations stay O(1))."""
    cfg = Config(cfg_dict)
    rng = np.random.default_rng(seed)
    H, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    D, Nh, Nkv = cfg.head_dim, cfg.num_heads, cfg.num_kv_heads

    def mat(o, i):
        return rng.standard_normal((o, i)) / math.sqrt(i)

    one = 1 - cfg.norm_offset  # norm weights around 1 as the norm applies them
    t = {"model.embed_tokens.weight": rng.standard_normal((V, H)),
         "model.norm.weight": one + 0.1 * rng.standard_normal(H)}
    for i in range(cfg.num_layers):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = one + 0.1 * rng.standard_normal(H)
        t[p + "post_attention_layernorm.weight"] = one + 0.1 * rng.standard_normal(H)
        # Larger q/k so attention is far from uniform and errors show up.
        t[p + "self_attn.q_proj.weight"] = 3 * mat(Nh * D, H)
        t[p + "self_attn.k_proj.weight"] = 3 * mat(Nkv * D, H)
        t[p + "self_attn.v_proj.weight"] = mat(Nkv * D, H)
        t[p + "self_attn.o_proj.weight"] = mat(H, Nh * D)
        t[p + "mlp.gate_proj.weight"] = mat(I, H)
        t[p + "mlp.up_proj.weight"] = mat(I, H)
        t[p + "mlp.down_proj.weight"] = mat(H, I)
        if cfg.qkv_bias:
            t[p + "self_attn.q_proj.bias"] = 0.5 * rng.standard_normal(Nh * D)
            t[p + "self_attn.k_proj.bias"] = 0.5 * rng.standard_normal(Nkv * D)
            t[p + "self_attn.v_proj.bias"] = 0.5 * rng.standard_normal(Nkv * D)
        if cfg.o_bias:
            t[p + "self_attn.o_proj.bias"] = 0.1 * rng.standard_normal(H)
        if cfg.mlp_bias:
            t[p + "mlp.gate_proj.bias"] = 0.1 * rng.standard_normal(I)
            t[p + "mlp.up_proj.bias"] = 0.1 * rng.standard_normal(I)
            t[p + "mlp.down_proj.bias"] = 0.1 * rng.standard_normal(H)
    if not cfg.tie_word_embeddings:
        t["lm_head.weight"] = rng.standard_normal((V, H)) / math.sqrt(H)
    return t


def naive_logits(model, seq):
    """Logits of every position of `seq`, by explicit loops over positions,
    heads and rotary pairs: a literal transcription of the formulas, used to
    cross-check the vectorised forward()."""
    cfg = model.cfg
    D, Nh, Nkv = cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
    half = D // 2

    def rope(vec, m):
        # HF layout: element j pairs with element j + D/2, angle m * inv_freq[j].
        out = np.empty(D)
        for j in range(half):
            c, s = math.cos(m * model.inv_freq[j]), math.sin(m * model.inv_freq[j])
            out[j] = vec[j] * c - vec[j + half] * s
            out[j + half] = vec[j + half] * c + vec[j] * s
        return out

    def lin(x, w, b):
        return w @ x + (0 if b is None else b)

    def norm(x, w):
        return x / math.sqrt(sum(float(e) ** 2 for e in x) / len(x) + cfg.rms_norm_eps) * (cfg.norm_offset + w)

    def act(g):
        if cfg.act == "silu":
            return g / (1 + np.exp(-g))
        return np.array([0.5 * e * (1 + math.tanh(math.sqrt(2 / math.pi) * (e + 0.044715 * e * e * e))) for e in g])

    xs = [model.embed[t] * math.sqrt(cfg.hidden_size) if cfg.model_type == "gemma" else model.embed[t].copy()
          for t in seq]
    for L in model.layers:
        qs, ks, vs = [], [], []
        for m, x in enumerate(xs):
            h = norm(x, L["in_norm"])
            q = lin(h, L["q"], L["q_b"])
            k = lin(h, L["k"], L["k_b"])
            v = lin(h, L["v"], L["v_b"])
            qs.append([rope(q[hq * D:(hq + 1) * D], m) for hq in range(Nh)])
            ks.append([rope(k[hk * D:(hk + 1) * D], m) for hk in range(Nkv)])
            vs.append([v[hk * D:(hk + 1) * D] for hk in range(Nkv)])
        new = []
        for m, x in enumerate(xs):
            heads = []
            for hq in range(Nh):
                hk = hq // (Nh // Nkv)
                sc = [float(qs[m][hq] @ ks[j][hk]) / math.sqrt(D) for j in range(m + 1)]
                mx = max(sc)
                e = [math.exp(s - mx) for s in sc]
                z = sum(e)
                heads.append(sum(e[j] / z * vs[j][hk] for j in range(m + 1)))
            x = x + lin(np.concatenate(heads), L["o"], L["o_b"])
            h = norm(x, L["post_norm"])
            g = lin(h, L["gate"], L["gate_b"])
            u = lin(h, L["up"], L["up_b"])
            x = x + lin(act(g) * u, L["down"], L["down_b"])
            new.append(x)
        xs = new
    return np.stack([model.lm_head @ norm(x, model.final_norm) for x in xs])


SELFTEST_CASES = [
    # name, config overrides, safetensors dtype, sharded
    ("llama-mha", dict(model_type="llama", num_attention_heads=4, num_key_value_heads=4),
     "F32", False),
    ("llama-gqa", dict(model_type="llama", num_attention_heads=4, num_key_value_heads=2),
     "BF16", False),
    ("llama-gqa-headdim-bias-tied",
     dict(model_type="llama", num_attention_heads=4, num_key_value_heads=2, head_dim=24,
          attention_bias=True, mlp_bias=True, tie_word_embeddings=True), "F16", True),
    ("llama3-rope-scaling",
     dict(model_type="llama", num_attention_heads=8, num_key_value_heads=2,
          rope_theta=500000.0,
          rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                            high_freq_factor=4.0, original_max_position_embeddings=8)),
     "F32", False),
    ("qwen2-mqa-headdim", dict(model_type="qwen2", num_attention_heads=4, num_key_value_heads=1,
                               head_dim=32, rope_theta=1000000.0), "BF16", True),
    ("qwen2-gqa-tied", dict(model_type="qwen2", num_attention_heads=4, num_key_value_heads=2,
                            tie_word_embeddings=True), "F32", False),
    # Gemma: tied by default, hidden_act ignored (the base config's silu).
    ("gemma-mqa-headdim-tied", dict(model_type="gemma", num_attention_heads=4, num_key_value_heads=1,
                                    head_dim=32), "F32", False),
    ("gemma-gqa-bias-untied", dict(model_type="gemma", num_attention_heads=4, num_key_value_heads=2,
                                   head_dim=16, attention_bias=True, tie_word_embeddings=False,
                                   hidden_activation="gelu_pytorch_tanh"), "BF16", True),
]


def selftest():
    import subprocess
    import tempfile

    tol = 1e-9
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for ci, (name, over, dtype, sharded) in enumerate(SELFTEST_CASES):
            cfgd = dict(vocab_size=97, hidden_size=64, intermediate_size=96,
                        num_hidden_layers=2, rms_norm_eps=1e-5,
                        max_position_embeddings=128, hidden_act="silu")
            cfgd.update(over)
            d = os.path.join(tmp, name)
            os.makedirs(d)
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cfgd, f)
            tensors = random_checkpoint(cfgd, seed=1000 + ci)
            if sharded:
                names = sorted(tensors)
                parts = [names[: len(names) // 2], names[len(names) // 2:]]
                expect, wmap = {}, {}
                for si, part in enumerate(parts):
                    fn = "model-%05d-of-%05d.safetensors" % (si + 1, len(parts))
                    expect.update(write_safetensors(os.path.join(d, fn),
                                                    {n: tensors[n] for n in part}, dtype))
                    wmap.update({n: fn for n in part})
                with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                    json.dump({"metadata": {}, "weight_map": wmap}, f)
            else:
                expect = write_safetensors(os.path.join(d, "model.safetensors"), tensors, dtype)

            # 1. reader returns exactly what was written.
            w = load_weights(d)
            read_ok = set(w) == set(expect) and all(
                np.array_equal(w[n], expect[n]) for n in expect)

            model = Model(Config.load(d), w)
            prompt = [3, 17, 42, 5, 88]
            steps = 8
            # 2. incremental (KV cache) == full recompute, greedy and forced.
            logits, fed = greedy(model, prompt, steps)
            diff_greedy = np.max(np.abs(logits - full_recompute(model, prompt, fed)))
            force = [7, 7, 60, 1, 0, 96]
            flog, ffed = greedy(model, prompt, steps, force)
            diff_forced = np.max(np.abs(flog - full_recompute(model, prompt, ffed)))
            forced_ok = ffed[: len(force)] == force
            # Prompt fed one token at a time == prompt in one chunk.
            cache = model.new_cache()
            one = np.stack([model.forward([t], cache)[-1] for t in prompt + fed])
            allpos = model.forward(prompt + fed, model.new_cache())
            diff_single = np.max(np.abs(one - allpos))
            # 3. vectorised forward == naive loops.
            diff_naive = np.max(np.abs(allpos - naive_logits(model, prompt + fed)))
            # Sanity: logits are not degenerate (differences would be meaningless).
            spread = float(np.std(logits))

            ok = (read_ok and forced_ok and diff_greedy < tol and diff_forced < tol
                  and diff_single < tol and diff_naive < tol and spread > 0.1)
            failures += not ok
            print("%-30s %-4s %s read=%s  cache-vs-full greedy=%.1e forced=%.1e  "
                  "single-vs-chunk=%.1e  vs-naive=%.1e  std=%.2f  %s"
                  % (name, dtype, "sharded" if sharded else "single ", read_ok,
                     diff_greedy, diff_forced, diff_single, diff_naive, spread,
                     "ok" if ok else "FAIL"))

            # 4. command line writes the documented files (one case is enough).
            if ci == 2:
                out = os.path.join(tmp, "logits.npy")
                tok = os.path.join(tmp, "tokens.json")
                idsf = os.path.join(tmp, "ids.txt")
                with open(idsf, "w") as f:
                    f.write(" ".join(map(str, prompt)) + "\n")
                subprocess.run([sys.executable, os.path.abspath(__file__), "--model", d,
                                "--ids-file", idsf, "--steps", str(steps), "--out", out,
                                "--tokens-out", tok, "--force", ",".join(map(str, force))],
                               check=True)
                arr = np.load(out)
                with open(tok) as f:
                    tj = json.load(f)
                cli_ok = (arr.dtype == np.float32 and arr.shape == (1 + steps, cfgd["vocab_size"])
                          and np.allclose(arr, flog.astype(np.float32), rtol=0, atol=0)
                          and tj["tokens"] == ffed
                          and tj["argmax"] == [int(i) for i in np.argmax(flog, axis=-1)])
                failures += not cli_ok
                print("%-30s command line: shape=%s dtype=%s tokens=%s  %s"
                      % ("cli", arr.shape, arr.dtype, tj["tokens"], "ok" if cli_ok else "FAIL"))

    print("selftest: %s" % ("PASS" if failures == 0 else "%d FAILED" % failures))
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
