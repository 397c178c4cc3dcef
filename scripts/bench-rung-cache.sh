#!/usr/bin/env bash
# The compiled-rung cache (--cache-dir), cold against warm, on a 4-rung
# ladder: for each model, a grow-one-ahead run into an empty cache, then the
# same run warm (3 times; medians), and a grow-eager run (every rung compiled
# in the foreground) into another empty cache, then warm (every rung
# imported). --cache-max 32GiB: a qwen2.5-0.5b rung's blob is 2.1 GiB, so its
# 4-rung ladder does not fit the default 8 GiB cap. Each run is a fresh `ovrun run` process under
# flock /tmp/ovrun-bench.lock. Prints a Markdown table; raw JSON goes to
# .cache/bench/rung-cache/, the caches are removed at the end.
# Usage: scripts/bench-rung-cache.sh [ladder] [models]
set -euo pipefail
cd "$(dirname "$0")/.."
ladder=${1:-256,512,1024,2048}
small=.cache/models/small-seed1
qwen=.cache/models/qwen2.5-0.5b-seed1
models=${2:-"$small $qwen .venv/SmolLM2-135M-Instruct.Q4_1.gguf"}
[ -f "$small/config.json" ] || bin/ovrun synth --preset small --seed 1 --out "$small" >/dev/null
[ -f "$qwen/config.json" ] || bin/ovrun synth --preset qwen2.5-0.5b --seed 1 --out "$qwen" >/dev/null
out=.cache/bench/rung-cache
mkdir -p "$out"
# A copy of the binary: a rebuild during the measurement must not change it
# (the copy finds OpenVINO through OVRUN_OPENVINO_LIB).
bin=$(mktemp -d)/ovrun
cp bin/ovrun "$bin"
export OVRUN_OPENVINO_LIB=${OVRUN_OPENVINO_LIB:-$PWD/.venv/openvino/libs}
trap 'rm -rf "$(dirname "$bin")"' EXIT
run() { # policy cache json
  flock /tmp/ovrun-bench.lock "$bin" run --model "$m" --ladder "$ladder" --policy "$1" \
    --prompt-tokens 16 --decode-tokens 4 --cache-dir "$2" --cache-max 32GiB --json "$3" --quiet >/dev/null
}
echo "| model | grow-one-ahead: first rung compiled (cold) | imported (warm): foreground / its import_s | foreground / import | TTFT cold -> warm | grow-eager warm: 4 imports | one rung's compile: 256 / 2048 | 4 imports / compile of 256 / of 2048 |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for m in $models; do
  name=$(basename "$m" .gguf)
  c1=$out/$name-cache-goa c2=$out/$name-cache-ge
  rm -rf "$c1" "$c2"
  run grow-one-ahead "$c1" "$out/$name-goa-cold.json"
  for i in 1 2 3; do run grow-one-ahead "$c1" "$out/$name-goa-warm$i.json"; done
  run grow-eager "$c2" "$out/$name-ge-cold.json"
  run grow-eager "$c2" "$out/$name-ge-warm.json"
  rm -rf "$c1" "$c2"
  python3 - "$out" "$name" <<'PY'
import json, statistics, sys
out, name = sys.argv[1], sys.argv[2]
ld = lambda s: json.load(open(f"{out}/{name}-{s}.json"))
cold, warm, gec, gew = ld("goa-cold"), [ld(f"goa-warm{i}") for i in (1, 2, 3)], ld("ge-cold"), ld("ge-warm")
assert all(r["rungs"][0]["compile_source"] == "imported" for r in warm), "a warm run compiled its first rung"
assert all(r.get("compile_source") == "imported" for r in gew["rungs"]), "the warm grow-eager run compiled a rung"
assert all(r["predictions"] == cold["predictions"] for r in warm), "warm tokens differ"
med = lambda xs: statistics.median(xs)
fg = med([r["foreground_compile_s"] for r in warm])
imp = med([r["rungs"][0]["import_s"] for r in warm])
ttft = med([r["ttft_s"] for r in warm])
imports = sum(r["import_s"] for r in gew["rungs"])
comp = {r["capacity"]: r["compile_s"] - r["export_s"] for r in gec["rungs"]}
lo, hi = comp[min(comp)], comp[max(comp)]
print(f"| {name} | {cold['foreground_compile_s']:.2f} s (export {cold['rungs'][0]['export_s']:.2f} s) | {fg:.2f} / {imp:.2f} s | {fg/imp:.2f} | {cold['ttft_s']:.2f} -> {ttft:.2f} s | {imports:.2f} s | {lo:.2f} / {hi:.2f} s | {imports/lo:.2f} / {imports/hi:.2f} |")
PY
done
