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
# Usage: scripts/bench-vs-llama.sh [--isa avx2] [MODEL.gguf] [bench_vs_llama.py flags]
#   default model: .venv/SmolLM2-135M-Instruct.Q4_1.gguf; cases 16:256,
#   16:1024, 16:4096 and 512:1024 (prompt:context), 128 greedy tokens, 2
#   threads, 4 rounds. --cases, --rounds, --new-tokens, --ovrun-arg.
#   --isa avx2 measures both on AVX2 kernels alone, as on a CPU without
#   AVX-512 (most AMD and client CPUs): OpenVINO with
#   ONEDNN_MAX_CPU_ISA=AVX2 (its CPU plugin then picks brgemm_avx2_f32
#   kernels and f32, and ovrun's kernel, --weights kernel-q8, leaves out
#   AVX512_VNNI), llama.cpp built with GGML_NATIVE=OFF, AVX2, FMA and
#   F16C into .cache/llama.cpp/src/build-avx2 (libllama only, minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
isa=native
if [[ ${1:-} == --isa ]]; then isa=$2; shift 2; fi
model=.venv/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ $# -gt 0 && $1 != --* ]]; then model=$1; shift; fi
src=.cache/llama.cpp/src
if [[ ! -f $src/build/src/libllama.a ]]; then
  scripts/bench-serve.sh --install-only
fi
case $isa in
native) b=$src/build bin=.cache/llama.cpp/llama_stream ;;
avx2)
  b=$src/build-avx2 bin=.cache/llama.cpp/llama_stream-avx2
  export ONEDNN_MAX_CPU_ISA=AVX2
  if [[ ! -f $b/src/libllama.a ]]; then
    echo "bench-vs-llama: building llama.cpp for AVX2 into $b" >&2
    nice -n 10 cmake -S $src -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX=ON \
      -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DBUILD_SHARED_LIBS=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
      -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >/dev/null
    nice -n 10 ninja -C $b -j2 llama >/dev/null
  fi
  ;;
*) echo "bench-vs-llama: --isa native or avx2, not $isa" >&2; exit 2 ;;
esac
if [[ ! -x $bin || scripts/llama_stream.c -nt $bin || $b/src/libllama.a -nt $bin ]]; then
  gcc -O2 -o $bin scripts/llama_stream.c -I$src/include -I$src/ggml/include \
    $b/src/libllama.a $b/ggml/src/libggml.a $b/ggml/src/libggml-cpu.a $b/ggml/src/libggml-base.a \
    -lstdc++ -lpthread -lm -fopenmp -ldl
fi
echo "bench-vs-llama: $model, kernels: $isa ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs))" >&2
exec .venv/bin/python scripts/bench_vs_llama.py --model "$model" --llama $bin "$@"
