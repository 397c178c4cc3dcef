#!/usr/bin/env bash
# ovrun generate against llama.cpp (its C API, scripts/llama_stream.c) on
# the same GGUF file, one stream: decode tok/s, prefill, ready and peak RSS
# per prompt length and context, fresh processes interleaved on idle CPUs,
# medians and ratios, token agreement (scripts/bench_vs_llama.py). Not part
# of `make test`.
#
# llama.cpp comes from the source bundle of the node-llama-cpp npm package,
# built once into .cache/llama.cpp by scripts/bench-serve.sh --install-only;
# llama_stream is compiled against its static libllama here.
#
# Usage: scripts/bench-vs-llama.sh [MODEL.gguf] [bench_vs_llama.py flags]
#   default model: .venv/SmolLM2-135M-Instruct.Q4_1.gguf; cases 16:256,
#   16:1024, 16:4096 and 512:1024 (prompt:context), 128 greedy tokens, 2
#   threads, 4 rounds. --cases, --rounds, --new-tokens, --ovrun-arg.
set -euo pipefail
cd "$(dirname "$0")/.."
model=.venv/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ $# -gt 0 && $1 != --* ]]; then model=$1; shift; fi
src=.cache/llama.cpp/src
if [[ ! -f $src/build/src/libllama.a ]]; then
  scripts/bench-serve.sh --install-only
fi
bin=.cache/llama.cpp/llama_stream
if [[ ! -x $bin || scripts/llama_stream.c -nt $bin ]]; then
  b=$src/build
  gcc -O2 -o $bin scripts/llama_stream.c -I$src/include -I$src/ggml/include \
    $b/src/libllama.a $b/ggml/src/libggml.a $b/ggml/src/libggml-cpu.a $b/ggml/src/libggml-base.a \
    -lstdc++ -lpthread -lm -fopenmp -ldl
fi
exec .venv/bin/python scripts/bench_vs_llama.py --model "$model" --llama $bin "$@"
