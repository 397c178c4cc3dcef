# Start ovrun serve (SmolLM2, static graphs, batching off, --compile-cost
# COST) and print the budgets' prediction error per rung from /metrics.
#   budget_errors.py MODE COST
#   MODE decode: one long answer (16 + 490 tokens): every rung launched by
#                deadline, compiling beside decode;
#   MODE solo:   prompts that start on rungs 512 and 256 at an idle server:
#                launched at admission, nothing decoding beside them.
# Part of scripts/bench-budgets.sh; not part of make test.
import json, re, subprocess, sys, time, urllib.request
mode, cost = sys.argv[1], sys.argv[2]
cmd = ["bin/ovrun", "serve", "--model", ".venv/SmolLM2-135M-Instruct.Q4_1.gguf", "--attention", "static", "--batching", "off",
       "--prefill", "decode", "--ladder", "64,128,256,512", "--compile-cost", cost,
       "--addr", "127.0.0.1:8391", "-q"]
p = subprocess.Popen(cmd)
base = "http://127.0.0.1:8391"
try:
    for _ in range(600):
        try:
            urllib.request.urlopen(base + "/healthz", timeout=1); break
        except Exception:
            time.sleep(0.2)
    def post(prompt, n):
        body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True}).encode()
        urllib.request.urlopen(urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"}), timeout=300).read()
    if mode == "decode":
        post(list(range(1000, 1016)), 490)
    else:
        post(list(range(1000, 1300)), 8)
        time.sleep(1)
        post(list(range(1000, 1200)), 8)
    time.sleep(0.5)
    m = urllib.request.urlopen(base + "/metrics").read().decode()
    rows = {}
    for cap, fig, v in re.findall(r'ovrun_compile_budget_seconds\{batch="0",capacity="(\d+)",figure="(\w+)"\} (\S+)', m):
        rows.setdefault(int(cap), {})[fig] = float(v)
    for cap in sorted(rows):
        r = rows[cap]
        err = r["actual"] / r["predicted"] - 1 if r.get("actual") else float("nan")
        print(f"{mode} rung {cap}: profile {r['profile']:.2f} s predicted {r['predicted']:.2f} s actual {r.get('actual', 0):.2f} s error {100*err:+.0f}% window {r['window']:.2f} s")
    print(mode, "launches", dict(re.findall(r'ovrun_compile_launches_total\{reason="(\w+)"\} (\d+)', m)),
          "misses", dict(re.findall(r'ovrun_compile_budget_overruns_total\{kind="(\w+)"\} (\d+)', m)))
finally:
    p.terminate(); p.wait()
