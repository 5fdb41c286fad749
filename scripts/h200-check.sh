#!/usr/bin/env bash
# The whole GPU check on the H200 machine, in one call: GPU tests, sanitizer, HF comparison, benchmarks.
# Expects scripts/stage-h200.sh's output in .stage/h200 (carried). Writes logs under $OUT; prints a table last.
set -uo pipefail
S=$PWD/.stage/h200
export LD_LIBRARY_PATH=$S/bin:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# Tests find their data (tests/data) relative to the checkout they were built in (/work/main): recreate that path.
mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
M=$PWD/tests/data/models
step() { echo; echo "=== $* ==="; }
SMOL=models-cache/SmolLM2-135M-Instruct.Q4_1.gguf
sections=${SECTIONS:-"info gpu_tests bench"}
for sec in $sections; do
  case $sec in
    info) step info; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv; ldd $S/bin/gpu_tests | grep "not found" ;;
    gpu_tests) step gpu_tests; $S/bin/gpu_tests --gtest_brief=1 2>&1 | tee $OUT/gpu_tests.log | tail -40 ;;
    cpu_tests) step cpu_tests; $S/bin/cpu_tests --gtest_brief=1 2>&1 | tail -20 ;;
    sanitizer) step sanitizer
      F=${SAN_FILTER:-"FusedOps.*:OpsRmsnorm.*:OpsRope.*:OpsKvStore.*:OpsElementwise.*:OpsAttentionDecode.SplitsOf128And256Rows:OpsAttentionPrefill.CausalMatchesReference:OpsSample.*:Shapes/GemvShapeTest.MatchesFp64Reference/N7_K*:GemvTest.MisalignedXAndY:GemvBatchedTest.*:CudaModel.PrefillMatchesDecode"}
      for tool in ${SAN_TOOLS:-memcheck racecheck initcheck}; do
        timeout ${SAN_TIMEOUT:-150} compute-sanitizer --tool $tool --error-exitcode 9 $S/bin/gpu_tests --gtest_brief=1 \
          --gtest_filter="$F" > $OUT/san_$tool.log 2>&1; echo "$tool rc=$? (0 = clean; 9 = errors; 124 = timed out)"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/san_$tool.log | tail -3
      done ;;
    bench) step "bench gemv"; $S/bin/bench gemv --json $OUT/gemv_bench.json 2>&1 > $OUT/gemv_bench.md; grep -A100 "^| mapping" $OUT/gemv_bench.md ;;
    probes) step "gemv probes: batch and tiny K"; $S/bin/bench probes --json $OUT/probes.json 2>&1 | tee $OUT/probes.md | tail -45 ;;
    ncu) step "ncu: sectors per request and DRAM bytes"; OUT=$OUT bash tools/ncu-gemv.sh --bin $S/bin 2>&1 | tail -40 ;;
    golden) step "HF golden logits (tiny models)"
      G=/tmp/golden; rm -rf $G; mkdir -p $G
      $S/bin/make-hf-model --synthetic tiny-gqa --out $G/gqa_bf16 --dtype bf16 >/dev/null
      $S/bin/make-hf-model --synthetic tiny-gqa --out $G/gqa_f16_sharded --dtype f16 --shards 3 >/dev/null
      $S/bin/make-hf-model --synthetic tiny-gqa --out $G/gqa_f32_ropeparams --dtype f32 --rope-parameters >/dev/null
      $S/bin/make-hf-model --synthetic tiny-hd --out $G/hd_bf16_tied --dtype bf16 >/dev/null
      python3 $S/tools/hf_reference.py --out $OUT/hf_golden.json gqa_bf16=$G/gqa_bf16 gqa_f16_sharded=$G/gqa_f16_sharded \
        gqa_f32_ropeparams=$G/gqa_f32_ropeparams hd_bf16_tied=$G/hd_bf16_tied 2>&1 | grep -v Warning | tail -5 ;;
    hf8b) step "Hugging Face transformers vs our engine: synthetic llama3.1-8b written as a HF directory"
      D=/tmp/l8; IDS=${HF_IDS:-128000,791,1888,315,9822,374,12366,13,578,1888,315,9822,374,12366,13,578}
      [ -f $D/config.json ] || $S/bin/make-hf-model --synthetic llama3.1-8b --out $D --dtype bf16 --shards 4 2>&1 | tail -1
      $S/bin/run-llama --model $D --prompt-ids $IDS --dump-logits /tmp/ours.f32 --device cuda 2>&1 | tail -1
      python3 $S/tools/hf_compare.py --model $D --ids $IDS --ours /tmp/ours.f32 2>&1 | grep -v Warn | tee $OUT/hf8b.md | tail -22 ;;
    ab) step "A/B: synthetic llama3.1-8b"
      $S/bin/llama-ab --model synthetic:llama3.1-8b ${AB_MAPPINGS:+--ab $AB_MAPPINGS} \
        -n ${AB_N:-64} --repeats ${AB_REPEATS:-3} --json $OUT/ab_8b.json --csv $OUT/ab_8b.csv --chart $OUT/ab_8b.png 2>$OUT/ab_8b.err | tee $OUT/ab_8b.md
      tail -3 $OUT/ab_8b.err
      step "A/B: stories260K"
      $S/bin/llama-ab --model $M/stories260K/stories260K.bin --tokenizer $M/stories260K/tok512.model \
        --prompt "Once upon a time" ${AB_MAPPINGS:+--ab $AB_MAPPINGS} -n 128 --repeats 3 \
        --json $OUT/ab_stories.json --chart $OUT/ab_stories.png 2>$OUT/ab_stories.err | tee $OUT/ab_stories.md; tail -3 $OUT/ab_stories.err ;;
    prefill) step "prefill: synthetic llama3.1-8b, 512-token prompt (cuBLAS GEMMs + causal attention), warm, in-process"
      $S/bin/llama-ab --model synthetic:llama3.1-8b --prompt-ids "$(seq -s, 1000 1511)" --ab warp-r2 -n 4 --repeats 3 \
        2>&1 >/dev/null | grep -E "^ab: (repeat|warm)" | tee -a $OUT/prefill.txt ;;
    longctx) step "long contexts (issue 14), synthetic llama3.1-8b: attention kernels alone"
      $S/bin/bench attn --json $OUT/attn_bench.json 2>&1 | tee $OUT/attn_bench.md | tail -24
      step "prefill of 512 and 8192 tokens, warm, in-process (every repeat prefills the whole prompt)"
      for n in 512 8192; do
        seq -s, 1000 $((999 + n)) > /tmp/ids$n.txt
        $S/bin/llama-ab --model synthetic:llama3.1-8b --prompt-ids @/tmp/ids$n.txt --ab warp-r2 -n 2 --repeats 3 \
          2>&1 >/dev/null | grep -E "^ab: repeat" | tee -a $OUT/prefill_long.txt
      done
      step "decode at context depth (as llama-bench -d; 130944 + 128 steps = the model's 131072): BF16 and FP8 KV"
      for kv in ${KV_DTYPES:-bf16 fp8}; do
        for d in ${DEPTHS:-0 8192 32768 130944}; do
          $S/bin/llama-ab --model synthetic:llama3.1-8b --ab warp-r2 -d $d -n ${LONG_N:-64} --repeats 3 --kv-dtype $kv \
            --json $OUT/ab_${kv}_d$d.json 2>$OUT/ab.err > $OUT/ab_${kv}_d$d.md
          echo "kv $kv depth $d:"; grep -E "prefilled|repeat 3/3 warp" $OUT/ab.err; grep -A4 "attention ms/token" $OUT/ab_${kv}_d$d.md | tail -1
        done
      done ;;
    e2e) step "end to end: synthetic llama3.1-8b, 16-token prompt, 128 new tokens (EOS ignored), greedy"
      for m in ${MAPPINGS:-warp thread colmajor cublas}; do
        r=$($S/bin/run-llama --model synthetic:llama3.1-8b --prompt-ids "${PROMPT_IDS:-128000,791,1888,315,9822,374,12366,13,578,1888,315,9822,374,12366,13,578}" \
          -n 128 --ignore-eos --temp 0 --gemv $m 2>&1 >/dev/null | grep -E "prompt eval time|eval time" | sed 's/llama_perf_context_print: *//' | tr '\n' ' ')
        echo "$m: $r" | tee -a $OUT/e2e.txt
      done ;;
    smol_keep) step "SmolLM2: GGUF parts carried so far, kept on the machine"
      mkdir -p models-cache && for p in .stage/gguf-?/part-?; do [ -f "$p" ] && cp "$p" models-cache/; done; ls -la models-cache ;;
    smol_join) step "SmolLM2: joined"
      [ -f models-cache/part-a ] && cat models-cache/part-? > $SMOL && rm -f models-cache/part-?
      echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $SMOL" | sha256sum --check ;;
    smol) step "SmolLM2-135M-Instruct (Q4_1 GGUF -> BF16): perplexity, answers, transformers on the same file"
      P=tests/data/perplexity_paragraph.txt
      for d in cuda cpu; do $S/bin/run-llama --model $SMOL --perplexity $P --device $d 2>/dev/null | tee -a $OUT/smol.txt; done
      $S/bin/run-llama --model $SMOL --prompt "$(cat $P)" --dump-logits /tmp/smol.f32 --device cuda 2>&1 | tail -1
      pip install --quiet --no-deps --target /tmp/pylib $S/wheels/*.whl 2>&1 | tail -1
      PYTHONPATH=/tmp/pylib python3 $S/tools/hf_compare.py --model $SMOL --ids-file /tmp/smol.f32.ids --ours /tmp/smol.f32 \
        2>&1 | grep -v Warn > $OUT/smol_hf.md; tail -4 $OUT/smol_hf.md
      # The same weights on both sides (transformers' FP32 dequantized values rounded to BF16, as ours): the CPU
      # reference (FP32 math) should then agree to float rounding, the CUDA engine to its BF16 KV cache.
      for d in cpu cuda; do
        $S/bin/run-llama --model $SMOL --prompt "$(cat $P)" --dump-logits /tmp/smol_$d.f32 --device $d 2>&1 | tail -1
        PYTHONPATH=/tmp/pylib python3 $S/tools/hf_compare.py --model $SMOL --ids-file /tmp/smol_$d.f32.ids \
          --ours /tmp/smol_$d.f32 --bf16-weights 2>&1 | grep -v Warn > $OUT/smol_hf_bf16_$d.md; echo "$d:"; tail -3 $OUT/smol_hf_bf16_$d.md
      done
      step "SmolLM2 chat on the GPU (greedy)"
      printf '%s\n' "What is the capital of France?" "Name three primary colors." "Write a haiku about the sea." \
        | $S/bin/run-llama --model $SMOL --chat --temp 0 -n 96 --device cuda 2>&1 | tee $OUT/smol_chat_gpu.txt | tail -30
      step "SmolLM2 decode tokens/s per mapping (128 tokens)"
      $S/bin/llama-ab --model $SMOL --ab ${SMOL_AB:-warp-r2,warp,cublas,colmajor,thread} -n 128 --repeats 3 \
        --json $OUT/ab_smol.json 2>$OUT/ab_smol.err | tee $OUT/ab_smol.md | head -30 ;;
  esac
done
