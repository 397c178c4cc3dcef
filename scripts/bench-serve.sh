#!/usr/bin/env bash
# ovrun serve against llama.cpp's llama-server and OpenVINO GenAI's
# continuous-batching pipeline on the same GGUF file, under the same
# loopback load: tokens/s, TTFT and TPOT p50/p99 and the server's peak RSS
# per concurrency level, rounds interleaved (ovrun, llama.cpp, GenAI,
# ovrun, ...), each run started on idle CPUs. Not part of `make test`.
#
#   ovrun      bin/ovrun serve --max-seqs N [--ovrun-args], driven by
#              bin/ovrun loadtest --clients N --max-tokens 64
#   llama.cpp  llama-server -t 2 -np N -c N*ctx-per-slot (continuous
#              batching), driven by the same bin/ovrun loadtest
#   genai      openvino_genai.ContinuousBatchingPipeline in-process
#              (scripts/bench_serve_genai.py): the same prompts and chat
#              template, N requests in flight, the same JSON fields
#
# Peers are installed into .cache the first time (nothing is downloaded while
# measuring):
#   .cache/genai-venv     openvino-genai at the pinned openvino release,
#                         shared with scripts/bench-vs-genai.sh (same stamp)
#   .cache/llama.cpp      llama-server built from the llama.cpp source bundle
#                         that the node-llama-cpp npm package ships (about 25
#                         CPU-minutes, under nice 19)
#
# Usage: scripts/bench-serve.sh [--install-only] [bench_serve.py flags]
#   default: clients 1,2,4,8,16, 64-token answers, 3 rounds, requests
#   4 x clients (at least 8) per run, prompt caching off in every arm.
#   Common flags: --clients 1,2,4 --rounds 5 --requests 32 --arms ovrun,llama.cpp
#   --ovrun-args '--max-batch-tokens 512' --prefix-cache on
#   (scripts/bench_serve.py --help lists them all).
# Prints a Markdown table per level; raw JSON goes to
# .cache/bench/serve/<date-time>/. BENCH_SERVE_JOBS sets the build's ninja -j.
set -euo pipefail

NODE_LLAMA_CPP_VERSION=3.22.1

# install_llama builds llama-server once into .cache/llama.cpp/src/build/bin.
install_llama() {
  local dir=.cache/llama.cpp stamp=.cache/llama.cpp/.built-node-llama-cpp-$NODE_LLAMA_CPP_VERSION
  [ -e "$stamp" ] && [ -x "$dir/src/build/bin/llama-server" ] && return 0
  echo "bench-serve: building llama-server (node-llama-cpp $NODE_LLAMA_CPP_VERSION source bundle, ~25 CPU-minutes)" >&2
  mkdir -p "$dir/npm"
  if [ ! -e "$dir/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle" ]; then
    (cd "$dir/npm" && { [ -e package.json ] || npm init -y >/dev/null; } &&
      NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm i --no-audit --no-fund -E "node-llama-cpp@$NODE_LLAMA_CPP_VERSION" >/dev/null)
  fi
  if [ ! -e "$dir/src/CMakeLists.txt" ]; then
    rm -rf "$dir/src"
    git -c advice.detachedHead=false clone --quiet "$dir/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$dir/src"
  fi
  # The built-in web UI, TLS and curl are left out: a loopback benchmark needs none.
  nice -n 19 cmake -S "$dir/src" -B "$dir/src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >"$dir/cmake.log" 2>&1 ||
    { tail -20 "$dir/cmake.log" >&2; return 1; }
  nice -n 19 ninja -C "$dir/src/build" -j"${BENCH_SERVE_JOBS:-2}" llama-server >"$dir/ninja.log" 2>&1 ||
    { tail -20 "$dir/ninja.log" >&2; return 1; }
  touch "$stamp"
}

# install_genai is scripts/bench-vs-genai.sh's install, the same venv and stamp.
install_genai() {
  local OPENVINO_VERSION venv=.cache/genai-venv stamp
  OPENVINO_VERSION=$(sed -n 's/^OPENVINO_VERSION *:= *//p' Makefile)
  stamp=$venv/.genai-$OPENVINO_VERSION
  [ -e "$stamp" ] && return 0
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "openvino==$OPENVINO_VERSION" \
    "openvino-genai==$OPENVINO_VERSION.*" "openvino-tokenizers==$OPENVINO_VERSION.*"
  touch "$stamp"
}

main() {
  cd "$(dirname "$0")/.."
  local install_only=
  if [ "${1:-}" = --install-only ]; then install_only=1; shift; fi
  install_genai
  install_llama
  [ -n "$install_only" ] && return 0
  [ -x bin/ovrun ] || make build
  exec python3 scripts/bench_serve.py --ovrun bin/ovrun \
    --llama-server .cache/llama.cpp/src/build/bin/llama-server \
    --genai-python .cache/genai-venv/bin/python \
    --model .venv/SmolLM2-135M-Instruct.Q4_1.gguf "$@"
}

# The whole file is parsed before main runs: editing it mid-run is safe.
main "$@"; exit
