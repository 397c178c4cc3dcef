#!/usr/bin/env bash
# The seed's endpoint table for every policy: one fresh `ovrun run` each.
# Usage: scripts/bench-policies.sh MODEL_DIR LADDER PROMPT DECODE [extra run flags...]
# Prints a Markdown table; raw JSON goes to .cache/bench/policies/.
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1 ladder=$2 prompt=$3 decode=$4
shift 4
out=.cache/bench/policies/$(basename "$model")-${ladder//,/-}
mkdir -p "$out"
for p in direct pyramid grow-eager grow-one-ahead lazy grow-remap; do
  bin/ovrun run --model "$model" --ladder "$ladder" --policy "$p" --prompt-tokens "$prompt" \
    --decode-tokens "$decode" --teacher-forced --json "$out/$p.json" -q "$@" >/dev/null
done
python3 - "$out" <<'PY'
import json, sys, os
d = sys.argv[1]
print("| policy | foreground compile s | critical path s | decode s | boundary wait s | ready k/k | overlapped compile s | migrate s | KV reserved avg MiB | KV reserved peak MiB | live KV avg MiB | peak RSS MiB | decode tok/s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for p in ["direct", "pyramid", "grow-eager", "grow-one-ahead", "lazy", "grow-remap"]:
    s = json.load(open(os.path.join(d, p + ".json")))
    bg = [r for r in s["rungs"] if r["first_step"] > 0 and r is not s["rungs"][0] and not r["foreground"]]
    used = [r for r in s["rungs"] if r["first_step"] > 0]
    ready = sum(1 for r in used[1:] if r["ready_at_boundary"])
    mib = lambda b: b / 2**20
    print(f"| {p} | {s['foreground_compile_s']:.2f} | {s['critical_path_s']:.2f} | {s['decode_s']:.2f} | {s['boundary_wait_s']:.2f} | "
          f"{ready}/{len(used)-1} | {s['successor_compile_overlapped_s']:.2f} | {s['migrate_s']:.3f} | {mib(s['kv_reserved_avg_bytes']):.1f} | "
          f"{mib(s['kv_reserved_peak_bytes']):.1f} | {mib(s['kv_live_avg_bytes']):.1f} | {mib(s['peak_rss_bytes']):.0f} | {s['decoded_tokens']/s['decode_s']:.1f} |")
PY
