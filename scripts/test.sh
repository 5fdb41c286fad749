#!/usr/bin/env bash
# The test command: set up, build, run every CPU test (GPU tests skip with a message where there is no GPU); then the
# CPU tests again under AddressSanitizer + UndefinedBehaviorSanitizer (CPU-only, build-asan) and a bounded run of
# every libFuzzer target (clang, build-fuzz) over a copy of its committed seed corpus.
# Knobs: LLM_SKIP_SANITIZE=1, LLM_SKIP_FUZZ=1, LLM_FUZZ_SECONDS=N (per fuzz target; default 30).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh "$@"
# Tests that need the fetched default model fail (rather than skip) when it is missing.
export LLM_REQUIRE_MODELS=1
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"$(nproc)"

# Both sanitized trees use clang: it builds them in a third of g++'s time here, and its UBSan also checks
# float-to-int conversions. -O1 keeps stack traces readable and the golden-output tests fast enough.
san_flags=(-G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo
           "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g")

if [ "${LLM_SKIP_SANITIZE:-0}" != 1 ]; then
  t0=$SECONDS
  cmake -S . -B build-asan "${san_flags[@]}" -DLLM_CUDA=OFF -DLLM_SANITIZE=ON >/dev/null
  cmake --build build-asan -j"$(nproc)" --target cpu_tests run-llama gemv-sectors llama-ab write-gguf serve-llama
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j"$(nproc)"
  echo "test: ASan/UBSan CPU suite passed ($((SECONDS - t0)) s with the build)" >&2
fi

if [ "${LLM_SKIP_FUZZ:-0}" != 1 ]; then
  t0=$SECONDS
  targets=(fuzz_safetensors fuzz_hf_config fuzz_llama2c fuzz_tokenizer fuzz_gguf fuzz_bpe fuzz_server_request)
  cmake -S . -B build-fuzz "${san_flags[@]}" -DLLM_FUZZ=ON >/dev/null
  cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}"
  secs=${LLM_FUZZ_SECONDS:-30}
  work=build-fuzz/fuzz-work  # corpus copies, logs and crash artifacts; the committed corpus is never written
  rm -rf "$work"
  failed=()
  for t in "${targets[@]}"; do
    mkdir -p "$work/$t/tmp"
    cp -r "tests/fuzz/corpus/$t" "$work/$t/corpus"
    rc=0
    TMPDIR=$PWD/$work/$t/tmp build-fuzz/tests/fuzz/$t -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="$work/$t/" "$work/$t/corpus" >"$work/$t/log" 2>&1 || rc=$?
    rm -rf "$work/$t/tmp"
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t/log")
    if [ "$rc" -eq 0 ]; then
      printf 'fuzz: %-17s %4s s  %9s executions  clean\n' "$t" "$secs" "${runs:-?}" >&2
    else
      failed+=("$t")
      printf 'fuzz: %-17s FAILED (exit %d); log %s, reproducer(s):\n' "$t" "$rc" "$work/$t/log" >&2
      { ls "$work/$t"/crash-* "$work/$t"/timeout-* "$work/$t"/oom-* "$work/$t"/leak-* 2>/dev/null || true; } >&2
      grep -E "FINDING|ERROR|runtime error|SUMMARY" "$work/$t/log" | head -5 | cut -c1-300 >&2 || true
    fi
  done
  echo "test: fuzz smoke took $((SECONDS - t0)) s with the build" >&2
  if ((${#failed[@]})); then
    echo "test: fuzz targets with findings: ${failed[*]} (add each reproducer to tests/fuzz/corpus/<target>/ as" \
         "regress-NAME together with the fix)" >&2
    exit 1
  fi
fi
