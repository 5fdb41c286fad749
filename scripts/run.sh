#!/usr/bin/env bash
# The main job: set up, build, and generate a story with the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
M=../shared/models/stories260K
exec build/run-llama --model "$M/stories260K.bin" --tokenizer "$M/tok512.model" \
  --prompt "Once upon a time" -n 100 --temp 0 "$@"
