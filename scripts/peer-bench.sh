#!/usr/bin/env bash
# The peer benchmark (issue 13): llama.cpp's llama-bench and our engine on the same GGUF files, one table.
#
#   scripts/peer-bench.sh fetch                 networked machine: llama.cpp's source, trimmed, packed
#   scripts/peer-bench.sh build                 GPU machine: build llama-bench from that tarball (skips if built)
#   scripts/peer-bench.sh write-synthetic DIR   GPU machine: synthetic llama3.1-8b as Q4_0, Q8_0, Q4_K_M GGUF files
#   scripts/peer-bench.sh run [--bin DIR] [--mappings LIST] GGUF...   GPU machine: both engines, one markdown table
#   scripts/peer-bench.sh --help
#
# llama.cpp's source comes as the source distribution of the Python package llama-cpp-python 0.3.36 (it vendors
# llama.cpp under vendor/llama.cpp), fetched with pip and checked against a pinned sha256. The GPU machine has no
# network: `fetch` runs here and packs what a CUDA build of llama-bench needs into .stage/llamacpp-src.tar.xz
# (git-ignored, under 30 MB), which is carried there beside the staged binaries (scripts/stage-h200.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "peer-bench: error: $*" >&2; exit 1; }
say() { echo "peer-bench: $*" >&2; }

SDIST_SPEC=llama-cpp-python==0.3.36
SDIST_FILE=llama_cpp_python-0.3.36.tar.gz
# sha256 of llama_cpp_python-0.3.36.tar.gz (76,589,250 bytes) as downloaded from PyPI on 2026-11-30 with
# `python3 -m pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36`; PyPI's simple index
# (https://pypi.org/simple/llama-cpp-python/) publishes the same digest in the file's #sha256= link.
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
TARBALL=${PEER_TARBALL:-.stage/llamacpp-src.tar.xz}
MAX_TARBALL_BYTES=$((30 * 1000 * 1000))
# Where llama.cpp is unpacked and built: an ignored path inside the tree (/build*/), so a machine that stays warm
# between calls keeps the build.
WORK=${PEER_WORK:-build-llamacpp}
LLAMA_BENCH=${PEER_LLAMA_BENCH:-$WORK/build/bin/llama-bench}
CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF
             -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=OFF
             -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON)

usage() {
  cat <<'EOF'
usage: scripts/peer-bench.sh COMMAND [ARGS]

llama.cpp's llama-bench beside our engine (llama-ab) on the same GGUF files, printed as one markdown table.

Commands:
  fetch                 (networked machine) pip-download the llama-cpp-python 0.3.36 source distribution, check its
                        pinned sha256, keep only what a CUDA build of llama-bench needs (CMake files, ggml with the CPU
                        and CUDA backends, src, include, common, vendor, tools/llama-bench, tools/quantize), pack it as
                        .stage/llamacpp-src.tar.xz (< 30 MB) with a .sha256 beside it, and check that the trimmed
                        tree configures with CMake where nvcc is found. Nothing is done when the tarball is there and
                        matches its recorded hash.
  build                 (GPU machine) unpack the tarball into build-llamacpp/ and build the llama-bench target only
                        (-DGGML_CUDA=ON, CMAKE_CUDA_ARCHITECTURES=90, tests/examples/server/app off, -j$(nproc));
                        prints the elapsed time; nothing is done when llama-bench is built from the same tarball.
  write-synthetic DIR   (GPU machine) write synthetic:llama3.1-8b as DIR/llama3.1-8b-{q4_0,q8_0,q4_k_m}.gguf with
                        our write-gguf (binaries dir below; PEER_SYNTH_TYPES="q4_0 q8_0 q4_k_m" is the list, bf16
                        writes the unquantized weights); a file that exists is kept.
  run [--bin DIR] [--mappings LIST] [--out DIR] GGUF...
                        (GPU machine) for each file: llama-bench -m F -ngl 99 -fa 1 -p 0 -n 128 -r 3 -o json (tg128),
                        then our llama-ab on the same file (128 greedy decode steps, 3 repeats, JSON with the read
                        roofline of the same run); prints one markdown table (tools/peer_table.py) and writes it with
                        every JSON and log to the output dir.
                        --mappings LIST  llama-ab --ab list (default per file: the engine's default mapping for its
                                         weights, warp for quantized projections and warp-r2 for BF16, then thread)
                        --bin DIR        our binaries (default: $OURS_BIN, else build)
                        --out DIR        results (default: $PEER_OUT, else $OUT/peer-bench when $OUT is set, else
                                         out/peer-bench)
  long GGUF [--out DIR]  (GPU machine) llama.cpp at prompt lengths and context depths (issue 14): llama-bench
                        -p 512,8192 -n 0, then -p 0 -n 128 -d D for each D of PEER_DEPTHS (default "0 8192 32768"),
                        -r PEER_TG_REPEATS (default 3); a table of tokens/s (ours: h200-check.sh longctx)
  -h, --help            this text

Environment: OURS_BIN (our binaries; the GPU machine uses .stage/h200/bin with LD_LIBRARY_PATH set by the caller),
PEER_WORK (llama.cpp work dir, default build-llamacpp), PEER_TARBALL (default .stage/llamacpp-src.tar.xz),
PEER_LLAMA_BENCH (llama-bench binary, default $PEER_WORK/build/bin/llama-bench), PEER_SDIST (a local copy of
llama_cpp_python-0.3.36.tar.gz to use instead of downloading; its sha256 is still checked).
EOF
}

GEN=()  # Ninja where there is one (the H200 machine has it)
if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi

need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH ($2)"; }

# --- fetch -------------------------------------------------------------------------------------------------------

# The tarball is current when its .sha256 file names the pinned sdist and the tarball's own hash still matches.
TRIM_VERSION=2  # 2: examples/lookup added (llama-lookup); a tarball of another trim is made again

tarball_current() {
  [ -f "$TARBALL" ] && [ -f "$TARBALL.sha256" ] || return 1
  grep -q "^# sdist $SDIST_FILE sha256 $SDIST_SHA256\$" "$TARBALL.sha256" || return 1
  grep -q "^# trim $TRIM_VERSION\$" "$TARBALL.sha256" || return 1
  (cd "$(dirname "$TARBALL")" && grep -v '^#' "$(basename "$TARBALL").sha256" | sha256sum --check --status)
}

# Keeps, from an unpacked vendor/llama.cpp ($1), what a CUDA build of llama-bench needs, in $2.
trim_tree() {
  local src=$1 dst=$2
  mkdir -p "$dst/tools" "$dst/ggml/src"
  # Top level: the CMake project, its modules, the library, its headers, the common library and the vendored
  # header libraries it links (vendor/CMakeLists.txt adds all of them unconditionally), the licences.
  cp -a "$src/CMakeLists.txt" "$src/LICENSE" "$src/cmake" "$src/include" "$src/src" "$src/common" "$src/vendor" \
        "$src/licenses" "$dst/"
  # ggml: the project, headers and CMake modules, the core sources and the two backends a CUDA build compiles (CPU
  # and CUDA). The other backends' directories (metal, vulkan, sycl, opencl, cann, musa, hip, rpc, webgpu, ...) are
  # added only when their GGML_<NAME> option is on (ggml_add_backend in ggml/src/CMakeLists.txt): dropped.
  cp -a "$src/ggml/CMakeLists.txt" "$src/ggml/cmake" "$src/ggml/include" "$dst/ggml/"
  find "$src/ggml/src" -maxdepth 1 -type f -exec cp -a {} "$dst/ggml/src/" \;
  cp -a "$src/ggml/src/ggml-cpu" "$src/ggml/src/ggml-cuda" "$dst/ggml/src/"
  # Tools: llama-bench (and llama-quantize, small, to make llama.cpp's own quantizations of a float file). Upstream's
  # tools/CMakeLists.txt adds every tool unconditionally (mtmd, tts, ...): replaced by one that adds these two.
  cp -a "$src/tools/llama-bench" "$src/tools/quantize" "$dst/tools/"
  cat > "$dst/tools/CMakeLists.txt" <<'EOF'
# Written by llama-gemv's scripts/peer-bench.sh in place of upstream's: only the tools kept in this trimmed tree.
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(llama-bench)
add_subdirectory(quantize)
EOF
  # Not needed to build (tests, app, models, docs, gguf-py, the other examples and tools are never copied:
  # LLAMA_BUILD_TESTS/APP are off).
  # llama-lookup (prompt-lookup speculative decoding), the peer of scripts/spec-bench.sh; the other examples and the
  # proofs of concept dropped (LLAMA_BUILD_EXAMPLES adds both directories).
  mkdir -p "$dst/examples" "$dst/pocs"
  cp -a "$src/examples/lookup" "$dst/examples/"
  printf '%s\n' 'find_package(Threads REQUIRED)' 'llama_add_compile_flags()' 'add_subdirectory(lookup)' \
    > "$dst/examples/CMakeLists.txt"
  : > "$dst/pocs/CMakeLists.txt"
  rm -rf "$dst/tools/llama-bench/README.md" "$dst/tools/quantize/README.md" "$dst/tools/quantize/tests.sh" \
         "$dst/examples/lookup/README.md"
}

configure_check() {
  local tree=$1 b
  if ! command -v cmake >/dev/null 2>&1 || ! command -v nvcc >/dev/null 2>&1; then
    say "configure check skipped: cmake or nvcc not found here"
    return 0
  fi
  b=$(mktemp -d /tmp/peer-configure.XXXXXX)
  if ! GIT_CEILING_DIRECTORIES=$(dirname "$tree") cmake -S "$tree" -B "$b" "${GEN[@]}" "${CMAKE_FLAGS[@]}" \
        -DLLAMA_BUILD_COMMIT=check -DLLAMA_BUILD_NUMBER=0 >"$b.log" 2>&1; then
    tail -30 "$b.log" >&2
    die "the trimmed llama.cpp tree does not configure (log: $b.log)"
  fi
  grep -q 'Including CUDA backend' "$b.log" || die "configure did not include the CUDA backend (log: $b.log)"
  [ -d "$b/tools/llama-bench" ] || die "configure has no tools/llama-bench (log: $b.log)"
  [ -d "$b/examples/lookup" ] || die "configure has no examples/lookup (log: $b.log)"
  say "configure check passed: the trimmed tree configures with CUDA (arch 90) and has the llama-bench and" \
      "llama-lookup targets"
  rm -rf "$b" "$b.log"
}

cmd_fetch() {
  [ $# -eq 0 ] || die "fetch takes no arguments"
  if tarball_current; then
    say "$TARBALL is there and matches $TARBALL.sha256 (sdist $SDIST_FILE, sha256 $SDIST_SHA256): nothing to do"
    return 0
  fi
  need python3 "pip downloads the source distribution"
  need sha256sum "the downloads are checked"
  need xz "the tarball is xz-compressed"
  FETCH_TMP=$(mktemp -d /tmp/peer-fetch.XXXXXX)
  trap 'rm -rf "$FETCH_TMP"' EXIT
  local tmp=$FETCH_TMP
  local sdist=$tmp/$SDIST_FILE
  if [ -n "${PEER_SDIST:-}" ]; then
    cp "$PEER_SDIST" "$sdist"
  else
    # pip checks the pinned hash itself (--require-hashes); the sha256sum below says so in one line either way.
    printf '%s --hash=sha256:%s\n' "$SDIST_SPEC" "$SDIST_SHA256" > "$tmp/req.txt"
    say "downloading $SDIST_SPEC (source distribution, ~77 MB) with pip"
    python3 -m pip download --quiet --no-deps --no-binary :all: --require-hashes -r "$tmp/req.txt" -d "$tmp" >&2 ||
      die "pip download of $SDIST_SPEC failed (pip says why above: network, index, or a hash other than the pinned one)"
  fi
  [ -f "$sdist" ] || die "pip did not leave $SDIST_FILE in $tmp"
  echo "$SDIST_SHA256  $sdist" | sha256sum --check --status ||
    die "$SDIST_FILE has sha256 $(sha256sum "$sdist" | cut -d' ' -f1), expected $SDIST_SHA256"
  say "sdist $SDIST_FILE: $(stat -c %s "$sdist") bytes, sha256 $SDIST_SHA256 (checked)"

  tar -xzf "$sdist" -C "$tmp"
  local top=$tmp/${SDIST_FILE%.tar.gz}
  local src=$top/vendor/llama.cpp
  if [ ! -f "$src/CMakeLists.txt" ] || [ ! -f "$src/tools/llama-bench/llama-bench.cpp" ]; then
    die "$SDIST_FILE has no vendor/llama.cpp with tools/llama-bench"
  fi
  # The sdist carries the submodule's git metadata: its HEAD names the llama.cpp commit.
  local commit
  commit=$(tr -d '\n' < "$top/.git/modules/vendor/llama.cpp/HEAD" 2>/dev/null || true)
  [[ $commit =~ ^[0-9a-f]{40}$ ]] ||
    die "cannot read the llama.cpp commit from the sdist's .git/modules (got '$commit')"

  local dst=$tmp/pack/llama.cpp
  trim_tree "$src" "$dst"
  cat > "$dst/PEER_SOURCE.txt" <<EOF
llama.cpp source for llama-gemv's peer benchmark (scripts/peer-bench.sh), trimmed from a source distribution.
sdist: $SDIST_FILE ($SDIST_SPEC from the Python package index)
sdist sha256: $SDIST_SHA256
llama.cpp commit: $commit
kept: CMakeLists.txt LICENSE cmake include src common vendor licenses tools/{llama-bench,quantize} examples/lookup
kept: ggml/{CMakeLists.txt,cmake,include}, ggml/src (its files, ggml-cpu and ggml-cuda; the other backends dropped)
changed: tools/CMakeLists.txt replaced by one that adds llama-bench and quantize only, examples/CMakeLists.txt by one
that adds lookup only, pocs/CMakeLists.txt empty
EOF
  configure_check "$dst"

  mkdir -p "$(dirname "$TARBALL")"
  # Deterministic archive: sorted names, fixed owner and times.
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2026-01-01 00:00Z' -C "$tmp/pack" -cf - llama.cpp |
    xz -9 -T1 > "$TARBALL.tmp"
  local size
  size=$(stat -c %s "$TARBALL.tmp")
  [ "$size" -lt "$MAX_TARBALL_BYTES" ] ||
    { rm -f "$TARBALL.tmp"; die "tarball is $size bytes, over $MAX_TARBALL_BYTES"; }
  mv "$TARBALL.tmp" "$TARBALL"
  {
    echo "# sdist $SDIST_FILE sha256 $SDIST_SHA256"
    echo "# trim $TRIM_VERSION"
    echo "# llama.cpp commit $commit"
    (cd "$(dirname "$TARBALL")" && sha256sum "$(basename "$TARBALL")")
  } > "$TARBALL.sha256"
  say "wrote $TARBALL: $size bytes ($(awk -v s="$size" 'BEGIN { printf "%.1f MB", s / 1e6 }')), unpacked" \
      "$(du -sb "$tmp/pack" | cut -f1) bytes, llama.cpp $commit"
  say "tarball sha256 $(cut -d' ' -f1 < <(grep -v '^#' "$TARBALL.sha256"))"
}

# --- build -------------------------------------------------------------------------------------------------------

cmd_build() {
  [ $# -eq 0 ] || die "build takes no arguments"
  [ -f "$TARBALL" ] || die "$TARBALL not found: run 'scripts/peer-bench.sh fetch' on a networked machine and carry it"
  need cmake "llama.cpp is built with CMake"
  need nvcc "llama.cpp's CUDA backend needs the CUDA toolkit"
  local tar_sha stamp=$WORK/.built-from
  tar_sha=$(sha256sum "$TARBALL" | cut -d' ' -f1)
  if [ -x "$WORK/build/bin/llama-bench" ] && [ -x "$WORK/build/bin/llama-lookup" ] &&
     [ "$(cat "$stamp" 2>/dev/null)" = "$tar_sha" ]; then
    say "llama-bench and llama-lookup already built from this tarball: $WORK/build/bin"
    return 0
  fi
  rm -rf "$WORK/llama.cpp" "$WORK/build" "$stamp"; mkdir -p "$WORK"
  tar -xJf "$TARBALL" -C "$WORK"
  local work_abs
  work_abs=$(cd "$WORK" && pwd)
  local src=$WORK/llama.cpp commit
  [ -f "$src/PEER_SOURCE.txt" ] || die "$TARBALL has no llama.cpp/PEER_SOURCE.txt: not made by 'peer-bench.sh fetch'"
  commit=$(sed -n 's/^llama.cpp commit: //p' "$src/PEER_SOURCE.txt")
  local t0=$SECONDS
  # The commit is passed in (the trimmed tree has no .git); the ceiling keeps CMake's git calls from finding the
  # enclosing repository and reporting its commit instead.
  GIT_CEILING_DIRECTORIES=$work_abs cmake -S "$src" -B "$WORK/build" "${GEN[@]}" "${CMAKE_FLAGS[@]}" \
    -DLLAMA_BUILD_COMMIT="${commit:0:7}" -DLLAMA_BUILD_NUMBER=0 > "$WORK/configure.log" 2>&1 ||
    { tail -30 "$WORK/configure.log" >&2; die "llama.cpp configure failed (log: $WORK/configure.log)"; }
  local jobs
  jobs=$(nproc)
  say "building llama-bench and llama-lookup (llama.cpp ${commit:0:7}, CUDA arch 90) with -j$jobs"
  cmake --build "$WORK/build" -j "$jobs" --target llama-bench llama-lookup > "$WORK/build.log" 2>&1 ||
    { tail -40 "$WORK/build.log" >&2; die "llama.cpp build failed (log: $WORK/build.log)"; }
  [ -x "$WORK/build/bin/llama-bench" ] || die "the build finished without $WORK/build/bin/llama-bench"
  [ -x "$WORK/build/bin/llama-lookup" ] || die "the build finished without $WORK/build/bin/llama-lookup"
  echo "$tar_sha" > "$stamp"
  say "built $WORK/build/bin/llama-bench in $((SECONDS - t0)) s (configure + build, $jobs jobs)"
}

# --- write-synthetic ---------------------------------------------------------------------------------------------

ours_bin() { echo "${OURS_BIN:-build}"; }

cmd_write_synthetic() {
  [ $# -eq 1 ] || die "write-synthetic takes one argument: the directory to write the GGUF files into"
  local dir=$1 bin
  bin=$(ours_bin)
  [ -x "$bin/write-gguf" ] || die "$bin/write-gguf not found (set OURS_BIN to our binaries' directory)"
  mkdir -p "$dir"
  local q f quant
  for q in ${PEER_SYNTH_TYPES:-q4_0 q8_0 q4_k_m}; do
    f=$dir/llama3.1-8b-$q.gguf
    if [ -s "$f" ]; then say "$f exists: kept"; continue; fi
    quant=(--quantize "$q")
    [ "$q" = bf16 ] && quant=()  # the synthetic model's own BF16 weights
    local t0=$SECONDS
    # Written under a temporary name and renamed, so an interrupted write never looks like a finished file.
    "$bin/write-gguf" --model synthetic:llama3.1-8b "${quant[@]}" --out "$dir/.partial-$q.gguf" ||
      { rm -f "$dir/.partial-$q.gguf"; die "write-gguf failed for $q"; }
    mv "$dir/.partial-$q.gguf" "$f"
    say "wrote $f ($(stat -c %s "$f") bytes) in $((SECONDS - t0)) s"
  done
}

# --- run ---------------------------------------------------------------------------------------------------------

cmd_run() {
  local bin mappings="" out=""
  bin=$(ours_bin)
  while [ $# -gt 0 ]; do
    case $1 in
      --bin) [ $# -ge 2 ] || die "--bin needs a directory"; bin=$2; shift 2 ;;
      --mappings) [ $# -ge 2 ] || die "--mappings needs a list"; mappings=$2; shift 2 ;;
      --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift 2 ;;
      --) shift; break ;;
      -*) die "run: unknown option '$1' (see --help)" ;;
      *) break ;;
    esac
  done
  [ $# -ge 1 ] || die "run needs at least one GGUF file"
  if [ -z "$out" ]; then out=${PEER_OUT:-${OUT:+$OUT/peer-bench}}; out=${out:-out/peer-bench}; fi
  [ -x "$LLAMA_BENCH" ] || die "$LLAMA_BENCH not found: run 'scripts/peer-bench.sh build' first"
  [ -x "$bin/llama-ab" ] || die "$bin/llama-ab not found (pass --bin DIR or set OURS_BIN)"
  need python3 "tools/peer_table.py joins the results"
  local f
  for f in "$@"; do [ -f "$f" ] || die "GGUF file not found: $f"; done
  mkdir -p "$out"
  local dirs=() name d m
  for f in "$@"; do
    name=$(basename "$f" .gguf)
    d=$out/$name
    mkdir -p "$d"
    python3 tools/peer_table.py gguf "$f" > "$d/gguf.json" || die "cannot read the GGUF header of $f"
    m=$mappings
    [ -n "$m" ] || m="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["default_mapping"])' \
                       "$d/gguf.json"),thread"
    say "$name: llama.cpp llama-bench tg128"
    "$LLAMA_BENCH" -m "$f" -ngl 99 -fa 1 -p 0 -n 128 -r 3 -o json > "$d/llama-bench.json" 2> "$d/llama-bench.err" ||
      { tail -5 "$d/llama-bench.err" >&2; die "llama-bench failed on $f (log: $d/llama-bench.err)"; }
    say "$name: ours, llama-ab --ab $m"
    "$bin/llama-ab" --model "$f" --ab "$m" -n 128 --repeats 3 --json "$d/ours.json" > "$d/ours.md" 2> "$d/ours.err" ||
      { tail -5 "$d/ours.err" >&2; die "llama-ab failed on $f (log: $d/ours.err)"; }
    dirs+=("$d")
  done
  python3 tools/peer_table.py table "${dirs[@]}" | tee "$out/table.md"
  say "table and every JSON and log in $out"
}

# --- long: prompt lengths and context depths (issue 14) ---------------------------------------------------------

# llama.cpp on one GGUF file (the synthetic Llama 3.1 8B in BF16, PEER_SYNTH_TYPES=bf16 write-synthetic): prompt
# processing at 512 and 8192 tokens (pp), and tg128 at each context depth of PEER_DEPTHS (as llama-ab -d); one JSON
# each and a table of tokens/s. Ours at the same lengths: scripts/h200-check.sh's longctx section.
cmd_long() {
  [ $# -ge 1 ] || die "long needs a GGUF file (and optionally --out DIR)"
  local f=$1 out=${PEER_OUT:-${OUT:+$OUT/peer-long}}; shift
  [ "${1:-}" = --out ] && { out=$2; shift 2; }
  out=${out:-out/peer-long}
  [ -f "$f" ] || die "GGUF file not found: $f"
  [ -x "$LLAMA_BENCH" ] || die "$LLAMA_BENCH not found: run 'scripts/peer-bench.sh build' first"
  mkdir -p "$out"
  say "llama.cpp llama-bench pp512, pp8192 on $(basename "$f")"
  "$LLAMA_BENCH" -m "$f" -ngl 99 -fa 1 -p 512,8192 -n 0 -r 3 -o json > "$out/llama-pp.json" 2> "$out/llama-pp.err" ||
    { tail -5 "$out/llama-pp.err" >&2; die "llama-bench pp failed (log: $out/llama-pp.err)"; }
  local d
  for d in ${PEER_DEPTHS:-0 8192 32768}; do
    say "llama.cpp llama-bench tg128 at depth $d"
    "$LLAMA_BENCH" -m "$f" -ngl 99 -fa 1 -p 0 -n 128 -d "$d" -r "${PEER_TG_REPEATS:-3}" -o json \
      > "$out/llama-tg-d$d.json" 2> "$out/llama-tg-d$d.err" ||
      { tail -5 "$out/llama-tg-d$d.err" >&2; die "llama-bench tg at depth $d failed (log: $out/llama-tg-d$d.err)"; }
  done
  python3 - "$out"/llama-pp.json "$out"/llama-tg-d*.json <<'PY' | tee "$out/table.md"
import json, sys
print("| llama.cpp test | depth | tokens/s (mean +- sd) |")
print("| --- | ---: | ---: |")
for path in sys.argv[1:]:
    for r in json.load(open(path)):
        test = f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}"
        print(f"| {test} | {r.get('n_depth', 0)} | {r['avg_ts']:.1f} +- {r['stddev_ts']:.1f} |")
PY
}

[ $# -ge 1 ] || { usage >&2; die "no command given (fetch, build, write-synthetic, run)"; }
cmd=$1; shift
case $cmd in
  fetch) cmd_fetch "$@" ;;
  build) cmd_build "$@" ;;
  write-synthetic) cmd_write_synthetic "$@" ;;
  run) cmd_run "$@" ;;
  long) cmd_long "$@" ;;
  -h|--help|help) usage ;;
  *) usage >&2; die "unknown command '$cmd'" ;;
esac
