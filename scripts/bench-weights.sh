#!/usr/bin/env bash
# Weights kept compressed in the compiled graphs (--weights native) against
# f32 copies (--weights f32): weight bytes per graph, compile, time to first
# token of a 100-token text prompt, decode tok/s and peak RSS, one fresh
# process each, for the real SmolLM2 GGUF and the qwen2.5-0.5b shape (bf16
# safetensors, random weights).
# Usage: scripts/bench-weights.sh [capacities] [precision] [models]
# Prints a Markdown table; raw JSON goes to .cache/bench/weights/.
set -euo pipefail
cd "$(dirname "$0")/.."
caps=${1:-"256 1024 4096"}
prec=${2:-f32}
out=.cache/bench/weights
mkdir -p "$out"
qwen=.cache/models/qwen2.5-0.5b-seed1
case "${3:-$qwen}" in *"$qwen"*) [ -f "$qwen/config.json" ] || bin/ovrun synth --preset qwen2.5-0.5b --seed 1 --out "$qwen" >/dev/null ;; esac
# 100 tokens of SmolLM2's tokenizer; the synthetic model gets 100 seeded ids.
text="The history of computing is the story of people who wanted machines to do arithmetic faster than any clerk could. Charles Babbage designed engines of brass and steam; Ada Lovelace saw that they could manipulate symbols as well as numbers. A century later, vacuum tubes, then transistors, then integrated circuits made those ideas cheap, small and fast, and the compiler turned"
echo "| model | weights | capacity | weight MiB in blob | compile s (decode+prefill) | first token s (compile+prefill) | decode tok/s | peak RSS MiB |"
echo "|---|---|---|---|---|---|---|---|"
for m in ${3:-.venv/SmolLM2-135M-Instruct.Q4_1.gguf $qwen}; do
  name=$(basename "$m" .gguf)
  for c in $caps; do
    for w in native f32; do
      j=$out/$name-$c-$w.json
      if [ "${m%.gguf}" != "$m" ]; then p=(--prompt "$text" --ignore-eos); else p=(--prompt-tokens 100); fi
      bin/ovrun generate --model "$m" --capacity "$c" "${p[@]}" --max-new-tokens 65 --precision "$prec" \
        --weights "$w" --json "$j" >/dev/null 2>&1
      python3 - "$j" "$name" "$c" "$w" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"| {sys.argv[2]} | {sys.argv[4]} | {sys.argv[3]} | {d.get('weight_bytes', 0)/2**20:.0f} | {d['compile_s']:.2f} | {d['compile_s']+d['prefill_s']:.2f} | {d['decode_tokens_per_s']:.1f} | {d['peak_rss_bytes']/2**20:.0f} |")
PY
    done
  done
done
