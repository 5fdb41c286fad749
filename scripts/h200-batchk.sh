#!/usr/bin/env bash
# The batch-k quantized GEMV on the H200 (issues 35 and 36), in one call: prefill of short prompts on 8B models kept
# quantized (this build against OLD, an earlier llama-ab in .stage/h200/bin, and against --batch-rows 0, same machine
# and minute) and the verify step of k tokens against one decode step (llama-ab --verify-k), eager and captured
# (--verify-cg on, the default, and off). FORMATS: q4_0, q8_0, q4_k_m (synthetic 8B quantized at load) or bf16; DEPTHS: prompt lengths.
# Expects .stage/h200 unpacked.
set -uo pipefail
S=$PWD/.stage/h200; B=$S/bin; export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
OLD=${OLD:-llama-ab-base}
qarg() { [ "$1" = bf16 ] && echo "" || echo "--quantize $1"; }
for f in ${FORMATS:-q4_0 bf16}; do
  map=warp-dp4a; [ "$f" = bf16 ] && map=warp-r2
  for d in ${DEPTHS:-16 26}; do
    for run in "$OLD" "llama-ab --batch-rows 0" llama-ab "llama-ab --verify-cg off"; do
      bin=${run%% *}; [ -x "$B/$bin" ] || continue
      extra=""; case "$run" in llama-ab|"llama-ab --verify-cg off") [ "$d" = "$(echo ${DEPTHS:-16 26} | cut -d' ' -f1)" ] && extra="--verify-k ${VERIFY_K:-1,2,4,8,16}" ;; esac
      echo "-- $run 8B $f prefill of $d $extra"
      $B/$run --model synthetic:llama3.1-8b $(qarg $f) --ab $map -d $d -n 16 --repeats 2 $extra \
        2>&1 >/dev/null | grep -E "memory in use|prefilled in|verify of|error" | tee -a "$OUT/batchk.txt"
    done
  done
done
