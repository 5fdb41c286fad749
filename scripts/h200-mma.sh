#!/usr/bin/env bash
# The tensor-core batch-k GEMV on the H200 (issues 35 and 36), in one call, after its GPU tests: the verify step of k
# tokens against a decode step (llama-ab --verify-k) and prompt passes kept quantized, on dp4a (--batch-mma 65) and on
# tensor cores (--batch-mma 2), same build, machine and minute; then the kernels alone (bench probes --section qbatch)
# when bench is staged. FORMATS: q4_0, q8_0, q4_k_m (synthetic 8B quantized at load); VERIFY_K; PROMPTS: prompt
# lengths for --batch-rows 0 (dequantize + cuBLAS) against passes through the batch-k GEMV. Expects .stage/h200.
set -uo pipefail
S=$PWD/.stage/h200; B=$S/bin; export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for f in ${FORMATS:-q4_0 q4_k_m}; do
  for mma in 65 2; do
    echo "-- 8B $f --batch-mma $mma: verify of k tokens vs a decode step (depth 16)"
    $B/llama-ab --model synthetic:llama3.1-8b --quantize $f --ab warp-dp4a -d 16 -n 64 --repeats 1 \
      --batch-mma $mma --verify-k ${VERIFY_K:-1,2,4,8,16,32,64} 2>&1 >/dev/null \
      | grep -E "verify of|error" | tee -a "$OUT/mma.txt"
  done
  for d in ${PROMPTS:-26 512}; do
    for run in "--batch-rows 0" "--batch-mma 65 --batch-rows 64" "--batch-mma 2 --batch-rows 64" \
               "--batch-mma 2 --batch-rows 512"; do
      echo "-- 8B $f prefill of $d: $run"
      $B/llama-ab --model synthetic:llama3.1-8b --quantize $f --ab warp-dp4a -d $d -n 4 --repeats 1 $run 2>&1 \
        >/dev/null | grep -E "prefilled in|error" | tee -a "$OUT/mma.txt"
    done
  done
done
if [ -x $B/bench ]; then
  echo "-- bench probes qbatch"
  $B/bench probes --section qbatch --qbatch-k ${QBATCH_K:-1,2,4,8,16,32,64} 2>&1 | tee "$OUT/qbatch.md" | tail -40
fi
