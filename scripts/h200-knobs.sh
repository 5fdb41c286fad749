#!/usr/bin/env bash
# Decode tuning knobs A/B on the test machine, in one call: for each MODEL (llama-ab --model arguments, ';'-separated)
# every KNOBS set (';'-separated llama-ab options; "base" = none; "@NAME opts": the staged binary NAME, e.g. an earlier
# build's llama-ab staged as llama-ab-base) runs llama-ab once, in order, then the whole list
# again in reverse unless REVERSE=0 (so drift shows as disagreement between the two passes); prints t/s, ms/token, GEMV and other
# ms/token and kernels per token per run. Expects .stage/h200 unpacked (scripts/stage-h200.sh PACK=1).
set -uo pipefail
S=$PWD/.stage/h200; B=$S/bin; export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
MODELS=${MODELS:-"synthetic:llama3.1-8b --quantize q4_0 --ab warp-dp4a"}
KNOBS=${KNOBS:-"base;--fuse-glu off"}
N=${N:-64}; REPEATS=${REPEATS:-3}
IFS=';' read -r -a models <<< "$MODELS"
IFS=';' read -r -a knobs <<< "$KNOBS"
order=("${knobs[@]}")
if [ "${REVERSE:-1}" = 1 ]; then for ((i = ${#knobs[@]} - 1; i >= 0; i--)); do order+=("${knobs[i]}"); done; fi
printf '| model | knobs | t/s | ms/token | GEMV ms | other ms | kernels/token |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |\n'
for m in "${models[@]}"; do
  for k in "${order[@]}"; do
    args=$k; [ "$k" = base ] && args=""
    bin=llama-ab; case "$args" in @*) bin=${args%% *}; bin=${bin#@}; args=${args#@$bin}; args=${args# } ;; esac
    f="$OUT/knob-$(echo "$m $k" | tr -c 'A-Za-z0-9' '_').md"
    $B/$bin --model $m $args -n "$N" --repeats "$REPEATS" > "$f" 2>"$f.err"
    row=$(grep -E "^\| [^|]+ \| [^|]+ \| tg" "$f" | head -1)
    tps=$(echo "$row" | awk -F'|' '{print $5}'); ms=$(echo "$row" | awk -F'|' '{print $6}')
    gemv=$(echo "$row" | awk -F'|' '{print $7}'); other=$(echo "$row" | awk -F'|' '{print $8}')
    kern=$(grep -A2 "kernels/token |" "$f" | tail -1 | awk -F'|' '{print $7}')
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' "${m%% --ab*}" "$k" "$tps" "$ms" "$gemv" "$other" "$kern"
    grep -E "error" "$f.err" | head -2
  done
done
