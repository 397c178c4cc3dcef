#!/usr/bin/env bash
# Foundation numbers: compile time per graph, prefill time, decode tok/s and
# peak RSS for each preset x capacity x precision, one fresh process each.
# Usage: scripts/bench-foundation.sh [presets] [capacities] [precisions]
# Prints a Markdown table; raw JSON goes to .cache/bench/foundation/.
set -euo pipefail
cd "$(dirname "$0")/.."
presets=${1:-"tiny small qwen2.5-0.5b"}
caps=${2:-"256 1024 4096"}
precs=${3:-"f32 bf16"}
out=.cache/bench/foundation
mkdir -p "$out"
echo "| preset | capacity | precision (runs as) | compile s (decode+prefill) | prefill s (64 tok) | decode tok/s | peak RSS MiB |"
echo "|---|---|---|---|---|---|---|"
for p in $presets; do
  m=.cache/models/$p-seed1
  [ -f "$m/config.json" ] || bin/ovrun synth --preset "$p" --seed 1 --out "$m" >/dev/null
  for c in $caps; do
    for pr in $precs; do
      j=$out/$p-$c-$pr.json
      bin/ovrun generate --model "$m" --capacity "$c" --prompt-tokens 64 --max-new-tokens 33 \
        --precision "$pr" --json "$j" >/dev/null
      python3 - "$j" "$p" "$c" "$pr" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} ({d['precision_effective']}) | {d['compile_s']:.2f} | {d['prefill_s']:.3f} | {d['decode_tokens_per_s']:.1f} | {d['peak_rss_bytes']/2**20:.0f} |")
PY
    done
  done
done
