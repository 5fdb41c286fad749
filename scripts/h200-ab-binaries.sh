#!/usr/bin/env bash
# A/B of two builds' llama-ab on the H200, in one call: each model's run alternates the binaries (BINS, default
# "llama-ab-base llama-ab llama-ab-base llama-ab"), so a kernel change is measured against the build before it on the
# same machine and minute. Put the other build's llama-ab in .stage/h200/bin/llama-ab-base before packing the stage
# (scripts/stage-h200.sh). DECODE picks the decode path (default persistent); MODELS the models below. Prints one
# table row per run (model, mapping, test, t/s, ms/token, GEMV ms/token, other ms/token, GEMV GB/s).
set -uo pipefail
S=$PWD/.stage/h200; B=$S/bin; export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
M=$PWD/tests/data/models
run() {  # tag, binary, llama-ab's arguments
  local tag=$1 bin=$2; shift 2
  local r
  r=$($B/$bin "$@" --decode "${DECODE:-persistent}" 2>/dev/null | grep -E "^\| [^|]+ \| [^|]+ \| tg" | cut -d'|' -f2-9 |
    tr '\n' ' ')
  echo "$tag $bin $r"
}
for m in ${MODELS:-stories smol tiny 8b}; do
  case $m in
    stories) A=(--model $M/stories260K/stories260K.bin --tokenizer $M/stories260K/tok512.model
                --prompt "Once upon a time" --ab warp-r2 -n 128 -r 3) ;;
    smol) A=(--model synthetic:smollm2-135m --ab warp-r2 -n 128 -r 3) ;;
    smol_q4_0) A=(--model synthetic:smollm2-135m --quantize q4_0 --ab warp,warp-dp4a -n 128 -r 3) ;;
    tiny) A=(--model synthetic:tinyllama-1.1b --ab warp-r2 -n 128 -r 3) ;;
    8b) A=(--model synthetic:llama3.1-8b --ab warp-r2 -n 64 -r 3) ;;
    8b_q4_0) A=(--model synthetic:llama3.1-8b --quantize q4_0 --ab warp,warp-dp4a -n 64 -r 3) ;;
    8b_8k) A=(--model synthetic:llama3.1-8b --ab warp-r2 -d 8192 -n 32 -r 3) ;;
    *) echo "unknown model $m"; continue ;;
  esac
  for v in ${BINS:-llama-ab-base llama-ab llama-ab-base llama-ab}; do run "$m" "$v" "${A[@]}"; done
done
