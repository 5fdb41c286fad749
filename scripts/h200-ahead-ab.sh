#!/usr/bin/env bash
# The layer-ahead weights and the owned rows of x (issue 15, 2026-12-02) on the H200, in one call: the persistent GPU
# tests and compute-sanitizer on the small cases, then the persistent path with and without the layer-ahead weights
# (LLM_PERSISTENT_SMEM_WEIGHTS=0) and the build before the owned rows of x (llama-ab-A, when staged), then
# scripts/h200-persistent.sh's graph vs persistent figures. Expects scripts/stage-h200.sh's output in .stage/h200.
set -uo pipefail
S=$PWD/.stage/h200
B=$S/bin
export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
M=$PWD/tests/data/models
timeout 150 $B/gpu_tests --gtest_filter='PersistentDecode*:-*SmolLM2*' > "$OUT/tests.log" 2>&1
echo "gpu_tests: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/tests.log" | tr '\n' ' ')"
grep -E "FAILED|differ" "$OUT/tests.log" | head -20
for t in memcheck racecheck synccheck; do
  echo "$t: $(timeout 90 compute-sanitizer --tool $t $B/gpu_tests --gtest_filter='PersistentDecodeSanitizerSmall.*' 2>&1 |
    grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' | tail -2 | tr '\n' ' ')"
done
variants=("0 llama-ab" "1 llama-ab")
[ -x $B/llama-ab-A ] && variants+=("1 llama-ab-A")
for v in "${variants[@]}"; do
  set -- $v
  echo "=== LLM_PERSISTENT_SMEM_WEIGHTS=$1 $2 (--decode persistent, -r 3)"
  export LLM_PERSISTENT_SMEM_WEIGHTS=$1
  timeout 60 $B/$2 --model $M/stories260K/stories260K.bin --tokenizer $M/stories260K/tok512.model \
    --prompt "Once upon a time" --ab warp-r2 --decode persistent -n 128 -r 3 2>&1 | grep "^| .*stories" | head -1
  for m in smollm2-135m tinyllama-1.1b llama3.1-8b; do
    n=128; [ $m = llama3.1-8b ] && n=48
    timeout 60 $B/$2 --model synthetic:$m --ab warp-r2 --decode persistent -n $n -r 3 2>&1 | grep "^| synthetic" | head -1
  done
done
unset LLM_PERSISTENT_SMEM_WEIGHTS
OUT=$OUT SECTIONS=${SECTIONS:-stories smol tiny 8b 8b_q4_0} bash scripts/h200-persistent.sh > "$OUT/bench.log" 2>&1
tail -n 8 "$OUT/bench.log"
