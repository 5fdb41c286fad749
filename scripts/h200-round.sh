#!/usr/bin/env bash
# One device round in three calls on one warm machine (the real SmolLM2 file rides in four parts: a call carries at most
# 64 MiB). Each call carries what its step names and writes under $OUT:
#   scripts/h200-round.sh 1   carry .stage/h200.tar.xz .stage/gguf-a: unpack, keep part a, the GPU suite (one process
#                             per suite, scripts/h200-verify.sh)
#   scripts/h200-round.sh 2   carry .stage/gguf-b .stage/gguf-c: keep them; ROUND2="..." runs more (default: the short
#                             passes' A/B, PASS_AB=1 scripts/h200-verify.sh)
#   scripts/h200-round.sh 3   carry .stage/gguf-d: join the file (sha256 checked), spec-bench on it (speed-up, and the
#                             plain run's own top-2 margin at each output that differs), then the GPU tests that need
#                             the file; ROUND3="..." runs more after them
#   scripts/h200-round.sh order-ab  after 1: this build's decode against llama-ab-base, verify costs by --vfy-order
#   scripts/h200-round.sh final     one call: the suite, lookup's tokens against plain by --vfy-order, then order-ab
#   scripts/h200-round.sh fusion    after 1: each fold of the graph path off (or on) on its own, tg128 (issue 34)
#   scripts/h200-round.sh tokcheck  one short call: the decode-order verify tests, memcheck on the small ones, BF16 costs
#   scripts/h200-round.sh cluster   the persistent kernel as one cluster: its tests, then tg128 against the counter form
#   scripts/h200-round.sh tp        the CUDA tensor-parallel engine on one GPU: tests, memcheck, --tp 2 = --tp 1 text
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
P=$PWD/build-peers; mkdir -p "$P"
SMOL=$P/SmolLM2-135M-Instruct.Q4_1.gguf
SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
B=$PWD/.stage/h200/bin
export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
# ab MODEL-ARGS OPTS...: llama-ab --ab $AB_MAP (default warp) tg128 (3 repeats) of MODEL-ARGS once per OPTS (each its
# process), one line each: t/s | ms/token and kernels per token; the reports under $OUT.
ab() {
  local m=$1 map=${AB_MAP:-warp} opts f; shift
  for opts in "$@"; do
    f=$(mktemp)
    # shellcheck disable=SC2086
    timeout 150 "$B/llama-ab" --model $m --ab "$map" $opts -n 128 --repeats 3 > "$f" 2>"$f.err" || tail -2 "$f.err"
    { echo "# $m --ab $map ${opts:-(defaults)}"; cat "$f"; } >> "$OUT/ab-reports.md"  # one file (a call returns few)
    echo "$m --ab $map ${opts:-(defaults)}: $(grep -E '^\| (synthetic|/)' "$f" | head -1 | cut -d'|' -f5,6) kernels/token$(grep -E "^\| $map \| [0-9.]+ \| [0-9.]+ \| [-+0-9.]+ \| [0-9.]+% \|" "$f" | awk -F'|' '{print $(NF-1)}')" \
      | tee -a "$OUT/ab.txt"
  done
}
case "${1:-}" in
  1)
    tar -xJf .stage/h200.tar.xz || { echo "round: no archive"; exit 1; }
    cp .stage/gguf-a/part-a "$P/"
    SUITES=1 VERIFY=0 bash scripts/h200-verify.sh ;;
  2)
    cp .stage/gguf-b/part-b .stage/gguf-c/part-c "$P/" && ls -la "$P"
    if [ -n "${ROUND2:-}" ]; then eval "$ROUND2"; else PASS_AB=1 SUITES=0 bash scripts/h200-verify.sh; fi ;;
  3)
    cp .stage/gguf-d/part-d "$P/"
    cat "$P"/part-? > "$SMOL"
    echo "$SHA  $SMOL" | sha256sum -c || exit 1
    mkdir -p models-cache && cp "$SMOL" models-cache/
    nvidia-smi --query-gpu=name --format=csv,noheader
    scripts/spec-bench.sh --device cuda --model "$SMOL" --bin "$B" 2>&1 | tee "$OUT/spec-bench.txt" | tail -40
    timeout 300 "$B/gpu_tests" --gtest_brief=1 \
      --gtest_filter='CudaSpeculative.*:CudaAbDepth.*:ChatCuda.*:PersistentDecode.*:CudaLongText.*' \
      > "$OUT/gpu-tests-smollm2.log" 2>&1
    echo "smollm2 tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]" "$OUT/gpu-tests-smollm2.log" | head
    grep -E "worst rel L2|near|margin" "$OUT/gpu-tests-smollm2.log" | grep -iv persistent | head -20
    if [ -n "${ROUND3:-}" ]; then eval "$ROUND3"; fi ;;
  stage-x)  # carry .stage/h200.tar.xz: the staged-x folds' GPU tests, then their A/B (tg128, each setting its process)
    tar -xJf .stage/h200.tar.xz || { echo "round: no archive"; exit 1; }
    nvidia-smi --query-gpu=name --format=csv,noheader
    timeout 400 "$B/gpu_tests" --gtest_brief=1 --gtest_filter="${FILTER:-QuantGemvTest.*:CudaModel.*:Attention*:CudaSpeculative.*}" \
      > "$OUT/gpu-tests.log" 2>&1
    echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]|staged as x|Failure" "$OUT/gpu-tests.log" | head -40
    ab "synthetic:smollm2-135m --quantize q4_1" "" "--stage-glu off" "--o-merge off" "--stage-glu off --o-merge off"
    ab "synthetic:llama3.1-8b --quantize q4_0" "" "--stage-glu off --o-merge off" ;;
  pass-fold)  # carry .stage/h200.tar.xz: the pass folds' GPU tests, then verify costs at depth 300 with and without
    tar -xJf .stage/h200.tar.xz || { echo "round: no archive"; exit 1; }
    nvidia-smi --query-gpu=name --format=csv,noheader
    timeout 300 "$B/gpu_tests" --gtest_brief=1 \
      --gtest_filter="${FILTER:-QuantGemvTest.Batch*:CudaQuantModel.FusedPass*:CudaSpeculative.*:CudaModel.PrefillMatchesDecode}" \
      > "$OUT/gpu-tests.log" 2>&1
    echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]|folds vs|Failure" "$OUT/gpu-tests.log" | head -30
    for o in "" "--fuse-pass off"; do
      # shellcheck disable=SC2086
      timeout 100 "$B/llama-ab" --model synthetic:smollm2-135m --quantize q4_1 --ab warp $o -d 300 -n 16 --repeats 1 \
        --verify-k 1,4,8 2>&1 >/dev/null | grep -E "verify of [0-9]+ tokens at|error" | sed "s|^|${o:-(defaults)}: |"
    done ;;
  order-ab)  # after round 1 (the stage unpacked; llama-ab-base staged, BASE_LLAMA_AB): decode speed of this build
             # against the base build (alternating, each run its process), then verify costs at depth 300 with the
             # decode-order verify and the prefill pass, on SmolLM2's shape (Q4_1, warp), TinyLlama's (Q4_0, warp) and
             # 8B Q4_0 (warp-dp4a)
    for m in "synthetic:smollm2-135m --quantize q4_1 --ab warp" "synthetic:tinyllama-1.1b --quantize q4_0 --ab warp" \
             "synthetic:llama3.1-8b --quantize q4_0 --ab warp-dp4a"; do
      for bin in llama-ab-base llama-ab llama-ab-base llama-ab; do
        case $m in *tinyllama*) continue ;; esac  # its verify costs only (where the auto rule's line falls)
        # shellcheck disable=SC2086
        timeout 120 "$B/$bin" --model $m -n 128 --repeats 3 2>/dev/null | grep -E "^\| [^|]+ \| [^|]+ \| tg" \
          | cut -d'|' -f2-7 | sed "s|^|$bin |" | tee -a "$OUT/decode-ab.txt"
      done
      for o in "--vfy-order decode" "--vfy-order pass"; do
        # shellcheck disable=SC2086
        timeout 150 "$B/llama-ab" --model $m $o -d 300 -n 16 --repeats 1 --verify-k ${VERIFY_K:-1,2,4,8,16} 2>&1 \
          >/dev/null | grep -E "verify of [0-9]+ tokens at|error" | sed "s|^|$m $o: |" | tee -a "$OUT/verify-order.txt"
      done
    done ;;
  final)  # one call, carry .stage/h200.tar.xz (a short device budget): unpack, the GPU suite, greedy lookup against
           # plain on SmolLM2's shape in each verify order (llama-ab --spec: are the tokens the plain pass's), then
           # order-ab
    tar -xJf .stage/h200.tar.xz || { echo "round: no archive"; exit 1; }
    SUITES=1 VERIFY=0 bash scripts/h200-verify.sh
    for o in "--vfy-order decode" "--vfy-order pass"; do
      # shellcheck disable=SC2086
      timeout 100 "$B/llama-ab" --model synthetic:smollm2-135m --quantize q4_1 --ab warp $o --spec lookup -d 300 \
        -n 256 --repeats 1 2>&1 >/dev/null | grep -E "ab: --spec|error" | sed "s|^|$o: |" | tee -a "$OUT/spec-ab.txt"
    done
    if [ "${FINAL_AB:-1}" = 1 ]; then bash scripts/h200-round.sh order-ab; fi ;;  # FINAL_AB=0: not it
  fusion)  # after the stage is unpacked: what each fold of the graph path is worth on its own (issue 34): the defaults,
           # then each fold off (or on, where off is the default), each setting its own process, tg128, 3 repeats
    nvidia-smi --query-gpu=name --format=csv,noheader
    AB_MAP=warp ab "synthetic:smollm2-135m --quantize q4_1" "" "--fuse-norm off" "--norm-sums off" "--fuse-rope off" \
      "--stage-glu off" "--o-merge on" "--run-ahead off"
    AB_MAP=warp-dp4a ab "synthetic:llama3.1-8b --quantize q4_0" "" "--fuse-norm off" "--norm-sums off" "--fuse-rope off" \
      "--fuse-glu off" "--run-ahead off"
    if [ "${FUSION_BF16:-1}" = 1 ]; then AB_MAP=warp-r2 ab "synthetic:llama3.1-8b" "" "--fuse-norm off" "--fuse-rope off"; fi ;;
  tokcheck)  # carry .stage/h200.tar.xz, a short budget: the decode-order verify tests (auto on warp-r2 included), the
             # small ones under compute-sanitizer (SAN_TOOLS, default memcheck), then BF16's verify costs by order on
             # SmolLM2's shape (VERIFY_K)
    [ -x "$B/gpu_tests" ] || tar -xJf .stage/h200.tar.xz || { echo "round: no archive"; exit 1; }
    nvidia-smi --query-gpu=name --format=csv,noheader
    timeout 120 "$B/gpu_tests" --gtest_brief=1 \
      --gtest_filter='CudaSpeculative.DecodeOrder*:CudaSpeculativeSanitizerSmall.*' > "$OUT/gpu-tests.log" 2>&1
    echo "decode-order tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]|Failure" "$OUT/gpu-tests.log" | head
    for tool in ${SAN_TOOLS:-memcheck}; do
      timeout 60 compute-sanitizer --tool "$tool" --error-exitcode 9 "$B/gpu_tests" --gtest_brief=1 \
        --gtest_filter='CudaSpeculativeSanitizerSmall.*' > "$OUT/san-$tool.log" 2>&1
      echo "$tool rc=$? (0 clean, 9 errors, 124 timed out): $(grep -E "ERROR SUMMARY" "$OUT/san-$tool.log" | tail -1)"
    done
    for o in "--vfy-order decode" "--vfy-order pass"; do
      # shellcheck disable=SC2086
      timeout 100 "$B/llama-ab" --model synthetic:smollm2-135m --ab warp-r2 $o -d 300 -n 16 --repeats 1 \
        --verify-k ${VERIFY_K:-1,4,8,16} 2>&1 >/dev/null | grep -E "verify of [0-9]+ tokens at|error" \
        | sed "s|^|bf16 warp-r2 $o: |" | tee -a "$OUT/verify-order.txt" | cut -c1-150
    done ;;
  tp)  # carry .stage/h200.tar.xz (issue 38 on one GPU): the CUDA tensor-parallel engine's tests with its ranks sharing
       # the GPU (eager module loading; the refusal without), memcheck on the all-reduce and a small engine test,
       # run-llama --tp 2 against --tp 1 on stories260K (the same greedy text), then what the all-reduces cost on one
       # GPU: tg of --tp 1, 2 and 4 on SmolLM2's shape (ranks on one GPU share its bandwidth: no speed-up is possible)
    [ -x "$B/gpu_tests" ] || tar -xJf .stage/h200.tar.xz || { echo "round: no archive"; exit 1; }
    nvidia-smi --query-gpu=name --format=csv,noheader
    CUDA_MODULE_LOADING=EAGER timeout 200 "$B/gpu_tests" --gtest_filter='Tp*' > "$OUT/tp-tests.log" 2>&1
    echo "tp tests (eager) rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]|Failure" "$OUT/tp-tests.log" | head
    timeout 60 "$B/gpu_tests" --gtest_filter='TpCudaEngine.WithoutEager*' > "$OUT/tp-lazy.log" 2>&1
    echo "tp refusal (lazy) rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)" "$OUT/tp-lazy.log" | head -3
    CUDA_MODULE_LOADING=EAGER timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_tests" \
      --gtest_filter='TpAllReduce.ReplayedInACudaGraphKeepsTheEpochsRight:TpCudaEngine.QuantizedShardsMatchOneGpu' \
      > "$OUT/san-tp.log" 2>&1
    echo "memcheck rc=$? (0 clean, 9 errors, 124 timed out): $(grep -E "ERROR SUMMARY" "$OUT/san-tp.log" | tail -1)"
    mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
    for n in 1 2; do
      LLM_TP_CUDA=1 timeout 60 "$B/run-llama" --model tests/data/models/stories260K/stories260K.bin \
        --tokenizer tests/data/models/stories260K/tok512.model --prompt "Once upon a time" -n 48 --temp 0 \
        --device cuda --tp $n > "$OUT/stories-tp$n.txt" 2> "$OUT/stories-tp$n.err"
      echo "stories260K --tp $n rc=$? $(tail -c 80 "$OUT/stories-tp$n.txt" | tr '\n' ' ')"
    done
    cmp -s "$OUT/stories-tp1.txt" "$OUT/stories-tp2.txt" && echo "stories260K: --tp 2 text = --tp 1 text" \
      || echo "stories260K: --tp 2 text DIFFERS"
    for n in 1 2 4; do  # SmolLM2's shape does not split over 2 or 4 (9 heads): llama 1B-like synthetic instead
      LLM_TP_CUDA=1 timeout 120 "$B/run-llama" --model "synthetic:${TP_MODEL:-tinyllama-1.1b}" --prompt-ids 1,2,3 \
        -n 128 --temp 0 --device cuda --tp $n 2>&1 >/dev/null | grep -E "eval time|error" | sed "s|^|--tp $n: |" \
        | tee -a "$OUT/tp-speed.txt"
    done ;;
  cluster)  # carry .stage/h200.tar.xz (issue 34): the persistent kernel as one thread-block cluster, its tests (bit for
            # bit the counter form on its grid; memcheck on the small one), then tg128 against the counter form and the
            # graph path on SmolLM2's shape (Q4_1 warp, BF16 warp-r2), each setting its own process (CLUSTER_AB: more)
    [ -x "$B/gpu_tests" ] || tar -xJf .stage/h200.tar.xz || { echo "round: no archive"; exit 1; }
    nvidia-smi --query-gpu=name --format=csv,noheader
    timeout 240 "$B/gpu_tests" --gtest_brief=1 \
      --gtest_filter='PersistentDecode.Cluster*:PersistentDecodeSanitizerSmall.ClusterForm' > "$OUT/cluster-tests.log" 2>&1
    echo "cluster tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]|Failure|error" "$OUT/cluster-tests.log" | head
    timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_tests" --gtest_brief=1 \
      --gtest_filter='PersistentDecodeSanitizerSmall.ClusterForm' > "$OUT/san-cluster.log" 2>&1
    echo "memcheck rc=$? $(grep -E "ERROR SUMMARY" "$OUT/san-cluster.log" | tail -1)"
    P1="--decode persistent"
    AB_MAP=warp ab "synthetic:smollm2-135m --quantize q4_1" "" "$P1" "$P1 --cluster 16 --wide-head off" \
      "$P1 --cluster 16" "$P1 --cluster 16 --prefetch 1" "$P1 --cluster 16 --prefetch 2" "$P1 --cluster 8 --prefetch 1" \
      ${CLUSTER_AB:-}
    AB_MAP=warp-r2 ab "synthetic:smollm2-135m" "" "$P1" "$P1 --cluster 16 --prefetch 2" ;;
  *) echo "usage: scripts/h200-round.sh 1|2|3|stage-x|pass-fold|order-ab|final|fusion|tokcheck|cluster" >&2; exit 2 ;;
esac
