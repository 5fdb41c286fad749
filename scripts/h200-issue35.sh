#!/usr/bin/env bash
# Issue 35 on the H200, in one call: what a model holds on the GPU and what its prefill and decode cost, this build
# against an earlier one (OLD=llama-ab binary name in .stage/h200/bin, default llama-ab-59df27e: the BF16 copy kept),
# same machine and minute. FORMATS: q4_0, q8_0, q4_k_m (synthetic 8B quantized at load) or bf16; DEPTHS: prompt lengths
# (llama-ab -d: the prompt ids repeated, prefilled once, timed). BIG=1 instead runs synthetic 70B (FORMATS as above)
# with run-llama: memory plan, memory in use, prompt eval and decode of 32 tokens. Expects .stage/h200 unpacked.
set -uo pipefail
S=$PWD/.stage/h200; B=$S/bin; export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
OLD=${OLD:-llama-ab-59df27e}
qarg() { [ "$1" = bf16 ] && echo "" || echo "--quantize $1"; }
if [ "${BIG:-0}" = 1 ]; then
  for f in ${FORMATS:-q4_0}; do
    echo "-- 70B $f"
    /usr/bin/time -f "wall %e s, max RSS %M KB" $B/run-llama --model synthetic:llama3.1-70b $(qarg $f) \
      --prompt-ids "$(seq -s, 1000 1025)" -n 32 --ignore-eos --temp 0 --device cuda 2>&1 >/dev/null \
      | grep -E "memory plan|memory in use|ctx_size|load time|prompt eval|first token|  eval time|error|wall" \
      | tee -a "$OUT/issue35_70b.txt"
  done
  exit 0
fi
for f in ${FORMATS:-q4_0 bf16}; do
  map=warp-dp4a; [ "$f" = bf16 ] && map=warp-r2
  for bin in llama-ab $OLD; do
    [ -x "$B/$bin" ] || continue
    for d in ${DEPTHS:-26 512 8192}; do
      echo "-- $bin 8B $f prefill of $d"
      "$B/$bin" --model synthetic:llama3.1-8b $(qarg $f) --ab $map -d $d -n 16 --repeats 1 \
        2>&1 >/dev/null | grep -E "memory plan|memory in use|prefilled in|tok/s" | tee -a "$OUT/issue35.txt"
    done
  done
done
