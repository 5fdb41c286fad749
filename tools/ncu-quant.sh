#!/usr/bin/env bash
# tools/ncu-quant.sh: Nsight Compute over the quantized GEMV forms (bench gemv --quant), one cold launch per form,
# format and shape: DRAM bytes read against the bytes the form should read, global load sectors per request (what the
# lanes' addresses cost), warp instructions per weight and issue-slot use (why an INT4 kernel that loads coalesced can
# still miss the bandwidth). Runs on the H200 machine as root; clocks untouched, caches flushed before each replay.
#
#   tools/ncu-quant.sh [--bin DIR] [--out DIR] [--quant q4_0,...] [--mappings a,b] [--shapes NxK,...]
set -euo pipefail
BIN=build
OUT="${OUT:+$OUT/ncu-quant}"
OUT="${OUT:-ncu-quant-out}"
QUANT=q4_0,q8_0
MAPPINGS=warp,warp-dp4a,thread,as-stored
SHAPES=14336x4096,4096x14336
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
die() { echo "ncu-quant: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN="${2:?}"; shift 2 ;;
    --out) OUT="${2:?}"; shift 2 ;;
    --quant) QUANT="${2:?}"; shift 2 ;;
    --mappings) MAPPINGS="${2:?}"; shift 2 ;;
    --shapes) SHAPES="${2:?}"; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[ -x "$BIN/bench" ] || die "$BIN/bench not found (build it, or pass --bin DIR)"
command -v ncu >/dev/null || die "ncu (Nsight Compute) is not on the PATH"
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$OUT"
METRICS=gpu__time_duration.sum,dram__bytes_read.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
METRICS+=,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,smsp__inst_executed.sum
METRICS+=,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
: >"$OUT/runs.csv"
IFS=, read -r -a qs <<<"$QUANT"; IFS=, read -r -a ms <<<"$MAPPINGS"; IFS=, read -r -a ss <<<"$SHAPES"
for q in "${qs[@]}"; do for s in "${ss[@]}"; do for m in "${ms[@]}"; do
  case "$m" in
    warp|warp-dp4a) kn=regex:quant_gemv_warp_kernel ;;
    thread) kn=regex:quant_gemv_thread_kernel ;;
    as-stored) kn=regex:quant_gemv_as_stored ;;
    *) die "unknown mapping $m" ;;
  esac
  f="$OUT/$q-$m-$s.csv"
  # The bench prints the bytes each form reads (its JSON); skip the first launches (warm-up), profile one.
  if ncu --clock-control none --cache-control all --kernel-name "$kn" --launch-skip 4 --launch-count 1 \
       --metrics "$METRICS" --csv --page raw --print-units base \
       "$BIN/bench" gemv --quant "$q" --mappings "$m" --shapes "$s" --repeats 1 --json "$OUT/$q-$m-$s.json" \
       >"$f.raw" 2>"$OUT/$q-$m-$s.log"; then
    grep -E '^"' "$f.raw" >"$f" || true
    echo "$q,$m,$s,$f,$OUT/$q-$m-$s.json" >>"$OUT/runs.csv"
  else
    echo "ncu-quant: $q $m $s failed (log: $OUT/$q-$m-$s.log)" >&2
  fi
done; done; done
python3 "$HERE/ncu_quant_table.py" "$OUT/runs.csv" | tee "$OUT/table.md"
