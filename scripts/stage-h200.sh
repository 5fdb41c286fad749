#!/usr/bin/env bash
# Stages a CUDA build for the H200 test machine (docs: ../shared/docs/H200.md): the binaries, the one non-CUDA shared
# library they need (libsentencepiece), and the small shared models, into .stage/h200 (git-ignored), to be carried.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build}
S=.stage/h200
rm -rf "$S"; mkdir -p "$S/bin" "$S/shared/models"
for exe in run-llama llama-ab gemv-bench gemv-sectors gemv-probes gemv-profile-target make-hf-model tests/gpu_tests tests/cpu_tests; do
  if [ -x "$B/$exe" ]; then cp "$B/$exe" "$S/bin/"; fi
done
mkdir -p "$S/tools" && cp tools/*.py "$S/tools/"
cp -L /usr/lib/x86_64-linux-gnu/libsentencepiece.so.0 "$S/bin/"
cp -r ../shared/models/stories260K ../shared/models/llama2-tokenizer "$S/shared/models/"
du -sh "$S"
