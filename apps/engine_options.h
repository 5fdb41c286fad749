// The engine's options, declared once for every program that runs a model (run-llama, serve-llama): the model and
// its context (section "model") and where and how it runs (section "device": --device, --gemv, --decode,
// --dequantize, --quantize, --dtype, --kv-dtype, --tp and the CUDA tuning knobs); then the checks that need the device
// and the one way a backend is made from them, and --spec's drafter (run-llama and serve-llama). Header-only: each app is one translation unit.
#pragma once
#include <cstdio>
#include <cstdlib>  // setenv
#include <memory>
#include <string>

#include "apps/cli.h"
#include "apps/shared_options.h"   // --quantize, --kv-dtype, the tuning options
#include "core/gemv_table.h"       // gemv_mapping_lines
#include "engine/backend.h"
#include "engine/gemv_choice.h"    // gemv_plan, gemv_refusal, decode_path_refusal, quant_summary
#include "engine/speculative.h"    // --spec: LookupDrafter, DraftModelDrafter, draft_vocab_mismatch
#include "engine/tp_plan.h"        // --tp: tp_refusal
#include "models/default_model.h"
#include "models/model.h"
#include "models/quantize_model.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace llm::cli {

struct EngineOptions {
  std::string model, tokenizer, gemv, dtype;
  int ctx_size = 0;
  bool dequantize = false;                 // --dequantize: GGUF quantized weights as BF16 on the GPU
  std::string device_arg = "auto";         // --device cpu|cuda|auto, as given
  ResolvedDevice device;                   // ... resolved once (auto: cuda when a device is present), what runs
  DecodePath decode = kDefaultDecodePath;  // --decode graph|persistent (CUDA)
  KvDtype kv_dtype = KvDtype::Default;     // --kv-dtype f32|bf16|fp8 (Default: f32 on cpu, bf16 on cuda)
  bool quick_quant = false;                // --quick-quant: --quantize without the K-quants' scale search
  std::string quantize;                    // --quantize q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q6_k|q4_k_m: quantize at load
  int tp = 1;                              // --tp N: tensor-parallel ranks (simulated on the CPU)
  EngineTuning tuning;                     // the developer options (--run-ahead, --grid-cap, ...)
};

static_assert(kDefaultCtxCap == 8192 && kDefaultCudaCtxCap == 131072, "the --ctx-size help below states the caps");
static_assert(kKvFp8Block == 32, "the --kv-dtype help below states the FP8 block");

// Section "model": --model, --tokenizer, --ctx-size.
inline void add_model_options(Options& o, EngineOptions& a) {
  o.section("model");
  o.text("-m, --model", "PATH", &a.model, "GGUF file, Hugging Face directory, llama2.c .bin, or synthetic:NAME")
      .default_is("SmolLM2-135M-Instruct, fetched into models-cache/ by scripts/setup.sh");
  o.text("--tokenizer", "PATH", &a.tokenizer, "tokenizer.model (sentencepiece) or tokenizer.json (byte-level BPE)")
      .default_is("the one beside the model, or the vocabulary inside a GGUF");
  o.integer("-c, --ctx-size", "N", &a.ctx_size, 1, 1 << 24,
            "context size in positions, up to the model's maximum; less if the KV cache would not fit in memory")
      .default_is("the model's maximum, at most 8192 on cpu and 131072 on cuda (there also what fits in GPU memory), "
                  "said on stderr when it caps");
}

// Section "device" (and the developer tuning section after it).
inline void add_device_options(Options& o, EngineOptions& a) {
  o.section("device");
  o.choice("--device", "DEV", &a.device_arg, {"cpu", "cuda", "auto"},
           "where to run; auto = cuda when a device is present");
  o.text("--gemv", "NAME", &a.gemv, "CUDA GEMV mapping, one of those below; --device cuda only")
      .default_is("warp-r2; warp when the model has quantized weights");
  o.choice("--decode", "PATH", &a.decode, {decode_path_name(DecodePath::Graph), decode_path_name(DecodePath::Persistent)},
           parse_decode_path,
           "graph: one CUDA graph of kernels per token; persistent: one kernel per token whose resident blocks walk "
           "the whole step, synchronised by counters (BF16 weights on warp-r2/warp/warp-few, quantized ones on warp "
           "or warp-dp4a, one type per fused q|k|v and gate|up, BF16 KV); --device cuda only")
      .default_is("graph");
  o.flag("--dequantize", &a.dequantize,
         "run a GGUF file's quantized weights as BF16 (the comparison path) instead of keeping them quantized for the "
         "quantized GEMVs");
  add_quantize_option(
      o, &a.quantize,
      "quantize a float checkpoint's (or a synthetic model's) projection and head weights at load, as llama-quantize "
      "would (q4_k_m: llama.cpp's Q4_K_M mix); rows a type cannot hold fall back as llama-quantize does (named on "
      "stderr); refused for a file that is already quantized");
  add_quick_quant_option(o, &a.quick_quant);
  o.choice("--dtype", "T", &a.dtype, {"f32", "bf16"},
           "CPU weight precision: bf16 rounds the weights as the CUDA engine stores them")
      .default_is("f32 on cpu, bf16 on cuda");
  add_kv_dtype_option(
      o, &a.kv_dtype,
      "KV-cache precision: f32 (CPU only), bf16 (as the CUDA engine stores it) or fp8 (E4M3, one FP32 scale per KV "
      "head and block of 32 positions: half of bf16's bytes; on the CUDA engine for head_dim 64 and 128)")
      .default_is("f32 on cpu, bf16 on cuda");
  add_tp_option(o, &a.tp);
  add_tuning_options(o, &a.tuning);
}

// The list of GEMV mappings after the options.
inline void add_gemv_epilogue(Options& o) {
  o.epilogue("----- GEMV mappings (--gemv NAME, --device cuda; the CPU reference has none) -----\n" +
             gemv_mapping_lines("  "));
}

// Resolves --device once (auto asks the CUDA runtime whether a device is present), then the checks that need the
// device: --gemv on every path (an unknown name, or on the CPU path any mapping but the default, is bad usage),
// --kv-dtype f32 where the run would be on the CUDA engine, --decode persistent on the CPU, --tp N > 1 on CUDA in a
// build without the CUDA engine; said before the model loads and before the GPU is asked for anything.
inline void resolve_device_and_check(EngineOptions& a) {
  if (a.quick_quant) quantize_scheme(a.quantize, true);  // --quick-quant without --quantize: bad usage
  // --tp's ranks wait for each other inside their kernels; a kernel CUDA loads lazily mid-step would wait for them
  // (engine/cuda/tp_rank.h): every module is loaded when CUDA starts, which is next (resolve_device).
  if (a.tp > 1 && a.device_arg != "cpu") setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  a.device = resolve_device(a.device_arg);
  if (const std::string why = tp_device_refusal(a.tp, a.device); !why.empty()) usage_error(why);
  if (!a.gemv.empty()) check_gemv_for_device("--gemv", a.gemv, a.device);  // llm::Error: bad usage here
  if (a.kv_dtype != KvDtype::Default && a.kv_dtype != KvDtype::BF16)     // every engine runs these two
    if (const std::string why = kv_dtype_refusal(a.kv_dtype, a.device); !why.empty()) usage_error(why);
  if (a.decode == DecodePath::Persistent && a.device.device != "cuda")
    usage_error("--decode persistent runs on the CUDA engine, not on the CPU reference" +
                (a.device.why.empty() ? std::string() : "; " + a.device.why));
}

// The model of --model (the default model without it), quantized at load with --quantize.
inline Model load_engine_model(const EngineOptions& a) {
  Model model = load_model(a.model.empty() ? default_model_path() : a.model);
  if (!a.quantize.empty()) quantize_model(model, quantize_scheme(a.quantize, a.quick_quant));
  return model;
}

// The backend the options describe for `model` (tokenizer_vocab: the tokenizer's size, 0 without one). On the CUDA
// engine every --gemv and weight-type pair, and --decode persistent, runs or is refused by name (bad usage, exit 2)
// before any GPU work; so is a model that --tp N cannot split (engine/tp_plan.h). Notes go to stderr as "PROG: ...".
inline std::unique_ptr<Backend> make_engine_backend(const EngineOptions& a, const Model& model, int tokenizer_vocab,
                                                    const char* prog) {
  BackendOptions bo;
  bo.device = a.device.device;
  bo.ctx_size = a.ctx_size;
  // A tokenizer smaller than the (padded) embedding: ids it cannot decode are never sampled.
  bo.sample_vocab = sampling_vocab(model.config, tokenizer_vocab);
  bo.gemv = a.gemv;
  bo.dequantize = a.dequantize;
  bo.persistent = a.decode == DecodePath::Persistent;
  bo.tuning = a.tuning;
  bo.tp = a.tp;
  if (a.tp > 1)
    if (const std::string why = tp_refusal(model, a.tp); !why.empty()) usage_error(why);
  if (bo.device == "cuda") {
    const GemvPlan plan = gemv_plan(a.gemv);
    if (const std::string why = gemv_refusal(plan, model, a.dequantize); !why.empty()) usage_error(why);
    if (const std::string why =
            decode_path_refusal(a.decode, plan, model, a.dequantize, a.kv_dtype == KvDtype::FP8, true);
        !why.empty())
      usage_error(why);
    if (const std::string q = quant_summary(model); !q.empty())
      std::fprintf(stderr, "%s: quantized weights %s: %s\n", prog,
                   a.dequantize ? "dequantized to BF16 at load (--dequantize)" : "kept quantized", q.c_str());
  }
  if (bo.device == "cuda" && a.dtype == "f32")
    fail("--dtype f32 is CPU-only: the CUDA engine stores weights in BF16 (use --device cpu)");
  bo.bf16_weights = a.dtype == "bf16";
  bo.kv_dtype = a.kv_dtype;
  if (a.kv_dtype == KvDtype::FP8)
    std::fprintf(stderr, "%s: KV cache in fp8 (E4M3, one FP32 scale per KV head and %d positions)\n", prog,
                 kKvFp8Block);
  else if (a.kv_dtype != KvDtype::Default)
    std::fprintf(stderr, "%s: KV cache in %s\n", prog, kv_dtype_name(a.kv_dtype));
  return make_backend(model, bo);
}

// The line every program prints once the engine is up.
inline void print_engine_line(const char* prog, const Model& model, const Backend& backend) {
  const ModelConfig& c = model.config;
  std::fprintf(stderr, "%s: %s (%s, dim %d, %d layers, %d heads / %d kv, vocab %d) on %s, context %d\n", prog,
               model.source.c_str(), model.format.c_str(), c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size,
               backend.name().c_str(), backend.ctx_size());
}

// The drafter --spec asks for (null for none). A draft model loads like --model, must share the target's vocabulary
// (refused by name otherwise) and runs on a backend of its own (the target's engine options) with the target's context.
struct Speculation {
  Model draft_model;
  std::unique_ptr<Tokenizer> draft_tok;
  std::unique_ptr<Backend> draft_backend;
  std::unique_ptr<Drafter> drafter;
};

inline std::unique_ptr<Speculation> make_speculation(const SpecArgs& spec, const EngineOptions& engine,
                                                     const Model& model, const Tokenizer* tok, int ctx,
                                                     const char* prog) {
  if (spec.mode == SpecMode::kNone) return nullptr;
  auto s = std::make_unique<Speculation>();
  if (spec.mode == SpecMode::kLookup) {
    s->drafter = std::make_unique<LookupDrafter>();
    return s;
  }
  s->draft_model = load_model(spec.model_draft);
  const auto refuse = [&](const std::string& why) {
    if (!why.empty()) fail("--model-draft ", spec.model_draft, " cannot draft for ", model.source, ": ", why);
  };
  refuse(draft_vocab_mismatch(model.config, nullptr, s->draft_model.config, nullptr));  // the sizes first
  // Its own vocabulary (a GGUF's, a directory's tokenizer), else the one --tokenizer names (a llama2.c file has none).
  s->draft_tok = load_tokenizer(s->draft_model, "");
  if (!s->draft_tok && !engine.tokenizer.empty()) s->draft_tok = load_tokenizer(s->draft_model, engine.tokenizer);
  refuse(draft_vocab_mismatch(model.config, tok, s->draft_model.config, s->draft_tok.get()));
  EngineOptions draft = engine;  // the target's engine, at the target's context, its own KV default
  draft.ctx_size = ctx;
  draft.kv_dtype = KvDtype::Default;
  draft.tp = 1;  // the draft model runs whole (--tp splits the target)
  s->draft_backend = make_engine_backend(draft, s->draft_model, tok ? tok->vocab_size() : 0, prog);
  s->drafter = std::make_unique<DraftModelDrafter>(*s->draft_backend);
  std::fprintf(stderr, "%s: draft model %s (%d layers, dim %d)\n", prog, s->draft_model.source.c_str(),
               s->draft_model.config.n_layers, s->draft_model.config.dim);
  return s;
}

}  // namespace llm::cli
