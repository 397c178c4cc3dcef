#!/usr/bin/env python3
"""ovrun serve against llama.cpp's llama-server and GenAI's continuous batching.

For every concurrency level N (--clients) and every round (--rounds), each
arm serves the same load on a fresh process, the arms one after the other
(ovrun, llama.cpp, genai, then the next level; each round starts one arm
later, so no arm always runs first or right after another):

  ovrun      bin/ovrun serve --model M --addr 127.0.0.1:PORT --max-seqs N
             --prefix-cache 0|64MiB [--ovrun-args ...]
  ovrun-rounded  the same with --weights rounded: the weights as GenAI
             converts the GGUF file (integer zero points), which the CPU
             plugin's int8 kernels take (not in the default --arms)
  llama.cpp  llama-server -m M --host 127.0.0.1 --port PORT -t T -tb T -np N
             -c N*--ctx-per-slot --jinja --no-webui, prompt caching off
             (--no-cache-prompt --cache-ram 0) or on [--llama-args ...]
  genai      scripts/bench_serve_genai.py: ContinuousBatchingPipeline(M),
             max_num_seqs N, prefix caching off or on [--genai-args ...]

Both servers are driven by `bin/ovrun loadtest --url ... --clients N
--requests R --max-tokens 64 --seed S --json F`; the GenAI driver replays
the same requests in-process (same messages from cmd/ovrun/loadtest.go, same
chat template, same per-client random draws). One run is:

  1. start the server, wait for its health endpoint (ready s);
  2. one non-streamed request per prompt of the mix, max_tokens 1: the
     prompt tokens each arm's chat template made (they should be equal);
  3. warm-up: N concurrent requests of 4 tokens (graphs for N sequences);
  4. wait until the CPUs are idle: a 1 s sample of /proc/stat under
     --idle-busy of all CPUs, for up to --idle-timeout (llama.cpp's spinning
     threads collapse when anything else runs on a 2-core machine);
  5. the measured load; CPU time other processes took meanwhile (all CPUs'
     busy time less the server's process tree and the load client) is
     recorded, and a run where it exceeds --max-other of all CPUs is rerun,
     up to --retries times (the table counts disturbed runs kept);
  6. stop the server (SIGTERM): its peak RSS is wait4's ru_maxrss.

Prompt caching is off in every arm by default (--prefix-cache on turns it
on in all three): the mix repeats six prompts behind one system prompt,
which a cache would serve from memory and so flatter TTFT unlike real use.

Per level it prints a Markdown table: per arm the median over rounds of
tokens/s, TTFT p50/p99, TPOT p50/p99, peak RSS, completion tokens per
request; then ovrun / llama.cpp and ovrun / genai, the medians of the
per-round ratios (tokens/s: above 1 is ovrun faster; times and RSS: below 1
is ovrun better). Raw JSON of every run and a summary.json go to
--out/<date-time>/.

In --out/<date-time>/, NAME = r<round>-c<clients>-<arm>[.retry<k>]:
NAME.json is what loadtest (or the GenAI driver) wrote, NAME.server.log,
NAME.loadtest.log and NAME.warmup.* the processes' own output, and
r<round>-c<clients>-<arm>.all.json every try as this script saw it (the
loadtest fields plus server_peak_rss_bytes, ready_s, prompt_tokens,
other_cpu_frac, disturbed, ...); summary.json and summary.md hold it all.

Until `ovrun loadtest` changes: llama-server streams usage only when asked
for it (stream_options.include_usage), so loadtest counts 0 tokens there;
the harness then takes the completion tokens from llama-server's own log
(print_timing "eval time = ... / K tokens" of the requests of the measured
window) and recomputes tokens/s over loadtest's wall time. And llama-server
closes the connection after each streamed answer though it announces
keep-alive, so a loadtest client that sends its next request at once on the
pooled connection sometimes gets EOF (counted as an error; that request
never reached the server).
"""
import argparse
import datetime
import json
import os
import re
import select
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import ovrun_json  # noqa: E402  ovrun's outputs, their schema checked (docs/outputs.md)
ARMS = ("ovrun", "ovrun-rounded", "llama.cpp", "genai")
# ovrun-rounded is ovrun serve --weights rounded: Q4_1/Q4_K blocks with the
# float minimum rounded to an integer zero point, the form OpenVINO GenAI
# converts a GGUF file to (its arm runs that), each weight off by up to half
# a quantization step. ovrun's default keeps the weights exact.
OVRUN_ARMS = {"ovrun": [], "ovrun-rounded": ["--weights", "rounded"]}
TICK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def load_prompts():
    """loadtest's user messages, read from its source so both stay equal."""
    src = open(os.path.join(ROOT, "cmd", "ovrun", "loadtest.go")).read()
    m = re.search(r"var loadPrompts = \[\]string\{(.*?)\n\}", src, re.S)
    if not m:
        sys.exit("cmd/ovrun/loadtest.go: no loadPrompts list")
    return [json.loads(s) for s in re.findall(r'"(?:[^"\\]|\\.)*"', m.group(1))]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_times():
    """(busy, total) jiffies of all CPUs; steal counts as busy (someone else's)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    total = sum(v[:8])
    return total - v[3] - v[4], total


def tree_cpu(pid):
    """utime+stime seconds of pid and its descendants (living ones)."""
    procs = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        rest = st[st.rindex(")") + 2:].split()
        procs[int(d)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / TICK)
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        if p in procs:
            total += procs[p][1]
            todo += [c for c, (pp, _) in procs.items() if pp == p]
    return total


def wait_idle(a):
    """Waits until a 1 s sample shows the CPUs under --idle-busy; returns
    (seconds waited, last busy fraction, idle reached)."""
    t0 = time.perf_counter()
    while True:
        b0, t_0 = cpu_times()
        time.sleep(1)
        b1, t_1 = cpu_times()
        busy = (b1 - b0) / max(1, t_1 - t_0)
        waited = time.perf_counter() - t0
        if busy < a.idle_busy:
            return waited, busy, True
        if waited > a.idle_timeout:
            log(f"  CPUs still {busy:.0%} busy after {waited:.0f} s: measuring anyway (marked)")
            return waited, busy, False


def http(method, url, body=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()


def wait_health(url, proc, timeout):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if proc.poll() is not None:
            return None
        try:
            if http("GET", url, timeout=2)[0] == 200:
                return time.perf_counter() - t0
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    return None


def stop(proc, timeout=60):
    """SIGTERM, then SIGKILL; returns wait4's peak RSS in bytes."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    t0 = time.perf_counter()
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_maxrss * 1024
        if time.perf_counter() - t0 > timeout:
            proc.kill()
            _, status, ru = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_maxrss * 1024
        time.sleep(0.05)


def run_child(cmd, logf):
    """Runs cmd to its end; returns (exit code, CPU seconds of it and its children)."""
    with open(logf, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
    return os.waitstatus_to_exitcode(status), ru.ru_utime + ru.ru_stime


def server_cmd(a, arm, n, port):
    if arm in OVRUN_ARMS:
        return [a.ovrun, "serve", "--model", a.model, "--addr", f"127.0.0.1:{port}", "--max-seqs", str(n),
                "--prefix-cache", "64MiB" if a.prefix_cache == "on" else "0", "--quiet"] + OVRUN_ARMS[arm] + shlex.split(a.ovrun_args)
    cmd = [a.llama_server, "-m", a.model, "--host", "127.0.0.1", "--port", str(port), "-t", str(a.threads),
           "-tb", str(a.threads), "-np", str(n), "-c", str(n * a.ctx_per_slot), "--jinja", "--no-webui"]
    if a.prefix_cache == "off":
        cmd += ["--no-cache-prompt", "--cache-ram", "0"]
    return cmd + shlex.split(a.llama_args)


def llama_eval_tokens(logf, offset):
    """Completion tokens of the requests llama-server finished after offset
    bytes of its log (its print_timing lines)."""
    with open(logf, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return sum(int(k) for k in re.findall(r"\|\s+eval time =\s+[\d.]+ ms /\s+(\d+) tokens", text))


def probe_prompts(base, prompts):
    out = []
    for p in prompts:
        _, body = http("POST", base + "/v1/chat/completions",
                       {"messages": [{"role": "user", "content": p}], "max_tokens": 1, "temperature": 0})
        out.append(json.loads(body)["usage"]["prompt_tokens"])
    return out


def run_server_arm(a, arm, n, requests, name):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    slog = f"{a.run_dir}/{name}.server.log"
    cmd = server_cmd(a, arm, n, port)
    with open(slog, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    res = {"arm": arm, "command": cmd}
    try:
        ready = wait_health(base + ("/healthz" if arm in OVRUN_ARMS else "/health"), proc, a.ready_timeout)
        if ready is None:
            raise RuntimeError(f"{arm} did not get ready: " + open(slog).read()[-1500:])
        res["ready_s"] = ready
        res["prompt_tokens"] = probe_prompts(base, a.prompts)
        lt = [a.ovrun, "loadtest", "--url", base, "--clients", str(n), "--seed", str(a.seed)]
        rc, _ = run_child(lt + ["--requests", str(n), "--max-tokens", "4", "--json", f"{a.run_dir}/{name}.warmup.json"],
                          f"{a.run_dir}/{name}.warmup.log")
        if rc != 0:
            raise RuntimeError(f"warm-up loadtest exited {rc}: " + open(f"{a.run_dir}/{name}.warmup.log").read()[-1500:])
        res["idle_wait_s"], res["busy_before"], res["idle"] = wait_idle(a)
        log_off = os.path.getsize(slog)
        s0, (b0, t0) = tree_cpu(proc.pid), cpu_times()
        jf = f"{a.run_dir}/{name}.json"
        rc, client_cpu = run_child(lt + ["--requests", str(requests), "--max-tokens", a.max_tokens, "--json", jf],
                                   f"{a.run_dir}/{name}.loadtest.log")
        s1, (b1, t1) = tree_cpu(proc.pid), cpu_times()
        if not os.path.exists(jf):
            raise RuntimeError(f"loadtest exited {rc} without JSON: " + open(f"{a.run_dir}/{name}.loadtest.log").read()[-1500:])
        res.update(ovrun_json.load(jf, "loadtest"))
        res["loadtest_exit"] = rc
        res["server_cpu_s"], res["client_cpu_s"] = s1 - s0, client_cpu
        res["other_cpu_frac"] = max(0.0, ((b1 - b0) / TICK - (s1 - s0) - client_cpu) * TICK / max(1, t1 - t0))
        if arm == "llama.cpp" and res.get("tokens", 0) == 0:
            k = llama_eval_tokens(slog, log_off)
            res.update(tokens=k, tokens_per_s=k / res["wall_s"] if res["wall_s"] else 0, tokens_from="llama-server log")
    finally:
        res["server_peak_rss_bytes"] = stop(proc)
        res["server_exit"] = proc.returncode
    return res


def run_genai_arm(a, n, requests, name):
    jf = f"{a.run_dir}/{name}.json"
    cmd = [a.genai_python, os.path.join(HERE, "bench_serve_genai.py"), "--model", a.model, "--clients", str(n),
           "--requests", str(requests), "--max-tokens", a.max_tokens, "--seed", str(a.seed),
           "--prompts", json.dumps(a.prompts), "--json", jf] + (["--prefix-caching"] if a.prefix_cache == "on" else [])
    cmd += shlex.split(a.genai_args)
    glog = open(f"{a.run_dir}/{name}.server.log", "w")
    t_start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=glog, stdin=subprocess.PIPE, text=True)
    res = {"arm": "genai", "command": cmd[:2] + ["..."]}
    try:
        line = ""
        while line != "ready" and time.perf_counter() - t_start < a.ready_timeout and proc.poll() is None:
            if select.select([proc.stdout], [], [], 0.5)[0]:
                line = proc.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError("genai driver did not get ready: " + open(glog.name).read()[-1500:])
        res["ready_total_s"] = time.perf_counter() - t_start  # start, load, the mix tokenized, the warm-up
        res["idle_wait_s"], res["busy_before"], res["idle"] = wait_idle(a)
        s0, (b0, t0) = tree_cpu(proc.pid), cpu_times()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        _, status, ru = os.wait4(proc.pid, 0)
        b1, t1 = cpu_times()
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0 or not os.path.exists(jf):
            raise RuntimeError(f"genai driver exited {proc.returncode}: " + open(glog.name).read()[-1500:])
        ours = ru.ru_utime + ru.ru_stime - s0
        res.update(json.load(open(jf)))
        res["ready_s"] = res["load_s"]  # the pipeline built: what a server's health endpoint waits for
        res["server_cpu_s"], res["client_cpu_s"] = ours, 0.0
        # The window here also holds the driver's exit: a little more "ours".
        res["other_cpu_frac"] = max(0.0, ((b1 - b0) / TICK - ours) * TICK / max(1, t1 - t0))
        res["server_peak_rss_bytes"] = ru.ru_maxrss * 1024
    finally:
        if proc.poll() is None and proc.returncode is None:
            proc.kill()
            proc.wait()
        glog.close()
    return res


def measure(a, arm, n, requests, name):
    tries = []
    for t in range(a.retries + 1):
        tname = name if t == 0 else f"{name}.retry{t}"
        r = run_genai_arm(a, n, requests, tname) if arm == "genai" else run_server_arm(a, arm, n, requests, tname)
        r["disturbed"] = r["other_cpu_frac"] > a.max_other or not r["idle"]
        tries.append(r)
        log(f"  {tname}: {r['tokens_per_s']:.1f} tok/s, TTFT p50 {r['ttft_p50_s'] * 1e3:.0f} ms, "
            f"TPOT p50 {r['tpot_p50_s'] * 1e3:.1f} ms, RSS {r['server_peak_rss_bytes'] / 2**20:.0f} MiB, "
            f"{r['errors']} errors, other CPU {r['other_cpu_frac']:.0%}" + (" DISTURBED" if r["disturbed"] else ""))
        if not r["disturbed"]:
            break
    best = next((r for r in tries if not r["disturbed"]), min(tries, key=lambda r: r["other_cpu_frac"]))
    best["tries"] = len(tries)
    with open(f"{a.run_dir}/{name}.all.json", "w") as f:
        json.dump(tries, f, indent=1)
    return best


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def table(a, n, runs):
    """Markdown table of one level; runs[arm] is a list over rounds."""
    cols = (("tokens/s", lambda r: r["tokens_per_s"], "{:.1f}"),
            ("TTFT p50 ms", lambda r: r["ttft_p50_s"] * 1e3, "{:.0f}"),
            ("TTFT p99 ms", lambda r: r["ttft_p99_s"] * 1e3, "{:.0f}"),
            ("TPOT p50 ms", lambda r: r["tpot_p50_s"] * 1e3, "{:.1f}"),
            ("TPOT p99 ms", lambda r: r["tpot_p99_s"] * 1e3, "{:.1f}"),
            ("peak RSS MiB", lambda r: r["server_peak_rss_bytes"] / 2**20, "{:.0f}"),
            # ovrun's KV pages in memory at their peak (/metrics, sampled by loadtest); peers report none
            ("peak KV MiB", lambda r: r["peak_kv_reserved_bytes"] / 2**20 if r.get("peak_kv_reserved_bytes") else None, "{:.1f}"))
    arms = [x for x in ARMS if runs.get(x)]
    lines = [f"\n### {n} client{'s' if n > 1 else ''}, {runs[arms[0]][0]['requests']} requests, "
             f"max_tokens {a.max_tokens}, {len(runs[arms[0]])} round(s)\n",
             "| arm | " + " | ".join(c[0] for c in cols) + " | tokens/request | prompt tokens | ready s | errors | disturbed |",
             "|---|" + "---|" * (len(cols) + 5)]
    for arm in arms:
        rs = runs[arm]
        cells = [arm] + [fmt.format(m) if (m := median(f(r) for r in rs)) is not None else "" for _, f, fmt in cols]
        cells.append("{:.1f}".format(median(r["tokens"] / max(1, r["requests"] - r["errors"]) for r in rs)))
        cells.append(",".join(map(str, rs[0].get("prompt_tokens", []))))
        cells.append("{:.1f}".format(median(r.get("ready_s") for r in rs)))
        cells.append(str(sum(r["errors"] for r in rs)))
        cells.append(f"{sum(r['disturbed'] for r in rs)}/{len(rs)}")
        lines.append("| " + " | ".join(cells) + " |")
    for ours in OVRUN_ARMS:
        for peer in ("llama.cpp", "genai"):
            if ours not in arms or peer not in arms:
                continue
            cells = [f"{ours} / {peer}"]
            for _, f, _ in cols:
                ratios = [f(o) / f(p) for o, p in zip(runs[ours], runs[peer]) if f(p) and f(o) is not None]
                m = median(ratios)
                cells.append("" if m is None else f"{m:.2f}")
            lines.append("| " + " | ".join(cells) + " | | | | | |")
    notes = []
    for arm in arms:
        if any(r.get("tokens_from") for r in runs[arm]):
            notes.append(f"{arm}: completion tokens from its server log (loadtest saw no usage in the stream)")
        errs = [r["error_sample"] for r in runs[arm] if r.get("error_sample")]
        if errs:
            notes.append(f"{arm}: first error: {errs[0]}")
    if notes:
        lines.append("\n" + "\n".join("- " + x for x in notes))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--model", default=".venv/SmolLM2-135M-Instruct.Q4_1.gguf", help="the GGUF file all arms serve")
    ap.add_argument("--ovrun", default="bin/ovrun")
    ap.add_argument("--llama-server", default=".cache/llama.cpp/src/build/bin/llama-server")
    ap.add_argument("--genai-python", default=".cache/genai-venv/bin/python")
    ap.add_argument("--arms", default="ovrun,llama.cpp,genai", help="comma-separated: " + ", ".join(ARMS))
    ap.add_argument("--clients", default="1,2,4,8,16", help="concurrency levels (= ovrun --max-seqs, llama -np, GenAI max_num_seqs)")
    ap.add_argument("--requests", type=int, help="requests per run (default: --requests-per-client x clients, at least 8)")
    ap.add_argument("--requests-per-client", type=int, default=4)
    ap.add_argument("--max-tokens", default="64", help="loadtest's --max-tokens (values drawn per request)")
    ap.add_argument("--seed", type=int, default=1, help="loadtest's --seed")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="llama-server -t/-tb")
    ap.add_argument("--ctx-per-slot", type=int, default=512, help="llama-server -c is clients x this")
    ap.add_argument("--prefix-cache", choices=("off", "on"), default="off", help="prompt/prefix caching in every arm")
    ap.add_argument("--ovrun-args", default="", help="extra ovrun serve flags, one shell-quoted string (e.g. '--max-batch-tokens 512')")
    ap.add_argument("--llama-args", default="", help="extra llama-server flags, one string")
    ap.add_argument("--genai-args", default="", help="extra bench_serve_genai.py flags, one string (e.g. '--prop KV_CACHE_PRECISION=f32')")
    ap.add_argument("--idle-busy", type=float, default=0.10, help="CPUs count as idle under this busy fraction (1 s sample)")
    ap.add_argument("--idle-timeout", type=float, default=300, help="seconds to wait for idle CPUs before measuring anyway")
    ap.add_argument("--max-other", type=float, default=0.10, help="a run is disturbed when other processes took more than this fraction of all CPUs")
    ap.add_argument("--retries", type=int, default=2, help="reruns of a disturbed run")
    ap.add_argument("--ready-timeout", type=float, default=300)
    ap.add_argument("--out", default=".cache/bench/serve")
    ap.add_argument("--tables", metavar="SUMMARY_JSON", help="print the tables of an earlier run's summary.json and exit")
    a = ap.parse_args()
    os.chdir(ROOT)
    if a.tables:
        with open(a.tables) as f:
            saved = json.load(f)
        a.max_tokens = saved["args"]["max_tokens"]
        print("\n".join(table(a, int(n), runs) for n, runs in saved["runs"].items()))
        return
    arms = [x.strip() for x in a.arms.split(",") if x.strip()]
    for x in arms:
        if x not in ARMS:
            sys.exit(f"--arms: {x}: want one of {', '.join(ARMS)}")
    for path, arm in ((a.ovrun, None), (a.llama_server, "llama.cpp"), (a.genai_python, "genai")):
        if (arm is None or arm in arms) and not os.access(path, os.X_OK):
            sys.exit(f"{path}: not found (scripts/bench-serve.sh --install-only installs the peers)")
    if not os.path.exists(a.model):
        sys.exit(f"{a.model}: not found")
    a.prompts = load_prompts()
    levels = [int(x) for x in a.clients.split(",")]
    a.run_dir = os.path.join(a.out, datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    os.makedirs(a.run_dir, exist_ok=True)

    t_start = time.perf_counter()
    runs = {n: {arm: [] for arm in arms} for n in levels}
    for rnd in range(a.rounds):
        order = arms[rnd % len(arms):] + arms[:rnd % len(arms)]
        for n in levels:
            requests = a.requests or max(8, a.requests_per_client * n)
            for arm in order:
                log(f"round {rnd + 1}/{a.rounds}, {n} clients, {arm} ({time.perf_counter() - t_start:.0f} s)")
                runs[n][arm].append(measure(a, arm, n, requests, f"r{rnd + 1}-c{n}-{arm}"))
    out = []
    out.append(f"ovrun serve vs llama-server vs GenAI ContinuousBatchingPipeline, {os.path.basename(a.model)}, "
               f"{os.cpu_count()} CPUs, prompt caching {a.prefix_cache}; medians over rounds, ratios the median of "
               f"per-round ratios (tokens/s above 1: ovrun faster; times, RSS below 1: ovrun better)")
    for n in levels:
        out.append(table(a, n, runs[n]))
    text = "\n".join(out)
    print(text)
    with open(os.path.join(a.run_dir, "summary.json"), "w") as f:
        json.dump({"args": {k: v for k, v in vars(a).items()}, "runs": {str(n): runs[n] for n in levels}}, f, indent=1)
    with open(os.path.join(a.run_dir, "summary.md"), "w") as f:
        f.write(text + "\n")
    log(f"\n{time.perf_counter() - t_start:.0f} s in all; raw JSON in {a.run_dir}")


if __name__ == "__main__":
    main()
