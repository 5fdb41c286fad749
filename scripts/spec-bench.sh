#!/usr/bin/env bash
# Speculative decoding benchmark: every prompt of bench/spec_prompts/ (input-grounded: summarise, extract, rewrite a
# given text or code) through run-llama greedily, without speculation and with --spec lookup, the same number of new
# tokens each (--ignore-eos). Prints per prompt and in total: generation tokens/s of both, the speed-up, lookup's
# acceptance rate, and whether the two outputs are the same text (greedy speculation must not change it).
#
#   scripts/spec-bench.sh [-n N] [--draft-max D] [--model PATH] [--device cpu] [--prompts DIR] [--bin DIR] [--limit K]
#                         [--engine "ARGS"]
#
# Defaults: -n 256, --draft-max 8, the default model (SmolLM2-135M-Instruct Q4_1), --device cpu (--device cuda: the
# CUDA engine's prefill-pass verify), bench/spec_prompts, build/. --limit K runs the first K prompts only. Exit status 1 when an
# output differs or a run fails. --engine "ARGS": more run-llama options for both runs (e.g. "--exact-vfy on").
set -euo pipefail
cd "$(dirname "$0")/.."

n=256 draft_max=8 model="" device=cpu prompts=bench/spec_prompts bin=build limit=0 engine=
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n="$2"; shift 2 ;;
    --draft-max) draft_max="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --prompts) prompts="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --limit) limit="$2"; shift 2 ;;
    --engine) engine="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "spec-bench: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$bin/run-llama" ] || { echo "spec-bench: $bin/run-llama not found (build it first)" >&2; exit 2; }
[ -d "$prompts" ] || { echo "spec-bench: no prompt directory $prompts" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(-n "$n" --temp 0 --ignore-eos --device "$device")
[ -n "$model" ] && args+=(--model "$model")
if [ -n "$engine" ]; then read -r -a extra <<<"$engine"; args+=("${extra[@]}"); fi

# eval ms and tokens from llama_perf's "eval time = X ms / N runs" line; drafted and accepted from the draft line.
eval_ms() { awk '/^llama_perf_context_print: +eval time =/ {print $5}' "$1"; }
eval_tokens() { awk '/^llama_perf_context_print: +eval time =/ {print $8}' "$1"; }
drafted() { sed -n 's/^draft: n_drafted = \([0-9]*\), n_accept = \([0-9]*\).*/\1 \2/p' "$1"; }

printf '%-34s %10s %10s %8s %8s %5s\n' prompt "plain t/s" "lookup t/s" speed-up accept same
tot_ms0=0 tot_ms1=0 tot_tok0=0 tot_tok1=0 tot_d=0 tot_a=0 differ=0 count=0
for f in "$prompts"/*.txt; do
  [ "$limit" -gt 0 ] && [ "$count" -ge "$limit" ] && break
  count=$((count + 1))
  name=$(basename "$f" .txt)
  "$bin/run-llama" -f "$f" "${args[@]}" --spec none >"$tmp/o0" 2>"$tmp/e0" || { cat "$tmp/e0" >&2; exit 1; }
  "$bin/run-llama" -f "$f" "${args[@]}" --spec lookup --draft-max "$draft_max" >"$tmp/o1" 2>"$tmp/e1" ||
    { cat "$tmp/e1" >&2; exit 1; }
  ms0=$(eval_ms "$tmp/e0") ms1=$(eval_ms "$tmp/e1") tok0=$(eval_tokens "$tmp/e0") tok1=$(eval_tokens "$tmp/e1")
  read -r d a <<<"$(drafted "$tmp/e1")"
  same=yes
  cmp -s "$tmp/o0" "$tmp/o1" || { same=NO; differ=1; }
  awk -v n="$name" -v m0="$ms0" -v m1="$ms1" -v t0="$tok0" -v t1="$tok1" -v d="$d" -v a="$a" -v s="$same" 'BEGIN {
    r0 = 1000 * t0 / m0; r1 = 1000 * t1 / m1
    printf "%-34s %10.2f %10.2f %7.2fx %7.1f%% %5s\n", n, r0, r1, r1 / r0, (d > 0 ? 100 * a / d : 0), s }'
  tot_ms0=$(awk -v a="$tot_ms0" -v b="$ms0" 'BEGIN {print a + b}')
  tot_ms1=$(awk -v a="$tot_ms1" -v b="$ms1" 'BEGIN {print a + b}')
  tot_tok0=$((tot_tok0 + tok0)) tot_tok1=$((tot_tok1 + tok1)) tot_d=$((tot_d + d)) tot_a=$((tot_a + a))
done
awk -v m0="$tot_ms0" -v m1="$tot_ms1" -v t0="$tot_tok0" -v t1="$tot_tok1" -v d="$tot_d" -v a="$tot_a" \
    -v c="$count" -v n="$n" -v dev="$device" 'BEGIN {
  r0 = 1000 * t0 / m0; r1 = 1000 * t1 / m1
  printf "%-34s %10.2f %10.2f %7.2fx %7.1f%%\n", "all (" c " prompts, " n " tokens, " dev ")", r0, r1, r1 / r0,
         (d > 0 ? 100 * a / d : 0)
  printf "lookup drafted %d tokens, accepted %d\n", d, a }'
[ "$differ" = 0 ] || { echo "spec-bench: greedy outputs differ with --spec lookup (the 'same' column)" >&2; exit 1; }
