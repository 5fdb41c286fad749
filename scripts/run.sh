#!/usr/bin/env bash
# The main job: set up (packages + the default model, SmolLM2-135M-Instruct), build, then ask the default model a
# question through the chat template and have it complete a prompt (extra arguments go to that run-llama call).
# On the GPU where there is one, on the CPU reference path otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
echo "What is the capital of France?" | build/run-llama --chat --temp 0 -n 64
exec build/run-llama --prompt "The three most important things to know about the ocean are" -n 100 --temp 0 "$@"
