#!/usr/bin/env bash
# ovrun generate against OpenVINO GenAI's LLMPipeline on the same GGUF file:
# decode tok/s, time to first token, load+compile, peak RSS, medians of
# interleaved fresh processes (A B A B), and how many leading greedy tokens
# the two agree on (checked at f32). Not part of `make test`.
#
# GenAI (openvino-genai and openvino-tokenizers at the release of the pinned
# openvino) is installed with pip into its own virtual environment,
# .cache/genai-venv, the first time; nothing is downloaded while measuring.
# GenAI reads GGUF files directly, with F16, Q8_0, Q4_0, Q4_1, Q4_K or Q6_K
# matrices (F32 and BF16 ones fail: "Unsupported quantization type"); a
# safetensors checkpoint would need an OpenVINO IR stateful model. So the
# synthetic checkpoints (--models small,qwen) are written once as F16 GGUF
# files by scripts/synth_to_gguf.py, and both tools run that same file.
#
# Usage: scripts/bench-vs-genai.sh [bench_vs_genai.py flags]
#   default: the SmolLM2 GGUF, precisions default,f32, prompts 16,512,
#   capacities 256,1024,4096 (where prompt + 128 new tokens fit), 3 pairs.
#   --models smollm2,small,qwen adds ovrun synth's small preset (F32 -> F16
#   GGUF, precision f32) and qwen2.5-0.5b (BF16 -> F16 GGUF, precision bf16).
# Prints a Markdown table; raw JSON goes to .cache/bench/vs-genai/.
set -euo pipefail
cd "$(dirname "$0")/.."
OPENVINO_VERSION=$(sed -n 's/^OPENVINO_VERSION *:= *//p' Makefile)
venv=.cache/genai-venv
stamp=$venv/.genai-$OPENVINO_VERSION
if [ ! -e "$stamp" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "openvino==$OPENVINO_VERSION" \
    "openvino-genai==$OPENVINO_VERSION.*" "openvino-tokenizers==$OPENVINO_VERSION.*"
  touch "$stamp"
fi
[ -x bin/ovrun ] || make build
exec "$venv/bin/python" scripts/bench_vs_genai.py --genai-python "$venv/bin/python" \
  --smollm2 .venv/SmolLM2-135M-Instruct.Q4_1.gguf "$@"
