#!/usr/bin/env python3
"""OpenVINO GenAI's ContinuousBatchingPipeline under `ovrun loadtest`'s load.

GenAI has no HTTP server, so this process is both server and clients: it
builds a ContinuousBatchingPipeline from the GGUF file (GenAI reads GGUF for
the continuous-batching pipeline too; SchedulerConfig max_num_seqs = the
number of clients unless --max-num-seqs says otherwise, KV cache grown on
demand, prefix caching off as in ovrun serve), then replays what
`ovrun loadtest --clients N --requests R --max-tokens M --seed S` sends:

  * the same user messages (--prompts, a JSON list: bench_serve.py reads
    them from cmd/ovrun/loadtest.go), rendered by the model's own chat
    template with the generation prompt, tokenized without added specials;
  * N clients, each with loadtest's random stream (Go's math/rand/v2
    PCG(seed, client), ported below): per request a prompt index, then a
    max_tokens index, drawn in loadtest's order; greedy decoding;
  * a client sends its next request as soon as its last one finished,
    until R requests were sent.

Requests are added with add_request and driven by a step() loop; a token
counts when its handle can be read after a step. TTFT is from add_request
to the step that gave the first token, TPOT the gaps between the steps
that gave the next ones; both are per request, pooled, with loadtest's
quantile (sorted[int(q * n)]). The end-of-sequence token is not counted
(it is no text a client would see). It is a lower bound on what an HTTP
server around the pipeline would show: no HTTP, no JSON, no detokenizing.

Protocol with bench_serve.py: after loading and one warm-up request per
client it prints "ready" on stdout and waits for a line on stdin (the
caller waits for idle CPUs meanwhile); then it measures, writes --json
and exits. --no-wait starts at once.

The JSON has loadtest's fields (clients, requests, errors, wall_s,
requests_per_s, tokens_per_s, tokens, ttft_p50_s, ttft_p99_s, tpot_p50_s,
tpot_p99_s) and load_s, warmup_s, prompt_tokens (per distinct prompt),
peak_rss_bytes (this process's VmHWM), genai_version, scheduler.
"""
import argparse
import json
import os
import sys
import time

M64 = (1 << 64) - 1
M128 = (1 << 128) - 1


class GoPCG:
    """Go's math/rand/v2 rand.New(rand.NewPCG(seed1, seed2)): Uint64 and IntN."""

    MUL = (2549297995355413924 << 64) | 4865540595714422341
    INC = (6364136223846793005 << 64) | 1442695040888963407

    def __init__(self, seed1, seed2):
        self.s = ((seed1 & M64) << 64) | (seed2 & M64)

    def uint64(self):
        self.s = (self.s * self.MUL + self.INC) & M128
        hi, lo = self.s >> 64, self.s & M64
        hi ^= hi >> 32
        hi = (hi * 0xDA942042E4DD58B5) & M64
        hi ^= hi >> 48
        return (hi * (lo | 1)) & M64

    def intn(self, n):
        if n & (n - 1) == 0:
            return self.uint64() & (n - 1)
        p = self.uint64() * n
        hi, lo = p >> 64, p & M64
        if lo < n:
            thresh = ((1 << 64) - n) % n
            while lo < thresh:
                p = self.uint64() * n
                hi, lo = p >> 64, p & M64
        return hi


def quantile(xs, q):
    """internal/stats.Quantile: sorted(xs)[int(q*n)], clamped; 0 for none."""
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(q * len(s))))]


def vm_hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="the GGUF file")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", default="64", help="max_tokens values drawn per request, as loadtest's flag")
    ap.add_argument("--seed", type=int, default=1, help="loadtest's --seed")
    ap.add_argument("--prompts", required=True, help="JSON list of user messages (loadtest's mix)")
    ap.add_argument("--max-num-seqs", type=int, help="SchedulerConfig.max_num_seqs (default: --clients)")
    ap.add_argument("--max-num-batched-tokens", type=int, help="SchedulerConfig.max_num_batched_tokens (default: GenAI's)")
    ap.add_argument("--cache-size", type=int, default=0, help="KV cache GB (0: grown on demand)")
    ap.add_argument("--prefix-caching", action="store_true", help="turn GenAI's prefix caching on")
    ap.add_argument("--prop", action="append", default=[], help="compile property KEY=VALUE for the CPU plugin")
    ap.add_argument("--no-wait", action="store_true", help="measure right after the warm-up")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()

    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    prompts = json.loads(a.prompts)
    max_tok = [int(x) for x in a.max_tokens.split(",")]

    sc = ov_genai.SchedulerConfig()
    sc.max_num_seqs = a.max_num_seqs or a.clients
    if a.max_num_batched_tokens:
        sc.max_num_batched_tokens = a.max_num_batched_tokens
    sc.cache_size = a.cache_size
    sc.enable_prefix_caching = a.prefix_caching
    props = {}
    for kv in a.prop:
        k, _, v = kv.partition("=")
        props[k] = v
    t0 = time.perf_counter()
    pipe = ov_genai.ContinuousBatchingPipeline(a.model, sc, "CPU", props)
    load_s = time.perf_counter() - t0
    tok = pipe.get_tokenizer()
    eos = tok.get_eos_token_id()

    ids = []
    for p in prompts:
        text = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)
        ids.append(tok.encode(text, add_special_tokens=False).input_ids.data[0].tolist())

    def config(n):
        c = ov_genai.GenerationConfig()
        c.max_new_tokens = n
        c.do_sample = False
        return c

    rid = [0]

    def run(jobs_total, rngs, record):
        """Runs jobs_total requests with len(rngs) clients in flight;
        returns (wall s, tokens, ttfts, gaps, errors, first error)."""
        sent = 0
        live = {}  # request id -> [handle, client, t_submit, t_last, tokens]
        ttft, gaps, tokens, errors, sample = [], [], 0, 0, ""

        def submit(c):
            nonlocal sent
            if sent >= jobs_total:
                return
            sent += 1
            p = rngs[c].intn(len(prompts)) if record else c % len(prompts)
            n = max_tok[rngs[c].intn(len(max_tok))] if record else 4
            rid[0] += 1
            h = pipe.add_request(rid[0], ov.Tensor(np.array([ids[p]], dtype=np.int64)), config(n))
            live[rid[0]] = [h, c, time.perf_counter(), None, 0]

        t_start = time.perf_counter()
        for c in range(len(rngs)):
            submit(c)
        while live:
            pipe.step()
            now = time.perf_counter()
            for r in list(live):
                st = live[r]
                h = st[0]
                if h.can_read():
                    for out in h.read().values():
                        for t in out.generated_ids:
                            if t == eos:
                                continue
                            st[4] += 1
                            if st[3] is None:
                                ttft.append(now - st[2])
                            else:
                                gaps.append(now - st[3])
                            st[3] = now
                status = h.get_status()
                if status == ov_genai.GenerationStatus.RUNNING:
                    continue
                if status != ov_genai.GenerationStatus.FINISHED:
                    errors += 1
                    sample = sample or f"request {r}: {status}"
                tokens += st[4]
                del live[r]
                submit(st[1])
        return time.perf_counter() - t_start, tokens, ttft, gaps, errors, sample

    # Warm-up: one short request per client, so graphs and KV blocks for N
    # sequences exist before measuring (the servers get the same).
    warm = run(a.clients, [None] * a.clients, record=False)
    warmup_s = warm[0]
    if warm[4]:
        sys.exit(f"warm-up failed: {warm[5]}")
    print("ready", flush=True)
    if not a.no_wait:
        sys.stdin.readline()

    rngs = [GoPCG(a.seed, c) for c in range(a.clients)]
    wall, tokens, ttft, gaps, errors, sample = run(a.requests, rngs, record=True)
    res = dict(
        clients=a.clients, requests=a.requests, errors=errors, wall_s=wall,
        requests_per_s=(a.requests - errors) / wall if wall else 0, tokens_per_s=tokens / wall if wall else 0,
        tokens=tokens, ttft_p50_s=quantile(ttft, 0.5), ttft_p99_s=quantile(ttft, 0.99),
        tpot_p50_s=quantile(gaps, 0.5), tpot_p99_s=quantile(gaps, 0.99),
        load_s=load_s, warmup_s=warmup_s, prompt_tokens=[len(x) for x in ids], peak_rss_bytes=vm_hwm(),
        genai_version=ov_genai.__version__, scheduler=sc.to_string(), properties=props,
    )
    if sample:
        res["error_sample"] = sample
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)
    print(f"{a.clients} clients, {a.requests} requests ({errors} errors) in {wall:.1f} s: "
          f"{res['tokens_per_s']:.1f} tok/s, TTFT p50 {res['ttft_p50_s']:.3f} s, TPOT p50 {res['tpot_p50_s']:.4f} s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
