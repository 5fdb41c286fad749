#!/usr/bin/env bash
# Issue 34's Q4_K question in one call: the quantized GEMV per shape for each K-quant beside Q4_0 and Q4_1 (bench
# gemv --quant, roofline measured in the same run), each binary of BINS in turn (default: bench, and bench-base where
# staged: an earlier build), then time to first token of a 26-token prompt on synthetic 8B Q4_0 at each --batch-rows
# of ROWS. Expects .stage/h200 unpacked. Writes under $OUT.
set -uo pipefail
S=$PWD/.stage/h200; B=$S/bin; export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
QUANT=${QUANT:-q4_0,q4_1,q4_k,q5_k,q6_k}
SHAPES=${SHAPES:-14336x4096,4096x14336,6144x4096,1024x4096}
for round in 1 2; do
  for bin in ${BINS:-bench bench-base}; do
    [ -x "$B/$bin" ] || continue
    echo "-- $bin round $round"
    timeout 200 "$B/$bin" gemv --quant "$QUANT" --mappings "${MAPPINGS:-warp-dp4a,warp}" --shapes "$SHAPES" \
      --repeats 5 --json "$OUT/gemv-$bin-$round.json" 2>&1 | tee "$OUT/gemv-$bin-$round.txt" | grep -E '^\||roofline'
  done
done
for rows in ${ROWS:-}; do
  echo "-- time to first token, 8B Q4_0, --batch-rows $rows"
  timeout 150 "$B/run-llama" --model synthetic:llama3.1-8b --quantize q4_0 --prompt-ids "$(seq -s, 1000 1025)" -n 16 \
    --ignore-eos --temp 0 --device cuda --batch-rows "$rows" 2>&1 >/dev/null \
    | grep -E "load time|prompt eval|first token|  eval time|error" | tee -a "$OUT/ttft.txt"
done
