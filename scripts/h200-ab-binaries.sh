#!/usr/bin/env bash
# A/B of two builds' llama-ab on the H200, in one call: each model's run alternates the binaries (BINS, default
# "llama-ab-base llama-ab llama-ab-base llama-ab"), so a change is measured against the build before it on the same
# machine and minute. Put the other build's llama-ab in .stage/h200/bin/llama-ab-base before packing the stage
# (scripts/stage-h200.sh). DECODE picks the decode paths (default persistent; "graph,persistent" runs both, as llama-ab
# --decode takes them); MODELS the models below. Prints one table row per run (model, mapping, test, t/s, ms/token,
# GEMV ms/token, other ms/token, GEMV GB/s), then per row of each model the median t/s of each binary and their ratio.
set -uo pipefail
S=$PWD/.stage/h200; B=$S/bin; export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
M=$PWD/tests/data/models
SMOL=${SMOL:-models-cache/SmolLM2-135M-Instruct.Q4_1.gguf}
rows=${ROWS_FILE:-$(mktemp)}  # ROWS_FILE: keep the rows (e.g. under $OUT, so a call cut short still returns them)
run() {  # tag, binary, llama-ab's arguments
  local tag=$1 bin=$2; shift 2
  local r
  r=$($B/$bin "$@" --decode "${DECODE:-persistent}" 2>/dev/null | grep -E "^\| [^|]+ \| [^|]+ \| tg" | cut -d'|' -f2-9)
  while IFS= read -r line; do [ -n "$line" ] && echo "$tag $bin $line" | tee -a "$rows"; done <<< "$r"
}
for m in ${MODELS:-stories smol tiny 8b}; do
  case $m in
    stories) A=(--model $M/stories260K/stories260K.bin --tokenizer $M/stories260K/tok512.model
                --prompt "Once upon a time" --ab warp-r2 -n 128 -r 3) ;;
    smol) A=(--model synthetic:smollm2-135m --ab warp-r2 -n 128 -r 3) ;;
    smol_q4_0) A=(--model synthetic:smollm2-135m --quantize q4_0 --ab warp,warp-dp4a -n 128 -r 3) ;;
    smol_real) A=(--model $SMOL --ab ${SMOL_AB:-warp,warp-dp4a} -n 128 -r 3) ;;
    smol_real_deq) A=(--model $SMOL --dequantize --ab ${SMOL_DEQ_AB:-warp-r2,warp} -n 128 -r 3) ;;
    tiny) A=(--model synthetic:tinyllama-1.1b --ab warp-r2 -n 128 -r 3) ;;
    8b) A=(--model synthetic:llama3.1-8b --ab warp-r2 -n 64 -r 3) ;;
    8b_all) A=(--model synthetic:llama3.1-8b -n ${N_8B:-32} -r 3) ;;  # every BF16 mapping
    8b_q4_0) A=(--model synthetic:llama3.1-8b --quantize q4_0 --ab warp,warp-dp4a -n 64 -r 3) ;;
    8b_8k) A=(--model synthetic:llama3.1-8b --ab warp-r2 -d 8192 -n 32 -r 3) ;;
    gguf) A=(--model "${GGUF:?GGUF=FILE.gguf}" --ab ${GGUF_AB:-warp,warp-dp4a} -n 64 -r 3) ;;  # e.g. from write-gguf
    *) echo "unknown model $m"; continue ;;
  esac
  for v in ${BINS:-llama-ab-base llama-ab llama-ab-base llama-ab}; do run "$m" "$v" "${A[@]}"; done
done
echo
python3 - "$rows" <<'PY'
import sys, statistics, collections
t = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    tag, binary, rest = line.split(None, 2)
    f = [x.strip() for x in rest.split('|')]
    t[(tag, f[1], f[2])][binary].append(float(f[3].split()[0].replace(',', '')))
# Columns: each binary's median t/s (llama-ab-base first, the others in name order), then each other one / base.
bins = sorted({b for by_bin in t.values() for b in by_bin}, key=lambda b: (b != 'llama-ab-base', b))
print('| model | mapping | test | ' + ' | '.join(b + ' t/s' for b in bins) + ' | ' +
      ' | '.join(b + ' / base' for b in bins[1:]) + ' |')
print('| --- | --- | --- | ' + ' | '.join('---:' for _ in bins) + ' | ' + ' | '.join('---:' for _ in bins[1:]) + ' |')
for key, by_bin in t.items():
    med = [statistics.median(by_bin[b]) if b in by_bin else float('nan') for b in bins]
    ratios = [m / med[0] if med[0] > 0 else float('nan') for m in med[1:]]
    print('| ' + ' | '.join(key) + ' | ' + ' | '.join('%.2f' % x for x in med) + ' | ' +
          ' | '.join('%.3f' % r for r in ratios) + ' |')
PY
