#!/usr/bin/env bash
# Configures and builds into ./build. The CUDA engine is built (and required) wherever nvcc is present.
# Extra CMake arguments pass through, e.g. scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES=80.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cuda_args=()
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_args=(-DREQUIRE_CUDA=ON)
else
  echo "build: no CUDA toolkit found; building the CPU-only tree" >&2
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" "$@" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
