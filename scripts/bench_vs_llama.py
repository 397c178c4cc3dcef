#!/usr/bin/env python3
"""ovrun generate against llama.cpp on the same GGUF file, one stream.

llama.cpp runs through its C API (scripts/llama_stream.c, no wrapper: the
prompt in one llama_decode, then one greedy token a step, N threads).
ovrun runs `ovrun generate --prompt-ids`. For every case (prompt length x
context) the two run --rounds times each, interleaved (ovrun first in even
rounds, llama.cpp first in odd ones), every run a fresh process started on
idle CPUs: before each run the script waits until the CPUs are at least 90%
idle over half a second, and a run during which something else took more
than 10% of the CPUs is run again (said in the log). On a 2-core machine
llama.cpp at 2 threads collapses when anything else runs.

Definitions, the same for both:
  decode tok/s   decode tokens / decode seconds (ovrun: decode_tokens_per_s;
                 llama.cpp: its N greedy steps)
  prefill s      the prompt to its prediction (ovrun: prefill_s; llama.cpp:
                 the prompt's llama_decode and its argmax)
  ready s        the process's wall time less prefill and decode: start,
                 load, compile or mmap, context, tear-down. ovrun's ready is
                 given cold (no --cache-dir: every graph compiled) and warm
                 (--cache-dir filled by an excluded run before the case:
                 every graph imported); llama.cpp has no compile, so one
                 figure
  peak RSS       the process's maximum resident set (wait4); both binaries
                 are first dropped from the page cache (evict), as an
                 installed binary is read from disk
  agree          leading greedy tokens equal, of the prompt's prediction and
                 the N decoded: ovrun = llama.cpp, and each against the
                 float64 reference forward pass (model/testdata/reference.py,
                 the GGUF's weights dequantized; --no-reference skips it)

Prints a Markdown table of medians with ratios ovrun / llama.cpp (decode:
llama.cpp / ovrun, so that above 1 is always llama.cpp ahead), each ratio
the median of the rounds' own (paired: a round's runs follow one another,
so a VM whose speed drifts over the case slows both sides of a ratio alike,
where it would skew a ratio of medians), then where
ovrun's memory is mid-answer (generate --json "memory", medians of the cold
runs). Raw JSON of every run goes to --out, and each case's figures to
--out/pP-cC-runs.json. Used by
scripts/bench-vs-llama.sh, which also runs both on AVX2 kernels alone
(--isa avx2: ONEDNN_MAX_CPU_ISA=AVX2 for OpenVINO, a llama.cpp built
without AVX-512).
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_vs_genai import agree, prompt_ids, reference  # noqa: E402  the same prompt text, agreement and float64 reference
import ovrun_json  # noqa: E402  ovrun's outputs, their schema checked (docs/outputs.md)


# The parts of generate --json "memory" (runtime.MemoryParts), in the order shown.
MEMORY_PARTS = ("rss_bytes", "openvino_heap_bytes", "code_bytes", "go_heap_bytes", "weights_bytes", "kv_bytes")


def cpu_times():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]  # total, idle + iowait


def wait_idle(log, idle=0.9, timeout=120):
    t_end = time.time() + timeout
    while True:
        t0, i0 = cpu_times()
        time.sleep(0.5)
        t1, i1 = cpu_times()
        if (i1 - i0) / max(t1 - t0, 1) >= idle:
            return
        if time.time() > t_end:
            print("warning: the CPUs stayed busy; measuring anyway", file=log, flush=True)
            return


def own_ticks(pid_usage):
    """CPU ticks of the run's own process (utime + stime, children too)."""
    return (pid_usage.ru_utime + pid_usage.ru_stime) * os.sysconf("SC_CLK_TCK")


def run(cmd, stdout_path, log, retries=3):
    """Runs cmd as a fresh process on idle CPUs; returns (wall s, peak RSS
    bytes). Reruns it when other processes took over 10% of the CPUs."""
    for attempt in range(retries + 1):
        wait_idle(log)
        t0, i0 = cpu_times()
        w0 = time.perf_counter()
        with open(stdout_path, "w") as f:
            p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
            _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - w0
        t1, i1 = cpu_times()
        if (code := os.waitstatus_to_exitcode(status)) != 0:
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
            hint = " (an instruction this CPU or VM does not allow: --isa avx2 builds for AVX2 alone)" if code == -signal.SIGILL else ""
            sys.exit(f"{' '.join(cmd[:3])} ... failed, {how}{hint}: {p.stderr.read().decode()[-2000:]}")
        busy, own = (t1 - t0) - (i1 - i0), own_ticks(ru)
        other = max(0.0, busy - own) / max(t1 - t0, 1)
        if other <= 0.10 or attempt == retries:
            if other > 0.10:
                print(f"warning: {other:.0%} of the CPUs went to other processes during {cmd[0]}; kept after {retries} reruns", file=log, flush=True)
            return wall, ru.ru_maxrss * 1024
        print(f"rerun: {other:.0%} of the CPUs went to other processes during {cmd[0]}", file=log, flush=True)


def evict(*paths):
    """Drops the files' pages from the page cache, so that each binary runs
    as an installed one does. A file just written (make build) sits in the
    page cache in large folios, and a page fault maps a whole folio: a
    freshly built bin/ovrun kept 22 MiB of its own code resident against
    4 MiB once read back from disk."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the GGUF file both run")
    ap.add_argument("--ovrun", default="bin/ovrun")
    ap.add_argument("--llama", required=True, help="the llama_stream binary")
    ap.add_argument("--cases", default="16:256,16:1024,16:4096,512:1024", help="PROMPT:CONTEXT pairs")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--ovrun-arg", action="append", default=[], help="extra argument for ovrun generate")
    ap.add_argument("--out", default=".cache/bench/vs-llama")
    ap.add_argument("--no-reference", action="store_true", help="skip the float64 reference (slow for long prompts)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    log = sys.stderr
    evict(shutil.which(a.ovrun) or a.ovrun, shutil.which(a.llama) or a.llama)
    cases = [tuple(int(x) for x in c.split(":")) for c in a.cases.split(",")]
    ids_all = prompt_ids(a.ovrun, a.model, max(p for p, _ in cases))
    rows, mems = [], []
    for P, C in cases:
        ids = ",".join(map(str, ids_all[:P]))
        tools = ("ovrun", "ovrun-warm", "llama.cpp")
        runs = {t: [] for t in tools}
        cache = f"{a.out}/rung-cache-p{P}-c{C}"
        shutil.rmtree(cache, ignore_errors=True)
        ovrun_cmd = lambda out: [a.ovrun, "generate", "--model", a.model, "--capacity", str(C), "--prompt-ids", ids,
                                 "--max-new-tokens", str(a.new_tokens), "--json", out] + a.ovrun_arg
        run(ovrun_cmd(f"{a.out}/p{P}-c{C}-fill.json") + ["--cache-dir", cache], f"{a.out}/p{P}-c{C}-fill.stdout", log)
        for r in range(a.rounds):
            order = tools[r % 3:] + tools[:r % 3]  # each first in turn
            for tool in order:
                out = f"{a.out}/p{P}-c{C}-{tool}-{r}.json"
                if tool.startswith("ovrun"):
                    cmd = ovrun_cmd(out) + (["--cache-dir", cache] if tool == "ovrun-warm" else [])
                    wall, rss = run(cmd, out + ".stdout", log)
                    d = ovrun_json.load(out, "generate")
                    d = dict(decode_tok_s=d["decode_tokens_per_s"], prefill_s=d["prefill_s"], decode_s=d["decode_s"],
                             tokens=d["generated_ids"] or [], memory=d.get("memory") or {})
                else:
                    cmd = [a.llama, a.model, str(C), str(a.threads), str(a.new_tokens - 1), ids]
                    wall, rss = run(cmd, out, log)
                    d = json.load(open(out))
                d.update(wall_s=wall, peak_rss_bytes=rss, ready_s=wall - d["prefill_s"] - d["decode_s"])
                runs[tool].append(d)
            print(f"p{P} c{C} round {r + 1}/{a.rounds}: ovrun {runs['ovrun'][-1]['decode_tok_s']:.1f} tok/s "
                  f"(ready {runs['ovrun'][-1]['ready_s']:.2f} s cold, {runs['ovrun-warm'][-1]['ready_s']:.2f} s warm), "
                  f"llama.cpp {runs['llama.cpp'][-1]['decode_tok_s']:.1f} tok/s (ready {runs['llama.cpp'][-1]['ready_s']:.2f} s)",
                  file=log, flush=True)
        with open(f"{a.out}/p{P}-c{C}-runs.json", "w") as f:
            json.dump(runs, f)
        mems.append((P, C, {k: statistics.median(x["memory"].get(k, 0) for x in runs["ovrun"]) for k in MEMORY_PARTS}))
        o, l = runs["ovrun"][0]["tokens"], runs["llama.cpp"][0]["tokens"]
        n = min(len(o), len(l))
        agrees = f"{agree(o, l)}/{n}"
        if not a.no_reference:
            ref = reference(sys.executable, a.model, ids_all[:P], a.new_tokens, a.out, f"c{C}")
            agrees += f"; reference: ovrun {agree(o, ref)}, llama.cpp {agree(l, ref)}"
        rows.append((P, C, runs, agrees))
    print_table(rows)
    print()
    print("ovrun's resident memory mid-answer, MiB (generate --json \"memory\", medians of the cold runs):")
    print()
    print("| prompt, context | " + " | ".join(MEMORY_PARTS) + " |")
    print("|---|" + "---|" * len(MEMORY_PARTS))
    for P, C, v in mems:
        print(f"| {P}, {C} | " + " | ".join(f"{v[k] / 2**20:.0f}" for k in MEMORY_PARTS) + " |")


def paired(runs, tool, k, other, inverse=False):
    """The median over rounds of tool's k over other's k in the same round
    (other's over tool's where inverse)."""
    return statistics.median((y[k] / x[k]) if inverse else (x[k] / y[k]) for x, y in zip(runs[tool], runs[other]))


def print_table(rows):
    """Each case's medians and paired ratios, a Markdown table."""
    print(f"| prompt, context | decode tok/s ovrun / llama.cpp | llama.cpp ahead | prefill s | ovrun / llama.cpp "
          f"| ready s cold / warm / llama.cpp | ovrun / llama.cpp cold, warm | peak RSS MiB cold / warm / llama.cpp "
          f"| ovrun / llama.cpp cold, warm | leading tokens equal: ovrun = llama.cpp; each = float64 reference |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for P, C, runs, agrees in rows:
        med = lambda k, *tools: [statistics.median(x[k] for x in runs[t]) for t in tools]
        ratio = lambda tool, k, inverse=False: paired(runs, tool, k, "llama.cpp", inverse)
        d = med("decode_tok_s", "ovrun", "llama.cpp")
        p = med("prefill_s", "ovrun", "llama.cpp")
        r = med("ready_s", "ovrun", "ovrun-warm", "llama.cpp")
        s = [v / 2**20 for v in med("peak_rss_bytes", "ovrun", "ovrun-warm", "llama.cpp")]
        print(f"| {P}, {C} | {d[0]:.1f} / {d[1]:.1f} | {ratio('ovrun', 'decode_tok_s', True):.2f}x "
              f"| {p[0]:.3f} / {p[1]:.3f} | {ratio('ovrun', 'prefill_s'):.2f}x "
              f"| {r[0]:.2f} / {r[1]:.2f} / {r[2]:.2f} | {ratio('ovrun', 'ready_s'):.1f}x, {ratio('ovrun-warm', 'ready_s'):.1f}x "
              f"| {s[0]:.0f} / {s[1]:.0f} / {s[2]:.0f} | {ratio('ovrun', 'peak_rss_bytes'):.2f}x, "
              f"{ratio('ovrun-warm', 'peak_rss_bytes'):.2f}x | {agrees} |")


if __name__ == "__main__":
    main()
