#!/usr/bin/env bash
# Decode next to a background compile, in process and in a compile worker,
# with and without a CPU partition: `ovrun contention` for every row, ROUNDS
# rounds (the rows in a rotated order each round, each run under the bench
# lock), and the medians with their ranges as a Markdown table.
# Usage: scripts/bench-contention.sh MODEL [ROUNDS]
# Raw JSON goes to .cache/bench/contention/.
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1 rounds=${2:-5}
out=.cache/bench/contention/$(basename "$model")
mkdir -p "$out"
part="--infer-threads 1 --compile-cpus 1 --decode-cpus 0"
rows=(
  "process|"
  "process|--compile-nice 19"
  "process|$part --prop ENABLE_CPU_PINNING=NO"
  "worker|"
  "worker|--compile-nice 19"
  "worker|$part"
  "worker|$part --prop ENABLE_CPU_PINNING=NO"
)
for ((r = 0; r < rounds; r++)); do
  for ((k = 0; k < ${#rows[@]}; k++)); do
    i=$(( (k + r) % ${#rows[@]} ))
    where=${rows[$i]%%|*} knobs=${rows[$i]#*|}
    # shellcheck disable=SC2086 # knobs are words
    flock /tmp/ovrun-bench.lock bin/ovrun contention --model "$model" --capacity 1024 --compile-capacity 2048 \
      --steps 150 --compile-in "$where" $knobs --json "$out/row$i-round$r.json" >/dev/null
  done
done
python3 - "$out" "$rounds" "${rows[@]}" <<'PY'
import json, os, statistics, sys
d, rounds, rows = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = [[json.load(open(os.path.join(d, f"row{i}-round{r}.json"))) for r in range(rounds)] for i in range(len(rows))]
base = statistics.median(x["alone_tokens_per_s"] for x in runs[0])
def cell(xs, fmt):
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}, {fmt.format(max(xs))}]"
print(f"| compile in | knobs | decode alone tok/s | vs in-process default | decode during compile tok/s | decode slowdown % | compile alone s | compile during decode s |")
print("|---|---|---|---|---|---|---|---|")
for row, xs in zip(rows, runs):
    where, knobs = row.split("|", 1)
    alone = [x["alone_tokens_per_s"] for x in xs]
    print(f"| {where} | {('`' + knobs + '`') if knobs else 'defaults (2 inference threads)'} | {cell(alone, '{:.1f}')} | "
          f"{100 * (statistics.median(alone) / base - 1):+.0f}% | {cell([x['under_compile_tokens_per_s'] for x in xs], '{:.1f}')} | "
          f"{cell([x['decode_slowdown_pct'] for x in xs], '{:.0f}')} | {cell([x['compile_alone_s'] for x in xs], '{:.2f}')} | "
          f"{cell([x['compile_under_decode_s'] for x in xs], '{:.2f}')} |")
PY
