#!/usr/bin/env bash
# Issue 35 on the H200, in one call: what a quantized 8B holds on the GPU and what its prefill costs, this build
# against an earlier one (OLD=llama-ab binary name in .stage/h200/bin, default llama-ab-59df27e: the BF16 copy), same
# machine and minute. Rows: memory plan and memory in use (new build), prefill of DEPTHS tokens (llama-ab -d: the prompt
# ids repeated, prefilled once, timed), decode t/s. Expects the staged build unpacked in .stage/h200.
set -uo pipefail
S=$PWD/.stage/h200; B=$S/bin; export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
OLD=${OLD:-llama-ab-59df27e}
for q in ${QUANTS:-q4_0}; do
  for bin in llama-ab $OLD; do
    [ -x "$B/$bin" ] || continue
    for d in ${DEPTHS:-26 512 8192}; do
      echo "-- $bin 8B $q prefill of $d"
      "$B/$bin" --model synthetic:llama3.1-8b --quantize $q --ab ${MAPPING:-warp-dp4a} -d $d -n 16 --repeats 1 \
        2>&1 >/dev/null | grep -E "memory plan|memory in use|prefilled in|tok/s" | tee -a "$OUT/issue35.txt"
    done
  done
done
