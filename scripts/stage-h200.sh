#!/usr/bin/env bash
# Stages a CUDA build for the H200 test machine: the binaries and the non-CUDA shared libraries they need
# (libsentencepiece, PCRE2, readline) into .stage/h200 (git-ignored), to be carried. The small test models travel with
# the working tree (tests/data/models is tracked).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build}
S=.stage/h200
rm -rf "$S"; mkdir -p "$S/bin"
for exe in ${STAGE_EXES:-run-llama llama-ab bench write-gguf gemv-sectors make-hf-model tests/gpu_tests tests/cpu_tests}; do
  if [ -x "$B/$exe" ]; then cp "$B/$exe" "$S/bin/"; fi
done
# The executables without their symbol tables (a call's carry is 64 MiB; run-llama is ~50 MB stripped).
for f in "$S"/bin/*; do strip --strip-unneeded "$f" 2>/dev/null || true; done
# BASE_LLAMA_AB=PATH: an earlier build's llama-ab, staged as llama-ab-base for scripts/h200-ab-binaries.sh.
if [ -n "${BASE_LLAMA_AB:-}" ]; then cp "$BASE_LLAMA_AB" "$S/bin/llama-ab-base"; fi
mkdir -p "$S/tools" && cp tools/*.py "$S/tools/"
for lib in libsentencepiece.so.0 libpcre2-8.so.0 libreadline.so.8 libcpp-httplib.so.0.11; do cp -L "/usr/lib/x86_64-linux-gnu/$lib" "$S/bin/"; done
# CUPTI (the kernel timeline, measure/kernel_trace.cpp), under its soname, where the build links it: the library CMake
# found. The test machine loads it from LD_LIBRARY_PATH=.stage/h200/bin.
cupti=$(sed -n 's/^CUDA_cupti_LIBRARY:FILEPATH=//p' "$B/CMakeCache.txt" 2>/dev/null || true)
if [ -n "$cupti" ] && [ -f "$cupti" ]; then
  soname=$(objdump -p "$cupti" | sed -n 's/^ *SONAME *//p')
  cp -L "$(dirname "$cupti")/${soname:-libcupti.so.13}" "$S/bin/"
fi
# The default model (98 MB) is over one call's 64 MiB carry: parts carried in separate calls and joined there
# (scripts/h200-check.sh sections smol_keep / smol_join, scripts/h200-peers.sh part / spec); by default four parts of
# 24.6 MB, so that the first call carries one beside the binary archive (PACK=1, ~31 MB) and the working tree (~8 MB);
# GGUF_PARTS=N cuts it in N.
if [ -f models-cache/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
  rm -rf .stage/gguf-*; mkdir -p .stage/gguf-split
  split -n "${GGUF_PARTS:-4}" -a 1 models-cache/SmolLM2-135M-Instruct.Q4_1.gguf .stage/gguf-split/part-
  for p in .stage/gguf-split/part-*; do mkdir -p ".stage/gguf-${p##*-}"; mv "$p" ".stage/gguf-${p##*-}/"; done
  rmdir .stage/gguf-split
fi
# transformers reads GGUF through the `gguf` package, which the H200 machine lacks: carry its wheel.
if [ ! -f .stage/wheels/gguf-0.19.0-py3-none-any.whl ]; then
  python3 -m pip download --no-deps --quiet -d .stage/wheels gguf==0.19.0 || echo "stage: no gguf wheel" >&2
fi
cp -r .stage/wheels "$S/" 2>/dev/null || true
du -sh "$S"
# PACK=1: the stage as one xz archive (.stage/h200.tar.xz, about half the bytes), for a carry near the 64 MiB limit;
# the call unpacks it first: tar -xJf .stage/h200.tar.xz.
if [ "${PACK:-0}" = 1 ]; then
  tar -C . -cf - "$S" | xz -T0 --lzma2=preset=6,dict=192MiB > .stage/h200.tar.xz && du -sh .stage/h200.tar.xz
fi
