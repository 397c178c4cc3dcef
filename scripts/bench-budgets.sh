#!/usr/bin/env bash
# Compile budgets in production, on SmolLM2 with static graphs (a graph per
# rung, as an NPU needs), ladder 64..512, on this machine's idle CPUs. Not
# part of `make test`. Writes .cache/bench/budgets/ and prints:
#   1. the profile: bin/ovtrace compile --under-decode (solo and beside a
#      decode loop);
#   2. the prediction error per rung of ovrun run --compile-cost (one and
#      two ahead), twice;
#   3. the error per rung of ovrun serve --compile-cost: launched by
#      deadline beside decoding, and at admission on an idle server, twice
#      each (scripts/budget_errors.py);
#   4. one open-loop load (24 requests at 0.5/s, prompts 16/64/200, answers
#      32/128/256 in full) against a fresh server without and with
#      --compile-cost, 3 rounds: boundary waits, compiles, TTFT (bin/ovrun
#      loadtest), median (range);
#   5. bin/ovrun plan --serve for the same load, against the measured one.
# Usage: scripts/bench-budgets.sh [--skip-profile]
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/bench/budgets
mkdir -p "$out"
model=.venv/SmolLM2-135M-Instruct.Q4_1.gguf
py=.venv/bin/python
cost=$out/cost-static.json
ladder=64,128,256,512
if [[ "${1:-}" != --skip-profile || ! -f $cost ]]; then
  bin/ovtrace compile --model $model --attention static --ladder $ladder --reps 3 --under-decode --prefill-chunk 0 --json $cost -q
fi
for i in 1 2; do
  bin/ovrun run --model $model --attention static --graph-per-rung --ladder $ladder --prompt-tokens 16 --decode-tokens 490 \
    --compile-cost $cost --json $out/run$i.json -q >/dev/null
  $py - $out/run$i.json <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for b in s["budgets"]:
    print(f"run rung {b['capacity']}: {b['reason']} profile {b['profile_s']:.2f} s x {b['correction']:.2f} = predicted {b['predicted_s']:.2f} s, actual {b['actual_s']:.2f} s, error {100*b['error']:+.0f}%")
print(f"run boundary waits {s['boundary_wait_s']:.2f} s")
PY
done
for mode in decode solo decode solo; do $py scripts/budget_errors.py $mode $cost; done
load() {
  local name=$1; shift
  bin/ovrun serve --model $model --attention static --batching off --prefill decode --ladder $ladder --max-seqs 4 \
    --addr 127.0.0.1:8392 -q "$@" &
  local pid=$!
  until curl -sf http://127.0.0.1:8392/healthz >/dev/null; do sleep 0.2; done
  bin/ovrun loadtest --url http://127.0.0.1:8392 --rate 0.5 --requests 24 --prompt-tokens 16,64,200 \
    --max-tokens 32,128,256 --ignore-eos --seed 1 --json $out/$name.json >/dev/null
  kill $pid; wait $pid || true
}
for r in 1 2 3; do
  load plain_$r
  load budgets_$r --compile-cost $cost
done
# 116 tok/s: one sequence alone; 0.76: two side by side (loadtest --clients 1 and 2).
bin/ovrun plan --serve --compile-cost $cost --decode-rate 116 --parallel 0.76 --ladder $ladder --prompt-tokens 16,64,200 \
  --answer-tokens 32,128,256 --rate 0.5 --requests 24 --max-seqs 4 --seed 1 --kv-bytes-per-token 23040 --json $out/plan.json >/dev/null
$py - $out <<'PY'
import json, statistics, sys
d = sys.argv[1]
plan = json.load(open(f"{d}/plan.json"))["result"]
runs = {n: [json.load(open(f"{d}/{n}_{r}.json")) for r in (1, 2, 3)] for n in ("plain", "budgets")}
print("| figure | plan --serve | with --compile-cost | plan / measured | without |")
print("|---|---|---|---|---|")
for k, mk in [("makespan_s", "wall_s"), ("tokens_per_s", "tokens_per_s"), ("ttft_p50_s", "ttft_p50_s"), ("ttft_p99_s", "ttft_p99_s"),
              ("boundary_wait_s", "boundary_wait_s"), ("admission_wait_s", "admission_wait_s"),
              ("compiles", "compiles"), ("compile_s", "compile_s"), ("peak_kv_reserved_bytes", "peak_kv_reserved_bytes")]:
    scale = 2**20 if "kv" in k else 1
    unit = " MiB" if "kv" in k else ""
    p = (plan.get(k) or 0) / scale
    cell = {}
    for n, rs in runs.items():
        xs = [(x.get(mk) or 0) / scale for x in rs]
        cell[n] = (statistics.median(xs), f"{statistics.median(xs):.3g}{unit} ({min(xs):.3g}..{max(xs):.3g})")
    b = cell["budgets"][0]
    ratio = f"{100*(p/b-1):+.0f}%" if b > 1e-3 else "-"
    print(f"| {k} | {p:.3g}{unit} | {cell['budgets'][1]} | {ratio} | {cell['plain'][1]} |")
PY
