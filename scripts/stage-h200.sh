#!/usr/bin/env bash
# Stages a CUDA build for the H200 test machine: the binaries and the non-CUDA shared libraries they need
# (libsentencepiece, PCRE2, readline) into .stage/h200 (git-ignored), to be carried. The small test models travel with
# the working tree (tests/data/models is tracked).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build}
S=.stage/h200
rm -rf "$S"; mkdir -p "$S/bin"
for exe in run-llama llama-ab bench write-gguf gemv-sectors make-hf-model tests/gpu_tests tests/cpu_tests; do
  if [ -x "$B/$exe" ]; then cp "$B/$exe" "$S/bin/"; fi
done
mkdir -p "$S/tools" && cp tools/*.py "$S/tools/"
for lib in libsentencepiece.so.0 libpcre2-8.so.0 libreadline.so.8; do cp -L "/usr/lib/x86_64-linux-gnu/$lib" "$S/bin/"; done
# CUPTI (the kernel timeline, measure/kernel_trace.cpp), under its soname, where the build links it: the library CMake
# found. The test machine loads it from LD_LIBRARY_PATH=.stage/h200/bin.
cupti=$(sed -n 's/^CUDA_cupti_LIBRARY:FILEPATH=//p' "$B/CMakeCache.txt" 2>/dev/null || true)
if [ -n "$cupti" ] && [ -f "$cupti" ]; then
  soname=$(objdump -p "$cupti" | sed -n 's/^ *SONAME *//p')
  cp -L "$(dirname "$cupti")/${soname:-libcupti.so.13}" "$S/bin/"
fi
# The default model (98 MB) is over one call's 64 MiB carry: three parts, carried in three calls and joined there
# (scripts/h200-check.sh sections smol_keep / smol_join).
if [ -f models-cache/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
  rm -rf .stage/gguf-*; mkdir -p .stage/gguf-split
  split -b 33000000 -a 1 models-cache/SmolLM2-135M-Instruct.Q4_1.gguf .stage/gguf-split/part-
  for p in .stage/gguf-split/part-*; do mkdir -p ".stage/gguf-${p##*-}"; mv "$p" ".stage/gguf-${p##*-}/"; done
  rmdir .stage/gguf-split
fi
# transformers reads GGUF through the `gguf` package, which the H200 machine lacks: carry its wheel.
if [ ! -f .stage/wheels/gguf-0.19.0-py3-none-any.whl ]; then
  python3 -m pip download --no-deps --quiet -d .stage/wheels gguf==0.19.0 || echo "stage: no gguf wheel" >&2
fi
cp -r .stage/wheels "$S/" 2>/dev/null || true
du -sh "$S"
