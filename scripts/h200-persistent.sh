#!/usr/bin/env bash
# Issue 15's figures on the H200, in one call: llama-ab's graph vs persistent run per model (tokens/s beside the
# ceiling, GEMV GB/s beside the roofline measured in the same run, and each token's time budget), BF16 and quantized.
# Expects scripts/stage-h200.sh's output in .stage/h200 (carried); the SmolLM2 sections expect the GGUF joined in
# models-cache/ (scripts/h200-check.sh smol_keep / smol_join). Logs, markdown and JSON under $OUT; a short table last.
# SECTIONS picks what runs (default below); each llama-ab run takes 30-90 s.
set -uo pipefail
S=$PWD/.stage/h200
export LD_LIBRARY_PATH=$S/bin:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
M=$PWD/tests/data/models
SMOL=models-cache/SmolLM2-135M-Instruct.Q4_1.gguf
ran=()
ab() {  # tag, then llama-ab's arguments
  local tag=$1; shift
  echo "=== $tag: llama-ab $* --decode graph,persistent"
  $S/bin/llama-ab "$@" --decode graph,persistent --json "$OUT/$tag.json" > "$OUT/$tag.md" 2> "$OUT/$tag.err" ||
    { echo "llama-ab failed:"; tail -3 "$OUT/$tag.err"; return; }
  ran+=("$tag")
}
for sec in ${SECTIONS:-stories smol tiny 8b 8b_q4_0 8b_8k}; do
  case $sec in
    stories) ab stories --model $M/stories260K/stories260K.bin --tokenizer $M/stories260K/tok512.model \
               --prompt "Once upon a time" --ab warp-r2 -n 128 -r 5 ;;
    smol) ab smollm2_shape --model synthetic:smollm2-135m --ab warp-r2 -n 128 -r 5 ;;
    tiny) ab tinyllama_shape --model synthetic:tinyllama-1.1b --ab warp-r2 -n 128 -r 5 ;;
    8b) ab llama8b --model synthetic:llama3.1-8b --ab warp-r2 -n 64 -r 3 ;;
    8b_q4_0) ab llama8b_q4_0 --model synthetic:llama3.1-8b --quantize q4_0 --ab warp,warp-dp4a -n 64 -r 3 ;;
    8b_8k) ab llama8b_8k --model synthetic:llama3.1-8b --ab warp-r2 -d 8192 -n 64 -r 3 ;;
    smol_q4_0) ab smollm2_shape_q4_0 --model synthetic:smollm2-135m --quantize q4_0 --ab warp,warp-dp4a -n 128 -r 5 ;;
    smol_q4_1) ab smollm2_q4_1 --model $SMOL --ab warp,warp-dp4a -n 128 -r 5 ;;
    smol_bf16) ab smollm2_bf16 --model $SMOL --dequantize --ab warp-r2 -n 128 -r 5 ;;
    *) echo "unknown section $sec" ;;
  esac
done
echo
echo "=== summary: t/s (GEMV GB/s) per entry; time budget: profiled device ms / measured ms"
for tag in "${ran[@]}"; do
  python3 - "$OUT/$tag.json" "$tag" <<'EOF'
import json, statistics, sys
d = json.load(open(sys.argv[1]))["data"]
roof = statistics.median(d["roofline_gbps"])
line = f"{sys.argv[2]:16s} roofline {roof:5.0f} GB/s"
for r in d["runs"]:
    ms = statistics.median(r["ms_per_token"])
    dev = statistics.median(sum(p) for p in r["part_ms"])
    line += f" | {r['mapping']}: {1e3 / ms:7.1f} t/s, budget {dev:.3f}/{ms:.3f} ms ({100 * dev / ms:.1f}%)"
print(line)
EOF
done
