#!/usr/bin/env bash
# Build example.c against the exported object. Needs the CUDA runtime headers and library and
# libcuda_dialect_runtime_static.a from the nvidia-cutlass-dsl wheel (set CUTE_DSL_RUNTIME).
set -euo pipefail
cd "$(dirname "$0")"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
: "${CUTE_DSL_RUNTIME:?set CUTE_DSL_RUNTIME to libcuda_dialect_runtime_static.a}"
${CC:-gcc} -O2 -o example example.c kernel.o "$CUTE_DSL_RUNTIME" -I"$CUDA_HOME/include" \
  -L"$CUDA_HOME/lib64" -lcudart -ldl -lpthread -lrt -lstdc++
echo "built ./example"
