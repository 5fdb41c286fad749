#!/usr/bin/env bash
# The speculative verify pass on the H200 (issue 36), in one call: the GPU suite one test suite per process (a crash
# names its suite; SUITES=0 skips it), then llama-ab --verify-k with each verify's kernels traced (count, time in
# kernels, time between them, by kernel) on synthetic 8B Q4_0 / BF16 and SmolLM2 shapes, --fuse-pass on and off in the
# same call (VERIFY=0: the suite only; PASS_AB=1: the short passes' attention and folded norm A/B, below). Expects
# .stage/h200 unpacked. Writes under $OUT.
set -uo pipefail
S=$PWD/.stage/h200; B=$S/bin; export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
nvidia-smi --query-gpu=name --format=csv,noheader
if [ "${SUITES:-1}" = 1 ]; then
  for s in $($B/gpu_tests --gtest_list_tests | grep -E '^[A-Za-z].*\.$' | tr -d '.'); do
    f=$OUT/s_$(echo "$s" | tr '/' '_').log
    # TpCudaEngine's ranks need every module loaded at start (engine/cuda/tp_rank.h); its refusal without, lazily.
    if [ "$s" = TpCudaEngine ]; then
      CUDA_MODULE_LOADING=EAGER timeout 200 $B/gpu_tests --gtest_brief=1 --gtest_filter="$s.*" > "$f" 2>&1; rc=$?
      timeout 60 $B/gpu_tests --gtest_brief=1 --gtest_filter="$s.WithoutEager*" >> "$f" 2>&1 || rc=1
    else
      timeout 200 $B/gpu_tests --gtest_brief=1 --gtest_filter="$s.*" > "$f" 2>&1; rc=$?
    fi
    echo "$s rc=$rc $(grep -E '^\[  PASSED|^\[  SKIPPED|^\[  FAILED  \] [0-9]+' "$f" | tr '\n' ' ')"
    [ $rc = 0 ] || grep -E "Failure|FAILED  \]|what\(\)" "$f" | head -6
  done > "$OUT/suite.txt" 2>&1
  grep -v "rc=0" "$OUT/suite.txt"; echo "suites passed: $(grep -c 'rc=0' "$OUT/suite.txt")"
  cat "$OUT"/s_*.log > "$OUT/all.log"; rm -f "$OUT"/s_*.log
fi
[ "${VERIFY:-1}" = 1 ] || exit 0  # VERIFY=0: the suite only
run() {
  echo "-- $*"
  timeout 150 $B/llama-ab --model "$@" -d 16 -n 16 --repeats 1 --verify-k ${VERIFY_K:-1,4,8} 2>&1 >/dev/null \
    | grep -E "verify of|decode step traced|error" | tee -a "$OUT/verify.txt"
}
# PASS_AB=1: instead, the short passes' attention (--pass-attn split|whole) and the folded RMSNorm (--fuse-norm on|off)
# at depth 300 on SmolLM2's shape (Q4_1, warp: the FP32-x pass) and 8B Q4_0 (warp-dp4a), each setting in its process.
if [ "${PASS_AB:-0}" = 1 ]; then
  for m in "synthetic:smollm2-135m --quantize q4_1 --ab warp" "synthetic:llama3.1-8b --quantize q4_0 --ab warp-dp4a"; do
    for opts in "" "--pass-attn whole" "--fuse-norm off" "--pass-attn whole --fuse-norm off"; do
      # shellcheck disable=SC2086
      timeout 150 $B/llama-ab --model $m $opts -d 300 -n 16 --repeats 1 --verify-k ${VERIFY_K:-1,4,8} 2>&1 >/dev/null \
        | grep -E "verify of [0-9]+ tokens at|error" | sed "s|^|$m ${opts:-(defaults)}: |" | tee -a "$OUT/verify-pass-ab.txt"
    done
  done
  exit 0
fi
# LEAN=1: SmolLM2's shape both ways and 8B Q4_0 with the fusion only (a short device budget).
for fuse in on off; do
  run synthetic:smollm2-135m --quantize q4_1 --ab warp --fuse-pass $fuse
  [ "${LEAN:-0}" = 1 ] && [ $fuse = off ] && continue
  run synthetic:llama3.1-8b --quantize q4_0 --ab warp-dp4a --fuse-pass $fuse
done
[ "${LEAN:-0}" = 1 ] || run synthetic:llama3.1-8b --ab warp-r2
