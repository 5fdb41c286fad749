#!/usr/bin/env bash
# tools/ncu-gemv.sh: Nsight Compute over one GEMV launch per mapping and Llama 3.1 8B projection shape (the workload is
# `bench profile-target`, measure/bench/profile_section.cu), printed beside the sector model's prediction (apps/gemv-sectors) by tools/ncu_table.py:
# sectors per request, DRAM bytes read, L2 sectors read by L1 (when the metric exists), kernel time.
# Runs on the H200 machine, as root (hardware counters); clocks are never touched (--clock-control none) and caches
# are flushed before every replay pass (--cache-control all), so DRAM bytes are those of a cold launch.
#
#   tools/ncu-gemv.sh [--bin DIR] [--out DIR] [--mappings a,b,...] [--shapes NxK,...]
#     --bin DIR   where bench and gemv-sectors are (default: build)
#     --out DIR   report, CSVs and the table go here (default: $OUT/ncu-gemv where $OUT is set, else ncu-gemv-out)
#     --mappings  default: bench profile-target's, every mapping of the registry (core/gemv_table.h) in its order
set -euo pipefail

BIN=build
OUT="${OUT:+$OUT/ncu-gemv}"  # the device machine's $OUT comes back to the caller
OUT="${OUT:-ncu-gemv-out}"
MAPPINGS=""  # "" = bench profile-target's default: every registered mapping
SHAPES=4096x4096,1024x4096,14336x4096,4096x14336,128256x4096
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

die() { echo "ncu-gemv: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN="${2:?--bin needs a directory}"; shift 2 ;;
    --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
    --mappings) MAPPINGS="${2:?--mappings needs a list}"; shift 2 ;;
    --shapes) SHAPES="${2:?--shapes needs a list}"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

for exe in bench gemv-sectors; do
  [ -x "$BIN/$exe" ] || die "$BIN/$exe not found or not executable (build it, or pass --bin DIR)"
done
command -v ncu >/dev/null || die "ncu (Nsight Compute) is not on the PATH"
command -v python3 >/dev/null || die "python3 is not on the PATH"
[ "$(id -u)" -eq 0 ] || echo "ncu-gemv: warning: not root; ncu may be refused the counters (ERR_NVGPUCTRPERM)" >&2
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # libsentencepiece.so.0 may sit beside the binaries
mkdir -p "$OUT"

# One metric list, so ncu needs as few replay passes as it can. L2 sectors read on behalf of L1 tell "L1 kept the
# sector until the next lane asked" (L2 reads ~ matrix) from "L2 served every re-fetch" (L2 reads ~ sectors x 32 B).
METRICS=l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
METRICS+=,dram__bytes_read.sum,gpu__time_duration.sum,launch__grid_size
ncu --query-metrics >"$OUT/metrics.txt" 2>&1 || true  # to a file: grep -q on a pipe would SIGPIPE ncu under pipefail
if grep -qw lts__t_sectors_srcunit_tex_op_read "$OUT/metrics.txt"; then
  METRICS+=,lts__t_sectors_srcunit_tex_op_read.sum
else
  echo "ncu-gemv: lts__t_sectors_srcunit_tex_op_read not listed by ncu --query-metrics: L2 column left out" >&2
fi

start=$(date +%s)
echo "ncu-gemv: profiling ${MAPPINGS:-every mapping} over $SHAPES (log: $OUT/ncu.log)" >&2
if ! ncu --clock-control none --cache-control all --replay-mode kernel --profile-from-start off \
    --metrics "$METRICS" -f -o "$OUT/gemv" \
    "$BIN/bench" profile-target ${MAPPINGS:+--mappings "$MAPPINGS"} --shapes "$SHAPES" --manifest "$OUT/manifest.csv" \
    >"$OUT/ncu.log" 2>&1; then
  tail -n 30 "$OUT/ncu.log" >&2
  die "ncu failed (full log: $OUT/ncu.log)"
fi
ncu --import "$OUT/gemv.ncu-rep" --csv --page raw --print-units base >"$OUT/ncu.csv"
echo "ncu-gemv: profiled in $(( $(date +%s) - start )) s; predicting" >&2

: >"$OUT/sectors.jsonl"
: >"$OUT/sectors.err"
# The mappings profiled, in order, from the manifest (id,mapping,N,K,...): the default list is the program's.
mapfile -t mapping_list < <(tail -n +2 "$OUT/manifest.csv" | cut -d, -f2 | awk '!seen[$0]++')
IFS=, read -r -a shape_list <<<"$SHAPES"
for m in "${mapping_list[@]}"; do
  for s in "${shape_list[@]}"; do
    # A mapping the sector model does not describe (warp-r2) gets no prediction; the table says so.
    "$BIN/gemv-sectors" --mapping "$m" --shape "$s" --dtype bf16 --json >>"$OUT/sectors.jsonl" 2>>"$OUT/sectors.err" ||
      echo "ncu-gemv: no sector prediction for $m $s (see $OUT/sectors.err)" >&2
  done
done

python3 "$HERE/ncu_table.py" --ncu-csv "$OUT/ncu.csv" --manifest "$OUT/manifest.csv" \
  --sectors "$OUT/sectors.jsonl" --json "$OUT/table.json" | tee "$OUT/table.md"
echo "ncu-gemv: done in $(( $(date +%s) - start )) s; table in $OUT/table.md, raw counters in $OUT/ncu.csv" >&2
