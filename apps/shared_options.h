// Options several apps share, declared once: the prompt (-p/--prompt, -f/--file and --prompt-ids, of which a run
// takes one; engine/prompt_input.h reads the file and the ids) and --kv-dtype for run-llama and llama-ab, --quantize
// for those and write-gguf, --tp for the programs that run a model (apps/engine_options.h), the speculative decoding
// options (--spec, --draft-max, --draft-min, --model-draft) for run-llama and its chat. Each app words the help for
// what it does with the value.
#pragma once
#include <string>

#include "apps/cli.h"
#include "engine/backend.h"       // EngineTuning
#include "engine/memory_plan.h"   // kQuantBatchPassMax
#include "engine/speculative.h"   // SpecMode
#include "models/quantize_model.h"  // parse_quantize_type

namespace llm::cli {

struct PromptOptions {
  std::string text;  // -p/--prompt
  std::string file;  // -f/--file: the prompt text from a file
  std::string ids;   // --prompt-ids A,B,C or @FILE
};

inline void add_prompt_options(Options& o, PromptOptions* p, const char* prompt_help, const char* ids_note) {
  o.text("-p, --prompt", "TEXT", &p->text, prompt_help);
  o.text("-f, --file", "FILE", &p->file, "read the prompt text from FILE (as llama.cpp: one trailing newline removed)");
  o.text("--prompt-ids", "A,B,C", &p->ids,
         std::string("the prompt as token ids, used as given (no BOS added); separated by commas and/or whitespace; "
                     "--prompt-ids @FILE reads them from FILE (any length)") +
             ids_note);
}

// Two prompt options given: bad usage naming the first two in the order given.
inline void check_one_prompt(const Options& o) {
  o.exclusive({"--prompt", "--file", "--prompt-ids"}, "give the prompt once");
}

// --chat-template NAME (run-llama --chat, serve-llama); pick_chat_template (chat/repl.h) checks the name.
inline Option& add_chat_template_option(Options& o, std::string* name) {
  return o.text("--chat-template", "NAME", name, "chatml, llama2, llama3 or zephyr")
      .default_is("detected from the model's template; without one, chatml when the vocabulary has <|im_start|>, "
                  "else zephyr");
}

// --quantize TYPE, checked when given (parse_quantize_type names the value and the allowed types) and kept by name.
inline Option& add_quantize_option(Options& o, std::string* type, const std::string& help) {
  const auto check_and_keep = [type](const std::string&, const std::string& t) {
    parse_quantize_type(t);
    *type = t;
  };
  return o.custom("--quantize", "TYPE", check_and_keep, help).allowed("q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, q4_k_m");
}

// --quick-quant: with --quantize, the K-quants without ggml's scale search (QuantSearch::kQuick: the same format and
// bytes per weight, ~12x faster, RMS error 1.06-1.10x the search's), for benchmarks of synthetic weights.
inline Option& add_quick_quant_option(Options& o, bool* quick) {
  return o.flag("--quick-quant", quick,
                "with --quantize: K-quants (q4_k, q5_k, q6_k, q4_k_m) without ggml's scale search, one min/max scale "
                "per sub-block: the same format and bytes per weight, ~12x faster, larger errors; for benchmarks of "
                "synthetic weights (a 70B Q4_K_M in about two minutes on 16 cores instead of ten)");
}

// The scheme of --quantize TYPE [--quick-quant] (TYPE checked when given); --quick-quant alone is bad usage.
inline QuantizeScheme quantize_scheme(const std::string& type, bool quick) {
  if (quick && type.empty()) usage_error("--quick-quant applies to --quantize only");
  QuantizeScheme s = parse_quantize_type(type);
  if (quick) s.search = QuantSearch::kQuick;
  return s;
}

// --kv-dtype T: f32, bf16 or fp8 (parse_kv_dtype); which device takes which type is the app's check.
inline Option& add_kv_dtype_option(Options& o, KvDtype* kv, const std::string& help) {
  const auto parse = [kv](const std::string& flag, const std::string& t) { *kv = parse_kv_dtype(flag, t); };
  return o.custom("--kv-dtype", "T", parse, help).allowed(kKvDtypeNames);
}

// --tp N: tensor-parallel ranks (engine/tp_plan.h, BackendOptions::tp); 1 = the ordinary path. apps/engine_options.h
// checks where it can run (tp_device_refusal) and, once the model is loaded, whether it splits (tp_refusal).
inline Option& add_tp_option(Options& o, int* tp) {
  return o.integer("--tp", "N", tp, 1, 4096,
                   "tensor parallelism over N ranks: q/k/v/gate/up split by output rows (heads whole), o and down by "
                   "input columns, the head by vocabulary; with --device cpu the ranks are simulated on the CPU "
                   "reference (each holds only its shards; a host all-reduce after o and down); on CUDA rank r runs "
                   "on GPU r mod the GPUs there are, an all-reduce over peer memory after o and down")
      .default_is("1");
}

// --spec none|lookup|draft, --draft-max N, --draft-min N, --model-draft PATH (engine/speculative.h).
struct SpecArgs {
  SpecMode mode = SpecMode::kNone;
  int draft_max = 8;
  int draft_min = 1;
  double guard = 0.0;
  std::string model_draft;
};

inline void add_spec_options(Options& o, SpecArgs* s) {
  o.section("speculative decoding");
  o.choice("--spec", "MODE", &s->mode, {"none", "lookup", "draft"},
           [](const std::string& v) { return parse_spec_mode("--spec", v); },
           "none; lookup: the longest recent n-gram (6 to 2 tokens) of the context seen before proposes what followed "
           "it; draft: a second model (--model-draft) with the same vocabulary proposes; the target verifies every "
           "draft in one pass and keeps what it agrees with (greedy output unchanged, sampling exact)")
      .default_is("none");
  o.integer("--draft-max", "N", &s->draft_max, 1, 64, "tokens drafted per step at most (the length adapts below it)");
  o.integer("--draft-min", "N", &s->draft_min, 0, 64, "the adaptive draft length's floor");
  o.real("--spec-guard", "M", &s->guard, 0.0, 100.0,
         "greedy: a verify row whose top-2 logit margin is under M does not decide its token; a decode step at its "
         "position does (a verify that sums in another order than decode then changes no token at such a row)")
      .default_is("0 (off)");
  o.text("--model-draft", "PATH", &s->model_draft, "the draft model for --spec draft (any format --model takes)");
}

// The loop's options from --draft-max, --draft-min and --spec-guard (run-llama, its chat, serve-llama and llama-ab).
inline SpecOptions spec_options(const SpecArgs& a) {
  SpecOptions so;
  so.draft_max = a.draft_max;
  so.draft_min = a.draft_min;
  so.guard = float(a.guard);
  return so;
}

// The option pairs --spec needs, as bad usage: --spec draft needs --model-draft and only it takes one, --draft-min <=
// --draft-max.
inline void check_spec_args(const SpecArgs& s) {
  if (s.mode == SpecMode::kDraft && s.model_draft.empty()) usage_error("--spec draft needs --model-draft PATH");
  if (s.mode != SpecMode::kDraft && !s.model_draft.empty()) usage_error("--model-draft needs --spec draft");
  if (s.draft_min > s.draft_max)
    usage_error("--draft-min " + std::to_string(s.draft_min) + " is above --draft-max " + std::to_string(s.draft_max));
}

// The CUDA engine's tuning and comparison knobs (EngineTuning), set from the command line only: nothing in engine/
// reads the environment. Developer options, under a section of their own at the end of --help.
inline void add_tuning_options(Options& o, EngineTuning* t) {
  o.section("developer (CUDA engine tuning)");
  o.choice("--run-ahead", "on|off", &t->run_ahead, {"on", "off"}, [](const std::string& v) { return v == "on"; },
           "the decode loop queues step t + 1 before it waits for step t's id; off: one host round trip per token "
           "(for comparison)")
      .default_is("on");
  o.integer("--grid-cap", "N", &t->persistent_max_blocks, 0, 1 << 20,
            "--decode persistent: cap its grid at N blocks (0 = as many as are resident)");
  o.integer("--cluster", "N", &t->persistent_cluster, 0, 16,
            "--decode persistent: run it as one thread-block cluster of N blocks (8 or 16) whose stages meet at the "
            "cluster barrier instead of counters in global memory (0 = off)");
  o.choice("--wide-head", "on|off", &t->cluster_split_head, {"on", "off"},
           [](const std::string& v) { return v == "on"; },
           "--cluster: the head GEMV as its own launch over every SM after the cluster's layers; off: the cluster "
           "runs it")
      .default_is("on");
  o.integer("--prefetch", "L", &t->persistent_prefetch, 0, 8,
            "--decode persistent: ask L2 for the weights L layers ahead (0 = off)");
  o.integer("--wait-timeout", "MS", &t->persistent_timeout_ms, 0, 1LL << 40,
            "--decode persistent: a step whose wait lasts longer than MS fails with an error (0 = the kernel's "
            "default)");
  o.choice("--fuse-norm", "on|off", &t->fuse_norm, {"on", "off"}, [](const std::string& v) { return v == "on"; },
           "graph path: fold each RMSNorm into the GEMV that writes the residual and the GEMV that reads the norm; "
           "off: one norm kernel each (what the fold is worth)")
      .default_is("on");
  o.choice("--fuse-glu", "on|off", &t->fuse_swiglu_q8, {"on", "off"},
           [](const std::string& v) { return v == "on"; },
           "graph path, down on warp-dp4a: SwiGLU writes its int8 form and the down GEMV copies it; off: every block "
           "of the down GEMV quantizes x itself (what the fusion is worth)")
      .default_is("on");
  o.choice("--fuse-rope", "on|off", &t->fuse_rope, {"on", "off"}, [](const std::string& v) { return v == "on"; },
           "graph path, BF16 KV cache, head_dim 64 or 128: RoPE and the KV store inside the decode attention's "
           "launch; off: a RoPE + store kernel before it (what the fold is worth)")
      .default_is("on");
  o.choice("--stage-glu", "on|off", &t->stage_glu, {"on", "off"}, [](const std::string& v) { return v == "on"; },
           "graph path, down on the quantized warp form, hidden size up to 4096: SwiGLU computed as the down GEMV "
           "stages x; off: a SwiGLU kernel before it (what the fold is worth)")
      .default_is("on");
  o.choice("--o-merge", "on|off", &t->stage_merge, {"on", "off"},
           [](const std::string& v) { return v == "on"; },
           "graph path, o on the quantized warp form: decode attention's key splits merged as the o GEMV stages x; "
           "off: a merge kernel before it (slower where measured, so off by default)")
      .default_is("off");
  o.choice("--fork-mix", "on|off", &t->fork_pieces, {"on", "off"}, [](const std::string& v) { return v == "on"; },
           "graph path, a fused group in two weight types (Q4_K_M's q|k beside a Q6_K v): the second piece on a side "
           "stream, concurrent with the first; off: one launch after the other")
      .default_is("off");
  o.choice("--norm-sums", "on|off", &t->norm_sums, {"on", "off"}, [](const std::string& v) { return v == "on"; },
           "graph path, the fold on, every norm read by a quantized warp form: each warp of the reading GEMV adds the "
           "writing GEMV's block sums itself (no last block on the writer's tail); off: the writer's last block "
           "folds them")
      .default_is("on");
  o.integer("--batch-rows", "N", &t->quant_batch_rows, 0, kQuantBatchPassMax,
            "prefill and verify passes of at most N tokens read matrices kept quantized through the batch-k GEMV "
            "(each weight once per 16 tokens with dp4a, per 64 on tensor cores); longer ones dequantize each matrix "
            "for cuBLAS; 0 = always dequantize")
      .default_is("64");
  o.choice("--fuse-pass", "on|off", &t->fuse_pass, {"on", "off"}, [](const std::string& v) { return v == "on"; },
           "prompt and verify passes through the batch-k GEMV: RMSNorm, BF16 rounding and int8 rows in one launch, "
           "q|k|v in one launch, the GEMVs launched with PDL; off: separate launches (what the fusion is worth)")
      .default_is("on");
  o.integer("--batch-mma", "N", &t->batch_mma_from, 0, kBatchMmaNever,
            "batch-k GEMV passes of N or more vectors run on int8 tensor cores, shorter ones on dp4a; "
            "0 = the built-in default, " + std::to_string(kBatchMmaNever) + " = never (for comparison)")
      .default_is("0");
  o.choice("--vfy-order", "MODE", &t->verify_order, {"auto", "decode", "pass"},
           [](const std::string& v) {
             return v == "decode" ? llm::VerifyOrder::kDecode
                                  : v == "pass" ? llm::VerifyOrder::kPass : llm::VerifyOrder::kAuto;
           },
           "speculative verify on cuda: decode = the decode step's kernels for every drafted token side by side (bit "
           "for bit decoding; the quantized warp forms and warp-r2, BF16 cache, graph path); pass = a prefill pass "
           "(each weight once, decoding up to summation order); auto: decode up to 1 GiB of weights per token")
      .default_is("auto");
  o.choice("--exact-vfy", "MODE", &t->exact_verify, {"auto", "on", "off"},
           [](const std::string& v) {
             return v == "on" ? llm::ExactVerify::kOn : v == "off" ? llm::ExactVerify::kOff : llm::ExactVerify::kAuto;
           },
           "prompt and speculative verify passes on cuda take the decode step's activations (FP32 rows; int8 where "
           "decode runs warp-dp4a) so their logits match decoding up to summation order; off: BF16-rounded rows; "
           "auto: on where matrices are kept quantized")
      .default_is("auto");
  o.integer("--bf16-rows", "N", &t->bf16_batch_rows, 0, 16,
            "with --exact-vfy on: verify passes of at most N tokens read BF16 matrices through the batched GEMV "
            "(each weight once per pass); longer ones run cuBLAS; 0 = always cuBLAS")
      .default_is("16");
  o.choice("--pass-attn", "MODE", &t->split_pass_attention, {"split", "whole"},
           [](const std::string& v) { return v == "split"; },
           "attention of prompt and verify passes of at most 32 tokens on cuda: the keys split across blocks and "
           "merged (split), or one block per KV head walking every key (whole, for comparison); MODE: split or whole")
      .default_is("split");
  o.choice("--verify-cg", "on|off", &t->verify_graph, {"on", "off"},
           [](const std::string& v) { return v == "on"; },
           "speculative decoding on cuda: capture each draft length's verify pass in a CUDA graph (at its second use) "
           "and replay it; off: eager passes (for comparison)")
      .default_is("on");
  o.flag("--all-forms", &t->persistent_all_forms,
         "--decode persistent: run quantized weights on the kernel built with every quantized form (tests, tuning)");
}

}  // namespace llm::cli
