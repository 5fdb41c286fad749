#!/usr/bin/env bash
# Speculative decoding benchmark: every prompt of bench/spec_prompts/ (input-grounded: summarise, extract, rewrite a
# given text or code) through run-llama greedily, without speculation and with --spec lookup, the same number of new
# tokens each (--ignore-eos). Prints per prompt and in total: generation tokens/s of both, the speed-up, lookup's
# acceptance rate, and whether the two outputs are the same text (greedy speculation must not change it).
#
#   scripts/spec-bench.sh [-n N] [--draft-max D] [--model PATH] [--device cpu] [--prompts DIR] [--bin DIR] [--limit K]
#                         [--engine "ARGS"] [--llama-lookup PATH]
#
# Defaults: -n 256, --draft-max 8, the default model (SmolLM2-135M-Instruct Q4_1), --device cpu (--device cuda: the
# CUDA engine's prefill-pass verify), bench/spec_prompts, build/. --limit K runs the first K prompts only. Exit status
# 1 when an output differs or a run fails; each output that differs gets a line (tools/spec_margin.py): the first
# generated token that differs and the target's top-2 margin there, teacher-forced (a near tie: under 1e-3).
# --engine "ARGS": more run-llama options for both runs (e.g. "--exact-vfy on").
# --llama-lookup PATH: llama.cpp's llama-lookup (built by scripts/peer-bench.sh build) on the same file and prompts, all
# layers on the GPU, greedy, the same -n: once with --spec-draft-n-max 0 (no drafts: its plain decode) and once with
# the same draft maximum; its decode t/s, speed-up and acceptance go in four more columns (the model must be a GGUF).
set -euo pipefail
cd "$(dirname "$0")/.."

n=256 draft_max=8 model="" device=cpu prompts=bench/spec_prompts bin=build limit=0 engine= peer=
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
    --llama-lookup) peer="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "spec-bench: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$bin/run-llama" ] || { echo "spec-bench: $bin/run-llama not found (build it first)" >&2; exit 2; }
[ -d "$prompts" ] || { echo "spec-bench: no prompt directory $prompts" >&2; exit 2; }
if [ -n "$peer" ]; then
  [ -x "$peer" ] || { echo "spec-bench: llama-lookup not found at $peer" >&2; exit 2; }
  [[ "$model" == *.gguf ]] || { echo "spec-bench: --llama-lookup needs --model FILE.gguf (the file both run)" >&2; exit 2; }
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
margs=(--device "$device")  # what a run needs beside its prompt and length (tools/spec_margin.py reruns with them)
[ -n "$model" ] && margs+=(--model "$model")
if [ -n "$engine" ]; then read -r -a extra <<<"$engine"; margs+=("${extra[@]}"); fi
args=(-n "$n" --temp 0 --ignore-eos "${margs[@]}")

# eval ms and tokens from llama_perf's "eval time = X ms / N runs" line; drafted and accepted from the draft line.
eval_ms() { awk '/^llama_perf_context_print: +eval time =/ {print $5}' "$1"; }
eval_tokens() { awk '/^llama_perf_context_print: +eval time =/ {print $8}' "$1"; }
drafted() { sed -n 's/^draft: n_drafted = \([0-9]*\), n_accept = \([0-9]*\).*/\1 \2/p' "$1"; }

# llama-lookup's decode tokens and seconds ("decoded N tokens in S seconds"), drafted and accepted (n_drafted, n_accept).
peer_run() {  # prompt file, draft maximum, log
  "$peer" -m "$model" -f "$1" -n "$n" --spec-draft-n-max "$2" -ngl 99 --temp 0 --ignore-eos \
    >"$3" 2>&1 || { tail -20 "$3" >&2; echo "spec-bench: llama-lookup failed on $1" >&2; exit 1; }
}
peer_dec() { sed -n 's/.*decoded *\([0-9]*\) tokens in *\([0-9.]*\) seconds.*/\1 \2/p' "$1" | tail -1; }
peer_count() { sed -n "s/^.*$2 *= *\([0-9]*\).*/\1/p" "$1" | tail -1; }

printf '%-34s %10s %10s %8s %8s %5s' prompt "plain t/s" "lookup t/s" speed-up accept same
[ -n "$peer" ] && printf ' %12s %12s %8s %8s' "llama.cpp" "llama-lookup" speed-up accept
printf '\n'
tot_ms0=0 tot_ms1=0 tot_tok0=0 tot_tok1=0 tot_d=0 tot_a=0 differ=0 count=0
ptot_s0=0 ptot_s1=0 ptot_t0=0 ptot_t1=0 ptot_d=0 ptot_a=0
for f in "$prompts"/*.txt; do
  [ "$limit" -gt 0 ] && [ "$count" -ge "$limit" ] && break
  count=$((count + 1))
  name=$(basename "$f" .txt)
  "$bin/run-llama" -f "$f" "${args[@]}" --spec none --dump-ids "$tmp/i0" >"$tmp/o0" 2>"$tmp/e0" ||
    { cat "$tmp/e0" >&2; exit 1; }
  "$bin/run-llama" -f "$f" "${args[@]}" --spec lookup --draft-max "$draft_max" --dump-ids "$tmp/i1" >"$tmp/o1" \
    2>"$tmp/e1" || { cat "$tmp/e1" >&2; exit 1; }
  ms0=$(eval_ms "$tmp/e0") ms1=$(eval_ms "$tmp/e1") tok0=$(eval_tokens "$tmp/e0") tok1=$(eval_tokens "$tmp/e1")
  read -r d a <<<"$(drafted "$tmp/e1")"
  same=yes
  if ! cmp -s "$tmp/o0" "$tmp/o1"; then
    same=NO differ=$((differ + 1))
    # Where the outputs part and the target's top-2 margin there (teacher-forced): a near tie or not.
    m=$(python3 tools/spec_margin.py --run-llama "$bin/run-llama" --plain "$tmp/i0" --spec "$tmp/i1" -- "${margs[@]}" \
        2>&1) || true
    echo "$name: $m" >>"$tmp/margins"
  fi
  awk -v n="$name" -v m0="$ms0" -v m1="$ms1" -v t0="$tok0" -v t1="$tok1" -v d="$d" -v a="$a" -v s="$same" 'BEGIN {
    r0 = 1000 * t0 / m0; r1 = 1000 * t1 / m1
    printf "%-34s %10.2f %10.2f %7.2fx %7.1f%% %5s", n, r0, r1, r1 / r0, (d > 0 ? 100 * a / d : 0), s }'
  if [ -n "$peer" ]; then
    peer_run "$f" 0 "$tmp/p0"
    peer_run "$f" "$draft_max" "$tmp/p1"
    read -r pt0 ps0 <<<"$(peer_dec "$tmp/p0")"
    read -r pt1 ps1 <<<"$(peer_dec "$tmp/p1")"
    pd=$(peer_count "$tmp/p1" n_drafted) pa=$(peer_count "$tmp/p1" n_accept)
    [ -n "$ps0" ] && [ -n "$ps1" ] && [ -n "$pd" ] && [ -n "$pa" ] ||
      { tail -20 "$tmp/p1" >&2; echo "spec-bench: cannot read llama-lookup's timings" >&2; exit 1; }
    awk -v t0="$pt0" -v s0="$ps0" -v t1="$pt1" -v s1="$ps1" -v d="$pd" -v a="$pa" 'BEGIN {
      r0 = t0 / s0; r1 = t1 / s1
      printf " %12.2f %12.2f %7.2fx %7.1f%%", r0, r1, r1 / r0, (d > 0 ? 100 * a / d : 0) }'
    ptot_s0=$(awk -v a="$ptot_s0" -v b="$ps0" 'BEGIN {print a + b}')
    ptot_s1=$(awk -v a="$ptot_s1" -v b="$ps1" 'BEGIN {print a + b}')
    ptot_t0=$((ptot_t0 + pt0)) ptot_t1=$((ptot_t1 + pt1)) ptot_d=$((ptot_d + pd)) ptot_a=$((ptot_a + pa))
  fi
  printf '\n'
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
if [ -n "$peer" ]; then
  awk -v s0="$ptot_s0" -v s1="$ptot_s1" -v t0="$ptot_t0" -v t1="$ptot_t1" -v d="$ptot_d" -v a="$ptot_a" 'BEGIN {
    r0 = t0 / s0; r1 = t1 / s1
    printf "llama.cpp (llama-lookup, same file and prompts): plain %.2f t/s, lookup %.2f t/s, %.2fx, accepted %.1f%% (%d of %d drafted)\n",
           r0, r1, r1 / r0, (d > 0 ? 100 * a / d : 0), a, d }'
fi
if [ "$differ" != 0 ]; then
  cat "$tmp/margins"
  ties=$(grep -c "near tie (< 0.001): yes" "$tmp/margins" || true)
  echo "spec-bench: $differ greedy outputs differ with --spec lookup (the 'same' column); $ties of them at a near tie" \
    "(teacher-forced top-2 margin under 1e-3)" >&2
  exit 1
fi
