#!/usr/bin/env bash
# The test command: set up, build, run every CPU test (GPU tests skip with a message where there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh "$@"
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"$(nproc)"
