#!/usr/bin/env python3
"""Writes a safetensors checkpoint folder (ovrun synth) as one GGUF file.

A bench tool for scripts/bench-vs-genai.sh, not part of the Go binaries:
OpenVINO GenAI's LLMPipeline reads GGUF files directly (it builds its own
stateful model and its tokenizer from the file) but needs an OpenVINO IR
folder for safetensors, so the synthetic checkpoints reach it as GGUF.

Usage (with the repository's .venv, which has numpy and gguf):

    .venv/bin/python scripts/synth_to_gguf.py DIR OUT.gguf [--dtype keep|f32|f16|bf16|q8_0|q4_0]

DIR holds config.json and model.safetensors (ovrun synth --out DIR writes
them); llama, qwen2 and gemma model types are supported (the families of
model/family_*.go).

GenAI 2026.3 builds F16, Q8_0, Q4_0, Q4_1, Q4_K and Q6_K matrices only: an
F32 or BF16 matrix fails in its building_blocks.cpp make_weights_subgraph
with "Unsupported quantization type" (tried). So for GenAI use --dtype f16,
and let ovrun run the same file.

What is exact:
  * tensor values: by default (--dtype keep) every matrix keeps the
    checkpoint's own type (F32, F16 or BF16) and its bytes; 1-D tensors
    (norm weights, biases) are stored as F32, as llama.cpp's converter does,
    which widens F16/BF16 values exactly. --dtype f32 widens everything
    exactly; --dtype q8_0 or q4_0 quantizes every matrix with gguf-py's
    reference quantizer (llama.cpp's blocks of 32: what a user's GGUF of
    a 0.5B model most often holds; 1-D tensors stay exact F32);
    --dtype f16 or bf16 rounds every value, 1-D ones included, to
    nearest even (then widens the 1-D ones): not exact, but f32 -> f16 is
    the rounding ovrun synth --dtype f16 applies, so the F16 file of an F32
    folder holds exactly the values of the F16 folder of the same preset and
    seed; bf16 -> f16 is exact except for magnitudes below 2^-14 * 2^-3
    (f16 subnormals) or above 65504. The tool prints how many values changed.
  * names and layout: Hugging Face names become llama.cpp's (token_embd,
    blk.N.attn_q, ...); shapes are written in GGUF's reversed order; for
    llama the q and k rows (weights and biases) get llama.cpp's
    convert_hf_to_gguf permutation (rotate-half pairs -> interleaved pairs),
    which ovrun's reader (model/gguf_load.go ggufUnpermute) and
    model/testdata/reference.py (gguf_unpermute) undo; qwen2 and gemma are
    not permuted, as in llama.cpp. A tied lm_head is simply absent
    (output.weight). For gemma every norm weight w is stored as 1 + w, added
    in float32 before any --dtype rounding, as llama.cpp's converter does
    (GemmaRMSNorm multiplies by 1 + w; llama.cpp, and ovrun on a GGUF file,
    by the stored value): this rounds, so the gemma GGUF of an F32 folder is
    not exactly the folder's model, and the tests compare it with the
    reference reading the same file.
  * configuration: {arch}.embedding_length, block_count, feed_forward_length,
    attention.head_count(_kv), attention.layer_norm_rms_epsilon,
    rope.freq_base, context_length, vocab_size; key/value_length when
    head_dim differs from hidden/heads (always for gemma, as llama.cpp writes
    them); the bos id when config.json has one.
    The eos id is config.json's, or the last id when it has none (the
    synthetic-only presets): GenAI refuses a file without one. ovrun then
    reads an eos id the folder lacks, which changes nothing for token prompts
    (ovrun generate --prompt-ids never stops early).

What is not:
  * the tokenizer. Synthetic checkpoints have none, but GenAI builds one
    from the file and needs a byte-level BPE ("gpt2") vocabulary with
    merges. The file gets a made-up vocabulary of vocab_size tokens: the
    256 byte tokens, then "t0", "t1", ... (ten merges "t 0" .. "t 9"), and
    "<|endoftext|>" as a control token at the eos id (or the last id).
    It exists so that both tools accept the file; prompts must be given as
    token ids, and decoded text means nothing. Gemma's files carry a
    SentencePiece ("llama") tokenizer, so a gemma file gets a made-up one of
    those instead (spm_vocab): Gemma's <pad> <eos> <bos> <unk> at ids 0-3,
    <start_of_turn> and <end_of_turn> as control tokens, the 256 byte
    tokens <0x00>..<0xFF>, then pieces "▁", "a".."z", "t0", "t1", ... with
    falling scores; bos added, no space prefix, as in Gemma's files.
  * tokenizer.chat_template is ChatML (CHATML below), written so that chat
    servers accept the file and render the same prompt text; for gemma it
    is Gemma's turn format (GEMMA, the same text as model.GemmaChatTemplate).
  * general.file_type says the dominant matrix type (0 F32, 1 F16, 32 BF16).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import gguf
import gguf.quants

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# model.GemmaChatTemplate (model/family_gemma.go), character for character.
GEMMA = ("{{ bos_token }}{% for message in messages %}"
         "{% if message['role'] == 'system' %}{{ '<start_of_turn>user\\n' + message['content'] | trim }}"
         "{% if loop.index0 == 0 and not loop.last and messages[1]['role'] == 'user' %}{{ '\\n\\n' }}{% else %}{{ '<end_of_turn>\\n' }}{% endif %}"
         "{% elif message['role'] == 'user' and loop.index0 == 1 and messages[0]['role'] == 'system' %}{{ message['content'] | trim + '<end_of_turn>\\n' }}"
         "{% else %}{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
         "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endif %}{% endfor %}"
         "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}")
ARCHS = ("llama", "qwen2", "gemma")

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}
# llama.cpp's LLAMA_FTYPE_ALL_F32, MOSTLY_F16, MOSTLY_Q4_0, MOSTLY_Q8_0, MOSTLY_BF16
FILE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "bf16": 32}
QUANTS = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}
GLOBAL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.o_proj.bias": "attn_output.bias",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.gate_proj.bias": "ffn_gate.bias",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.up_proj.bias": "ffn_up.bias",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.down_proj.bias": "ffn_down.bias",
}


def read_safetensors(path):
    """{name: (safetensors dtype, ndarray)}; BF16 comes back as raw uint16."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in ST_DTYPES:
            sys.exit(f"{path}: tensor {name} has dtype {info['dtype']} (supported: F32, F16, BF16)")
        lo, hi = info["data_offsets"]
        a = data[lo:hi].view(ST_DTYPES[info["dtype"]]).reshape(info["shape"])
        out[name] = (info["dtype"], a)
    return out


def to_f32(st_dtype, a):
    if st_dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def to_bf16(x):
    """float32 -> bf16 bits, rounded to nearest even (NaN kept quiet)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), r)


def convert(st_dtype, a, want):
    """(ndarray, GGML type or None) of a in the wanted type ('keep', 'f32', 'f16', 'bf16')."""
    if want == "keep":
        want = st_dtype.lower()
    if want == st_dtype.lower():
        a = np.ascontiguousarray(a)
    elif want == "f32":
        a = to_f32(st_dtype, a)
    elif want == "f16":
        a = to_f32(st_dtype, a).astype(np.float16)
    else:
        a = to_bf16(to_f32(st_dtype, a))
    return a, (gguf.GGMLQuantizationType.BF16 if want == "bf16" else None)


def permute(w, heads):
    """llama.cpp's q/k row permutation: per head, HF row half*D/2 + j goes to 2*j + half."""
    d = w.shape[0] // heads
    return np.ascontiguousarray(w.reshape(heads, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def gguf_name(hf):
    if hf in GLOBAL_NAMES:
        return GLOBAL_NAMES[hf]
    parts = hf.split(".", 3)
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in LAYER_NAMES:
        return f"blk.{int(parts[2])}.{LAYER_NAMES[parts[3]]}"
    return None


def synthetic_vocab(n, eos):
    """The made-up byte-level BPE vocabulary (see the module docstring)."""
    byte_chars = [chr(c) for c in _bytes_to_unicode()]
    if n < 256 + 11:
        sys.exit(f"vocab_size {n} is too small for the synthetic tokenizer (at least 267)")
    tokens = byte_chars + [f"t{k}" for k in range(n - 256)]
    types = [gguf.TokenType.NORMAL] * n
    tokens[eos] = "<|endoftext|>"
    types[eos] = gguf.TokenType.CONTROL
    merges = [f"t {d}" for d in range(10)]
    return tokens, types, merges


def spm_vocab(n):
    """The made-up SentencePiece vocabulary of a gemma file (see the module
    docstring): (tokens, scores, types)."""
    T = gguf.TokenType
    head = [("<pad>", T.CONTROL), ("<eos>", T.CONTROL), ("<bos>", T.CONTROL), ("<unk>", T.UNKNOWN),
            ("<start_of_turn>", T.CONTROL), ("<end_of_turn>", T.CONTROL)]
    head += [("<0x%02X>" % b, T.BYTE) for b in range(256)]
    pieces = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    if n < len(head) + len(pieces):
        sys.exit(f"vocab_size {n} is too small for the synthetic SentencePiece tokenizer (at least {len(head) + len(pieces)})")
    pieces += [f"t{k}" for k in range(n - len(head) - len(pieces))]
    tokens = [t for t, _ in head] + pieces
    types = [ty for _, ty in head] + [T.NORMAL] * len(pieces)
    scores = [0.0] * len(head) + [-float(k) for k in range(len(pieces))]
    return tokens, scores, types


def _bytes_to_unicode():
    """GPT-2's byte -> printable code point table, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    extra, table = 0, []
    for b in range(256):
        if b in keep:
            table.append(b)
        else:
            table.append(256 + extra)
            extra += 1
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="checkpoint folder: config.json, model.safetensors")
    ap.add_argument("out", help="the .gguf file to write")
    ap.add_argument("--dtype", choices=["keep", "f32", "f16", "bf16", "q8_0", "q4_0"], default="keep",
                    help="type of the matrices (keep: the checkpoint's; 1-D tensors are always F32)")
    a = ap.parse_args()

    cfg = json.load(open(os.path.join(a.dir, "config.json")))
    arch = cfg["model_type"]
    if arch not in ARCHS:
        sys.exit(f"model_type {arch!r}: only {', '.join(ARCHS)} are supported")
    gemma = arch == "gemma"
    tensors = read_safetensors(os.path.join(a.dir, "model.safetensors"))
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or (256 if gemma else hidden // heads)  # GemmaConfig's default
    vocab = cfg["vocab_size"]

    w = gguf.GGUFWriter(a.out + ".tmp", arch)
    w.add_name(os.path.basename(os.path.normpath(a.dir)))
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg.get("max_position_embeddings", 4096))
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_vocab_size(vocab)
    if head_dim != hidden // heads or gemma:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if arch == "llama":
        w.add_rope_dimension_count(head_dim)

    eos = cfg.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos
    bos = cfg.get("bos_token_id")
    if gemma:
        if (bos, eos) not in ((2, 1), (None, None)):
            sys.exit(f"gemma: bos/eos ids {bos}/{eos}: the synthetic tokenizer has Gemma's, 2/1")
        tokens, scores, types = spm_vocab(vocab)
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_pad_token_id(0)
        w.add_eos_token_id(1)
        w.add_bos_token_id(2)
        w.add_unk_token_id(3)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
        w.add_add_space_prefix(False)
        w.add_chat_template(GEMMA)
    else:
        tokens, types, merges = synthetic_vocab(vocab, eos if eos is not None else vocab - 1)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2" if arch == "qwen2" else "default")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        # GenAI refuses a file without an eos id (its stop_token_ids get -1).
        w.add_eos_token_id(eos if eos is not None else vocab - 1)
        if bos is not None:
            w.add_bos_token_id(bos)
            w.add_add_bos_token(False)
        # A ChatML template, so that servers (ovrun serve, llama-server --jinja,
        # GenAI's chat pipelines, which refuse a file without one) render chat
        # requests alike; its markers are plain text in the made-up vocabulary.
        w.add_chat_template(CHATML)

    kinds, changed, total = {}, 0, 0
    for hf in sorted(tensors, key=lambda s: (s.count("."), s)):
        st_dtype, t = tensors[hf]
        name = gguf_name(hf)
        if name is None:
            sys.exit(f"tensor {hf}: no GGUF name for it")
        if arch == "llama" and ".attn_q." in name:
            t = permute(t, heads)
        elif arch == "llama" and ".attn_k." in name:
            t = permute(t, kv_heads)
        if gemma and name.endswith("norm.weight"):
            # convert_hf_to_gguf.py's GemmaModel: data_torch + 1, stored F32.
            st_dtype, t = "F32", to_f32(st_dtype, t) + np.float32(1)
        if a.dtype in QUANTS:
            x = to_f32(st_dtype, t)
            if t.ndim > 1:
                q = gguf.quants.quantize(x, QUANTS[a.dtype])
                back = gguf.quants.dequantize(q, QUANTS[a.dtype]).reshape(x.shape)
                changed += int(np.count_nonzero(back != x))
                kinds[a.dtype] = kinds.get(a.dtype, 0) + x.size
                w.add_tensor(name, q, raw_dtype=QUANTS[a.dtype])
            else:
                w.add_tensor(name, x)
            total += t.size
            continue
        arr, raw = convert(st_dtype, t, a.dtype)
        if t.ndim == 1:  # rounded to --dtype like the rest, stored as F32 like llama.cpp
            arr, raw = to_f32("BF16" if raw is not None else "", arr), None
        back = to_f32("BF16", arr) if raw is not None else arr.astype(np.float32)
        changed += int(np.count_nonzero(back.reshape(t.shape) != to_f32(st_dtype, t)))
        total += t.size
        if t.ndim > 1:
            kind = "bf16" if raw is not None else {np.float32: "f32", np.float16: "f16"}[arr.dtype.type]
            kinds[kind] = kinds.get(kind, 0) + arr.size
        w.add_tensor(name, arr, raw_dtype=raw)
    w.add_file_type(FILE_TYPES[max(kinds, key=kinds.get)])

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(a.out + ".tmp", a.out)
    print(f"wrote {a.out} ({arch}, {len(tensors)} tensors, matrices {', '.join(sorted(kinds))}; "
          f"{changed} of {total} values changed by the conversion)")


if __name__ == "__main__":
    main()
