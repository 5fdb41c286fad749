#!/usr/bin/env bash
# Both engines on the same files, on the GPU machine, over several calls of the device tool that keep the machine warm
# (issues 34 and 36): llama.cpp built once, the real SmolLM2 file carried in parts (a call carries at most 64 MiB), the
# synthetic 8B files written there. Everything it keeps lives under build-peers/ (an ignored path: kept between calls
# while the machine stays warm). Expects .stage/h200 unpacked (binaries in .stage/h200/bin). Writes under $OUT.
#
#   scripts/h200-peers.sh part DIR          keep DIR/part-* (one part of the split SmolLM2 file, .stage/gguf-X)
#   scripts/h200-peers.sh build             llama.cpp's llama-bench and llama-lookup (scripts/peer-bench.sh build)
#   scripts/h200-peers.sh write TYPES...    synthetic llama3.1-8b as build-peers/llama3.1-8b-TYPE.gguf (q4_0 q8_0
#                                           q4_k_m bf16), and tinyllama-1.1b-bf16 for the type "tinyllama"
#   scripts/h200-peers.sh synth NAME TYPE   synthetic:NAME (llama3.1-70b, llama3.1-8b) as build-peers/NAME-TYPE.gguf
#                                           with write-gguf --quick-quant (K-quants without the scale search: the same
#                                           format; a 70B Q4_K_M in about a minute instead of ten)
#   scripts/h200-peers.sh prefill GGUF...   prompt processing at 512 and 8192 tokens (PP_LENGTHS), llama.cpp's
#                                           llama-bench -p beside our llama-ab --prompt-ids (prefill per repeat, the
#                                           load and memory lines), one table
#   scripts/h200-peers.sh paths GGUF...     llama-ab on each file, graph and persistent for the default mapping, 128
#                                           steps, 3 repeats (no llama.cpp): the decode-path A/B alone
#   scripts/h200-peers.sh peer GGUF...      scripts/peer-bench.sh run on the files, each with its default mapping on both
#                                           decode paths (PEER_PERSISTENT=0: the graph path only) and
#                                           GGML_CUDA_GRAPH_OPT=1 for llama.cpp (its best setting)
#   scripts/h200-peers.sh spec [ARGS]       the SmolLM2 file joined from its parts, then scripts/spec-bench.sh --device
#                                           cuda on it beside llama-lookup (ARGS: more spec-bench options)
#   scripts/h200-peers.sh all               one call, ~450 s on an H100: the GPU suite (scripts/h200-verify.sh) while
#                                           llama.cpp builds and the 8B (Q4_0, Q8_0, Q4_K_M) and 70B Q4_K_M files are
#                                           written, then decode beside llama.cpp on all four, 70B at 32K of context
#                                           (memory, load, t/s), and prefill (8B pp512/pp8192, 70B pp512): the suite and
#                                           issue 35's table on one tree in one call. Needs ~60 GB of disk.
#   scripts/h200-peers.sh t34               issue 34's table without llama.cpp in one call: the files below, ours on both
#                                           decode paths on each, each fold's worth (llama.cpp: earlier calls, same kind)
#   scripts/h200-peers.sh t34a / t34b       issue 34's table in two calls on one warm machine: t34a builds llama.cpp while
#                                           the files are written (SmolLM2's shape Q4_1 and BF16, TinyLlama BF16, 8B
#                                           BF16, Q8_0, Q4_0, Q4_K_M), then each fold's worth (h200-round.sh fusion);
#                                           t34b runs peer on all of them (both decode paths)
#   scripts/h200-peers.sh draft             synthetic 8B BF16 with its Q4_0 copy drafting (--spec draft), beside plain
set -uo pipefail
cd "$(dirname "$0")/.."
S=$PWD/.stage/h200
B=$S/bin
export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
export OURS_BIN=$B
P=$PWD/build-peers
OUT=${OUT:-/tmp/out}
mkdir -p "$P" "$OUT"
SMOL=$P/SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_SHA=${SMOL_SHA:-}

die() { echo "h200-peers: $*" >&2; exit 1; }
# Issue 34's files (t34a, t34b): synthetic NAME-TYPE, written by `synth NAME TYPE`.
T34_FILES="smollm2-135m-q4_1 smollm2-135m-bf16 tinyllama-1.1b-bf16 llama3.1-8b-q4_0 llama3.1-8b-q8_0 llama3.1-8b-q4_k_m
           llama3.1-8b-bf16"

default_mapping() {  # the engine's default mapping for a GGUF file (what run-llama picks without --gemv)
  python3 tools/peer_table.py gguf "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["default_mapping"])'
}

cmd=${1:-}
shift || true
case "$cmd" in
  part)
    [ $# -eq 1 ] || die "part takes the directory of one part"
    cp "$1"/part-* "$P/" && ls -la "$P"/part-* ;;
  build)
    PEER_WORK=$P/llamacpp scripts/peer-bench.sh build ;;
  write)
    for t in "$@"; do
      if [ "$t" = tinyllama ]; then
        f=$P/tinyllama-1.1b-bf16.gguf
        [ -s "$f" ] || "$B/write-gguf" --model synthetic:tinyllama-1.1b --out "$f" || die "write-gguf tinyllama failed"
      else
        PEER_SYNTH_TYPES=$t scripts/peer-bench.sh write-synthetic "$P" || die "write-synthetic $t failed"
      fi
    done
    ls -la "$P"/*.gguf ;;
  synth)
    [ $# -eq 2 ] || die "synth takes a synthetic model name and a --quantize type"
    f=$P/$1-$2.gguf
    if [ ! -s "$f" ]; then
      t0=$SECONDS
      q=(--quantize "$2" --quick-quant)
      [ "$2" = bf16 ] && q=()  # the synthetic weights as they are (BF16)
      "$B/write-gguf" --model "synthetic:$1" "${q[@]}" --out "$P/.partial.gguf" 2>&1 | tail -2 ||
        die "write-gguf $1 $2 failed"
      mv "$P/.partial.gguf" "$f" && echo "h200-peers: wrote $f in $((SECONDS - t0)) s"
    fi
    ls -la "$f" ;;
  prefill)
    LB=$P/llamacpp/build/bin/llama-bench
    rm -f "$OUT/pp-table-rows.md"
    echo "| file | engine | pp | tokens/s | ms |" > "$OUT/prefill-table.md"
    echo "| --- | --- | ---: | ---: | ---: |" >> "$OUT/prefill-table.md"
    for f in "$@"; do
      name=$(basename "$f" .gguf)
      m=$(default_mapping "$f")
      for n in ${PP_LENGTHS:-512 8192}; do
        seq -s, 1000 $((999 + n)) > "$P/ids$n.txt"
        "$B/llama-ab" --model "$f" --ab "$m" --prompt-ids "@$P/ids$n.txt" -n 1 --repeats 2 2> "$OUT/pp-ours-$name-$n.err" \
          > /dev/null || tail -3 "$OUT/pp-ours-$name-$n.err"
        grep -iE "memory|load|plan" "$OUT/pp-ours-$name-$n.err" | head -6
        ms=$(grep -E "^ab: repeat" "$OUT/pp-ours-$name-$n.err" | sed -n 's/.*prefill [0-9]* tokens \([0-9.]*\) ms.*/\1/p' |
          sort -n | head -1)
        [ -n "$ms" ] && echo "| $name | ours ($m) | $n | $(python3 -c "print(f'{$n / $ms * 1000:.0f}')") | $ms |" \
          >> "$OUT/pp-table-rows.md"
      done
      if [ -x "$LB" ]; then
        "$LB" -m "$f" -ngl 99 -fa 1 -p "$(echo ${PP_LENGTHS:-512 8192} | tr ' ' ,)" -n 0 -r 2 -o json \
          > "$OUT/pp-llama-$name.json" 2> "$OUT/pp-llama-$name.err" || tail -3 "$OUT/pp-llama-$name.err"
        python3 -c '
import json, sys
for r in json.load(open(sys.argv[1])):
    print("| %s | llama.cpp | %d | %.0f | %.2f |" % (sys.argv[2], r["n_prompt"], r["avg_ts"], r["avg_ns"] / 1e6))
' "$OUT/pp-llama-$name.json" "$name" >> "$OUT/pp-table-rows.md" || true
      fi
    done
    cat "$OUT/pp-table-rows.md" >> "$OUT/prefill-table.md" 2>/dev/null
    cat "$OUT/prefill-table.md" ;;
  paths)
    for f in "$@"; do
      m=$(default_mapping "$f")
      echo "== $(basename "$f"): $m on both decode paths"
      "$B/llama-ab" --model "$f" --ab "$m" --decode graph,persistent -n 128 --repeats 3 2>&1 |
        tee "$OUT/paths-$(basename "$f" .gguf).txt" | grep -E "^\||error" | head -20
    done ;;
  peer)
    list=()
    for f in "$@"; do
      m=$(default_mapping "$f")
      maps="$m,$m@persistent"
      [ "${PEER_PERSISTENT:-1}" = 0 ] && maps=$m  # PEER_PERSISTENT=0: the graph path only (a 70B Q4_K_M's Q5_K v
                                                  # has no persistent form)
      PEER_WORK=$P/llamacpp GGML_CUDA_GRAPH_OPT=1 scripts/peer-bench.sh run --out "$OUT/peer-$(basename "$f" .gguf)" \
        --mappings "$maps" "$f" || echo "h200-peers: peer-bench failed on $f"
      list+=("$OUT/peer-$(basename "$f" .gguf)/$(basename "$f" .gguf)")
    done
    python3 tools/peer_table.py table "${list[@]}" | tee "$OUT/peer-table.md" ;;
  spec)
    if [ ! -s "$SMOL" ]; then
      cat "$P"/part-? > "$SMOL" || die "a part of the SmolLM2 file is missing"
    fi
    sha256sum "$SMOL"
    scripts/spec-bench.sh --device cuda --model "$SMOL" --bin "$B" --llama-lookup "$P/llamacpp/build/bin/llama-lookup" \
      "$@" 2>&1 | tee "$OUT/spec-bench.txt" ;;
  all)
    t0=$SECONDS
    el() { echo $((SECONDS - t0)); }
    (nice -n 15 "$0" build > "$OUT/llamacpp-build.log" 2>&1; echo "build rc=$? at $(el) s" >> "$OUT/llamacpp-build.log") &
    bp=$!
    (for t in q4_0 q8_0 q4_k_m; do nice -n 5 "$0" synth llama3.1-8b $t 2>&1 | tail -1; done
     nice -n 5 "$0" synth llama3.1-70b q4_k_m 2>&1 | tail -1; echo "files written at $(el) s") > "$OUT/synth.log" 2>&1 &
    sp=$!
    SUITES=1 VERIFY=0 bash scripts/h200-verify.sh > "$OUT/suite-summary.txt" 2>&1
    echo "suite done at $(el) s"
    wait $sp; cat "$OUT/synth.log"; wait $bp; tail -1 "$OUT/llamacpp-build.log"
    "$0" peer $P/llama3.1-8b-q4_0.gguf $P/llama3.1-8b-q8_0.gguf $P/llama3.1-8b-q4_k_m.gguf > "$OUT/peer8b.log" 2>&1
    cp "$OUT/peer-table.md" "$OUT/peer-table-8b.md"
    PEER_PERSISTENT=0 "$0" peer $P/llama3.1-70b-q4_k_m.gguf > "$OUT/peer70b.log" 2>&1
    cp "$OUT/peer-table.md" "$OUT/peer-table-70b.md"
    timeout 90 "$B/llama-ab" --model $P/llama3.1-70b-q4_k_m.gguf --ab warp-dp4a --ctx-size 32768 -n 64 --repeats 2 \
      2> "$OUT/ab-70b-ctx32k.err" > /dev/null
    "$0" prefill $P/llama3.1-8b-q4_0.gguf $P/llama3.1-8b-q4_k_m.gguf > "$OUT/prefill8b.log" 2>&1
    cp "$OUT/prefill-table.md" "$OUT/prefill-table-8b.md"
    PP_LENGTHS=512 "$0" prefill $P/llama3.1-70b-q4_k_m.gguf > "$OUT/prefill70b.log" 2>&1
    cp "$OUT/prefill-table.md" "$OUT/prefill-table-70b.md"
    echo "== suite"; grep -v "rc=0" "$OUT/suite.txt"; echo "suites passed: $(grep -c 'rc=0' "$OUT/suite.txt")"
    echo "== decode"; cat "$OUT/peer-table-8b.md" "$OUT/peer-table-70b.md" | grep "^| llama3"
    echo "== 70B at 32K"; grep -E "memory in use|repeat 2/2 warp|packed" "$OUT/ab-70b-ctx32k.err" | cut -c1-200
    echo "== prefill"; cat "$OUT/prefill-table-8b.md" "$OUT/prefill-table-70b.md" | grep "^| llama3"
    echo "all done at $(el) s" ;;
  t34a)  # issue 34's table, call 1 of 2 (carry .stage/h200.tar.xz and .stage/llamacpp-src.tar.xz): unpack, build
          # llama.cpp while the files are written (8B in Q4_0, Q8_0, Q4_K_M and BF16; TinyLlama BF16; SmolLM2's shape in
          # Q4_1 and BF16), then what each fold is worth on its own (scripts/h200-round.sh fusion) while the build ends
    t0=$SECONDS
    el() { echo $((SECONDS - t0)); }
    tar -xJf .stage/h200.tar.xz || die "no archive"
    (nice -n 15 "$0" build > "$OUT/llamacpp-build.log" 2>&1; echo "build rc=$? at $(el) s" >> "$OUT/llamacpp-build.log") &
    bp=$!
    for f in $T34_FILES; do "$0" synth "${f%-*}" "${f##*-}" 2>&1 | tail -1; done > "$OUT/synth.log" 2>&1
    echo "files written at $(el) s"; cat "$OUT/synth.log"
    bash scripts/h200-round.sh fusion
    echo "fusion A/B done at $(el) s"
    wait $bp; tail -1 "$OUT/llamacpp-build.log"; df -h "$P" | tail -1 ;;
  t34)  # issue 34's table without llama.cpp, one call (carry .stage/h200.tar.xz; llama.cpp's figures from earlier calls
         # on the same kind), most wanted first (a call cut short keeps what it wrote under $OUT): the decode-order
         # verify tests and BF16's verify costs, then per file (written just before) ours on both decode paths, with each
         # fold's worth after the quantized files
    t0=$SECONDS
    tar -xJf .stage/h200.tar.xz || die "no archive"
    SAN_TOOLS="memcheck racecheck synccheck" VERIFY_K=1,2,4,8,16 bash scripts/h200-round.sh tokcheck
    echo "verify costs done at $((SECONDS - t0)) s"
    for f in smollm2-135m-q4_1 llama3.1-8b-q4_0 llama3.1-8b-q4_k_m llama3.1-8b-q8_0 fusion smollm2-135m-bf16 \
             tinyllama-1.1b-bf16 llama3.1-8b-bf16; do
      if [ "$f" = fusion ]; then FUSION_BF16=0 bash scripts/h200-round.sh fusion; continue; fi
      "$0" synth "${f%-*}" "${f##*-}" 2>&1 | tail -1 >> "$OUT/synth.log"
      "$0" paths "$P/$f.gguf" | grep -E "^== |tg128" | cut -d'|' -f1-7
      cat "$OUT/paths-$f.txt" >> "$OUT/paths-all.md" && rm -f "$OUT/paths-$f.txt"
      echo "$f done at $((SECONDS - t0)) s"
    done ;;
  t34b)  # call 2 (the same warm machine): both engines on every file of t34a, ours on both decode paths
    # shellcheck disable=SC2046
    "$0" peer $(for f in $T34_FILES; do echo "$P/$f.gguf"; done) > "$OUT/peer.log" 2>&1
    grep -E "^\|" "$OUT/peer-table.md" ;;
  draft)
    bf16=$P/llama3.1-8b-bf16.gguf q4=$P/llama3.1-8b-q4_0.gguf
    [ -s "$bf16" ] && [ -s "$q4" ] || die "write bf16 and q4_0 first"
    prompt=$(cat bench/spec_prompts/01-summarise-library.txt)
    for spec in none draft; do
      extra=()
      [ $spec = draft ] && extra=(--model-draft "$q4")
      echo "== --spec $spec"
      "$B/run-llama" --model "$bf16" --prompt "$prompt" -n 128 --temp 0 --ignore-eos --spec $spec "${extra[@]}" \
        2>&1 >"$OUT/draft-$spec.out" | grep -E "eval time|draft|error" | tee "$OUT/draft-$spec.txt"
    done
    cmp -s "$OUT/draft-none.out" "$OUT/draft-draft.out" && echo "outputs: the same" || echo "outputs: DIFFER" ;;
  *) sed -n '2,/^set -uo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
