#!/usr/bin/env bash
# What a fusion is worth, on the H200, in one call: the fused kernels' GPU tests, then scripts/h200-ab-binaries.sh
# with the same llama-ab run with the fusion off ("llama-ab-base", a wrapper passing KNOB_OFF) and on, alternating, so
# each row's t/s and its GEMV / other ms per token come from the same machine and minute. Expects the staged build
# unpacked in .stage/h200 (scripts/stage-h200.sh; PACK=1 then tar -xJf .stage/h200.tar.xz).
# KNOB_OFF: the llama-ab option that turns the fusion off (default --fuse-norm off); TESTS: the gtest filter run first;
# MODELS, DECODE, BINS: as h200-ab-binaries.sh (default the graph path on 8B BF16 and Q4_0, TinyLlama and the SmolLM2
# file; BINS "llama-ab-base llama-ab llama-ab-prev" adds the PREV build).
set -uo pipefail
S=$PWD/.stage/h200; B=$S/bin; export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main  # the tests find tests/data where they were built
printf '#!/bin/sh\nexec "$(dirname "$0")/llama-ab" %s "$@"\n' "${KNOB_OFF:---fuse-norm off}" > "$B/llama-ab-base"
chmod +x "$B/llama-ab-base"
# PREV=PATH: an earlier build's llama-ab (before the fusions), run as a third binary "llama-ab-prev" (BINS below).
if [ -n "${PREV:-}" ] && [ -x "$PREV" ]; then cp "$PREV" "$B/llama-ab-prev"; fi
echo "=== GPU tests: ${TESTS:=*RmsNormFold*:CudaModel.*:CudaQuantModel.*} ==="
timeout "${TEST_TIMEOUT:-240}" "$B/gpu_tests" --gtest_brief=1 --gtest_filter="$TESTS" 2>&1 | tail -${TEST_TAIL:-30}
echo "=== llama-ab, fusion off (llama-ab-base) then on (llama-ab) ==="
DECODE=${DECODE:-graph} MODELS=${MODELS:-"8b 8b_q4_0 tiny smol_real smol_real_deq"} scripts/h200-ab-binaries.sh
echo "=== time to first token (26-token prompt, graph path, warm-up at load) ==="
SMOL=${SMOL:-models-cache/SmolLM2-135M-Instruct.Q4_1.gguf}
for m in "synthetic:llama3.1-8b --quantize q4_0" "synthetic:llama3.1-8b" "$SMOL"; do
  echo "-- $m"
  $B/run-llama --model $m --prompt-ids "$(seq -s, 1000 1025)" -n 16 --ignore-eos --temp 0 --device cuda 2>&1 \
    | grep -E "load time|prompt eval|first token|  eval time"
done
