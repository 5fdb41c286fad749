#!/usr/bin/env bash
# tools/sanitize-attention.sh: compute-sanitizer over the attention kernels on small shapes: memcheck (out-of-bounds
# and misaligned accesses), racecheck (shared-memory hazards) and synccheck (barriers in divergent code), each over
# gpu_tests --gtest_filter='*Attention*Small*' (tests/gpu/attention_test.cu: AttentionSanitizerSmall.*, decode and
# prefill at head_dim 64, 128, 24 and 80, contexts <= 300). Runs on the GPU machine; exits non-zero when a tool reports
# an error, a test fails or is skipped (no GPU), no test matches, or a tool cannot run. Logs under OUT.
#
#   tools/sanitize-attention.sh [--bin DIR] [--out DIR] [--filter PATTERN] [--tools memcheck,racecheck,synccheck]
#
# Binaries: --bin DIR, else $BUILD_DIR, else .stage/h200/bin (scripts/stage-h200.sh) where it holds gpu_tests, else
# build. SAN_TIMEOUT: seconds per tool (default 1200).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
BIN=""
OUT="${OUT:+$OUT/sanitize-attention}"
OUT="${OUT:-sanitize-attention-out}"
FILTER='*Attention*Small*'
TOOLS=memcheck,racecheck,synccheck
die() { echo "sanitize-attention: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN="${2:?}"; shift 2 ;;
    --out) OUT="${2:?}"; shift 2 ;;
    --filter) FILTER="${2:?}"; shift 2 ;;
    --tools) TOOLS="${2:?}"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
if [ -z "$BIN" ]; then
  if [ -n "${BUILD_DIR:-}" ]; then BIN="$BUILD_DIR/tests"; [ -x "$BIN/gpu_tests" ] || BIN="$BUILD_DIR"
  elif [ -x "$ROOT/.stage/h200/bin/gpu_tests" ]; then BIN="$ROOT/.stage/h200/bin"
  else BIN="$ROOT/build/tests"
  fi
fi
[ -x "$BIN/gpu_tests" ] || die "$BIN/gpu_tests not found (build it, or pass --bin DIR)"
command -v compute-sanitizer >/dev/null || die "compute-sanitizer is not on the PATH"
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$OUT" || die "cannot create $OUT"

n_tests=$("$BIN/gpu_tests" --gtest_list_tests --gtest_filter="$FILTER" | grep -c '^  ')
[ "$n_tests" -gt 0 ] || die "no test matches --gtest_filter='$FILTER'"
echo "sanitize-attention: $n_tests tests ($FILTER) from $BIN/gpu_tests; logs in $OUT"

failed=0
IFS=, read -r -a tools <<<"$TOOLS"
for tool in "${tools[@]}"; do
  case "$tool" in memcheck|racecheck|synccheck|initcheck) ;; *) die "unknown tool '$tool'" ;; esac
  log="$OUT/$tool.log"
  timeout "${SAN_TIMEOUT:-1200}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
    "$BIN/gpu_tests" --gtest_filter="$FILTER" >"$log" 2>&1
  rc=$?
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\.$/\1/p' "$log" | tail -1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}[,.].*/\1/p' "$log" | tail -1)
  summary=$(grep -E '(ERROR|RACECHECK|SYNCCHECK) SUMMARY' "$log" | tail -1)
  verdict=clean
  if [ "$rc" -eq 9 ]; then verdict="errors reported"
  elif [ "$rc" -eq 124 ]; then verdict="timed out after ${SAN_TIMEOUT:-1200} s"
  elif [ "$rc" -ne 0 ]; then verdict="exit status $rc (a test failed, or the tool could not run)"
  elif [ "${passed:-0}" -ne "$n_tests" ]; then verdict="${passed:-0} of $n_tests tests passed (${skipped:-0} skipped)"
  fi
  echo "$tool: $verdict; ${summary:-no summary line}  [$log]"
  if [ "$verdict" != clean ]; then
    failed=1
    grep -E '^=+ (Invalid|Race|Barrier|Error|.*hazard)|^\[  FAILED  \]|Failure' "$log" | head -20
  fi
done
exit "$failed"
