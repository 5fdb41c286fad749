// run-llama: the command line. Parses options, wires model -> backend -> decode loop, streams text to stdout and
// timings to stderr. No model or kernel logic lives here.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/cli.h"
#include "apps/shared_options.h"  // --prompt, --file, --prompt-ids, --quantize, --kv-dtype
#include "chat/repl.h"
#include "core/error.h"
#include "core/gemv_table.h"
#include "engine/backend.h"
#include "engine/gemv_choice.h"  // gemv_refusal, quant_summary
#include "models/quantize_model.h"  // --quantize
#include "engine/generate.h"
#include "engine/perplexity.h"
#include "engine/prompt_input.h"  // --file, --prompt-ids [@FILE]
#include "models/default_model.h"
#include "models/model.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace {

volatile std::sig_atomic_t g_interrupted = 0;

void on_sigint(int) {
  g_interrupted = 1;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
}

struct Args {
  std::string model, tokenizer, gemv, dtype, dump_logits, perplexity;
  llm::cli::PromptOptions prompt;          // --prompt, --file, --prompt-ids: one at most
  bool have_prompt = false;                // one of them, or --perplexity, was given
  llm::EngineTuning tuning;                // the developer options (--run-ahead, --grid-cap, ...)
  int n_predict = 256;
  int ctx_size = 0;
  float temp = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  unsigned long long seed = 42;
  bool ignore_eos = false;
  bool dequantize = false;                 // --dequantize: GGUF quantized weights as BF16 on the GPU
  std::string device_arg = "auto";         // --device cpu|cuda|auto, as given
  llm::ResolvedDevice device;              // ... resolved once (auto: cuda when a device is present), what runs
  llm::DecodePath decode = llm::DecodePath::Graph;  // --decode graph|persistent (CUDA)
  llm::KvDtype kv_dtype = llm::KvDtype::Default;  // --kv-dtype f32|bf16|fp8 (Default: f32 on cpu, bf16 on cuda)
  std::string quantize;                    // --quantize q8_0|q4_0|q4_k|q6_k|q4_k_m: quantize a float model at load
  bool chat = false;                       // --chat: the REPL (chat/repl.h) instead of one prompt
  std::string chat_template, system;
  llm::cli::SpecArgs spec;                 // --spec, --draft-max, --draft-min, --model-draft
};

const char* kUsage =
    "usage: run-llama [--model PATH] --prompt TEXT [options]\n"
    "       run-llama [--model PATH] --chat [options]\n";

static_assert(llm::kDefaultCtxCap == 8192, "the --ctx-size help below states the default cap");
static_assert(llm::kKvFp8Block == 32, "the --kv-dtype help below states the FP8 block");

using llm::cli::Lower;
using llm::cli::usage_error;

void general_options(llm::cli::Options& o, Args& a) {
  o.section("general");
  llm::cli::add_prompt_options(
      o, &a.prompt, "prompt to continue (BOS first where the vocabulary wants one; \"\" = BOS only)", "");
  o.text("--dump-logits", "FILE", &a.dump_logits,
         "teacher-forced: write the logits after each prompt token (float32 [tokens, vocab]) to FILE and exit (see "
         "tools/hf_compare.py)");
  o.text("--perplexity", "FILE", &a.perplexity,
         "score the text of FILE (teacher-forced, decode path) and print its perplexity");
  o.integer("-n, --n-predict", "N", &a.n_predict, 1, 1000000, "number of tokens to generate");
  o.flag("--ignore-eos", &a.ignore_eos, "keep generating past an end-of-sequence token (benchmarks)");
  o.section("chat");
  o.flag("--chat", &a.chat,
         "talk to the model: a terminal gets a line editor, history and /help; without a terminal each stdin line is "
         "a user turn and each reply one stdout record (chat/repl.h); -n bounds each reply");
  o.text("--chat-template", "NAME", &a.chat_template, "chatml, llama2, llama3 or zephyr")
      .default_is("detected from the model's template; without one, chatml when the vocabulary has <|im_start|>, "
                  "else zephyr");
  o.text("--system", "TEXT", &a.system, "system prompt of the conversation");
}

void model_and_sampling_options(llm::cli::Options& o, Args& a) {
  o.section("model");
  o.text("-m, --model", "PATH", &a.model, "GGUF file, Hugging Face directory, llama2.c .bin, or synthetic:NAME")
      .default_is("SmolLM2-135M-Instruct, fetched into models-cache/ by scripts/setup.sh");
  o.text("--tokenizer", "PATH", &a.tokenizer, "tokenizer.model (sentencepiece) or tokenizer.json (byte-level BPE)")
      .default_is("the one beside the model, or the vocabulary inside a GGUF");
  o.integer("-c, --ctx-size", "N", &a.ctx_size, 1, 1 << 24,
            "context size in positions, up to the model's maximum; less if the KV cache would not fit in memory")
      .default_is("the smaller of the model's maximum and 8192, said on stderr when it caps");
  o.section("sampling");
  o.real("--temp", "T", &a.temp, 0.0, 100.0, "temperature, 0 = greedy");
  o.integer("--top-k", "K", &a.top_k, 0, 1 << 24, "keep the K most likely tokens, 0 = all")
      .allowed("0 to 16777216, 0 = all");
  o.real("--top-p", "P", &a.top_p, 0.0, 1.0, "keep the smallest set of tokens with probability >= P", Lower::open);
  o.integer("-s, --seed", "S", &a.seed, 0, 1LL << 62, "sampling seed").allowed("0 to 2^62");
}

void device_options(llm::cli::Options& o, Args& a) {
  o.section("device");
  o.choice("--device", "DEV", &a.device_arg, {"cpu", "cuda", "auto"},
           "where to run; auto = cuda when a device is present");
  o.text("--gemv", "NAME", &a.gemv, "CUDA GEMV mapping, one of those below; --device cuda only")
      .default_is("warp-r2; warp when the model has quantized weights");
  o.choice("--decode", "PATH", &a.decode,
           {llm::decode_path_name(llm::DecodePath::Graph), llm::decode_path_name(llm::DecodePath::Persistent)},
           llm::parse_decode_path,
           "graph: one CUDA graph of kernels per token; persistent: one kernel per token whose resident blocks walk "
           "the whole step, synchronised by counters (BF16 weights on warp-r2/warp/warp-few, quantized ones on warp "
           "or warp-dp4a, one type per fused q|k|v and gate|up, BF16 KV); --device cuda only")
      .default_is("graph");
  o.flag("--dequantize", &a.dequantize,
         "run a GGUF file's quantized weights as BF16 (the comparison path) instead of keeping them quantized for the "
         "quantized GEMVs");
  llm::cli::add_quantize_option(
      o, &a.quantize,
      "quantize a float checkpoint's (or a synthetic model's) projection and head weights at load, as llama-quantize "
      "would (q4_k_m: llama.cpp's Q4_K_M mix); rows a type cannot hold fall back as llama-quantize does (named on "
      "stderr); refused for a file that is already quantized");
  o.choice("--dtype", "T", &a.dtype, {"f32", "bf16"},
           "CPU weight precision: bf16 rounds the weights as the CUDA engine stores them")
      .default_is("f32 on cpu, bf16 on cuda");
  llm::cli::add_kv_dtype_option(
      o, &a.kv_dtype,
      "KV-cache precision: f32 (CPU only), bf16 (as the CUDA engine stores it) or fp8 (E4M3, one FP32 scale per KV "
      "head and block of 32 positions: half of bf16's bytes; on the CUDA engine for head_dim 64 and 128)")
      .default_is("f32 on cpu, bf16 on cuda");
  llm::cli::add_spec_options(o, &a.spec);
  llm::cli::add_tuning_options(o, &a.tuning);
}

// The checks that need the device: --gemv on every path (an unknown name, or on the CPU path any mapping but the
// default, is bad usage), --kv-dtype f32 where the run would be on the CUDA engine, --decode persistent on the CPU;
// said before the model loads and before the GPU is asked for anything.
void check_for_device(const Args& a) {
  if (!a.gemv.empty()) llm::check_gemv_for_device("--gemv", a.gemv, a.device);  // llm::Error: bad usage here
  if (a.kv_dtype != llm::KvDtype::Default && a.kv_dtype != llm::KvDtype::BF16)  // every engine runs these two
    if (const std::string why = llm::kv_dtype_refusal(a.kv_dtype, a.device); !why.empty()) usage_error(why);
  llm::cli::check_spec_args(a.spec, a.device.device);
  if (a.decode == llm::DecodePath::Persistent && a.device.device != "cuda")
    usage_error("--decode persistent runs on the CUDA engine, not on the CPU reference" +
                (a.device.why.empty() ? std::string() : "; " + a.device.why));
}

Args parse_args(int argc, char** argv) {
  Args a;
  llm::cli::Options o(kUsage);
  general_options(o, a);
  model_and_sampling_options(o, a);
  device_options(o, a);
  o.epilogue("----- GEMV mappings (--gemv NAME, --device cuda; the CPU reference has none) -----\n" +
             llm::gemv_mapping_lines("  "));
  o.parse(argc, argv);
  a.have_prompt = o.given("--prompt") || o.given("--file") || o.given("--prompt-ids") || o.given("--perplexity");
  llm::cli::check_one_prompt(o);
  if (a.chat && a.have_prompt)
    usage_error("--chat reads the conversation from the terminal or stdin; it takes no --prompt, --file, "
                "--prompt-ids, --perplexity or --dump-logits");
  if ((!a.chat_template.empty() || !a.system.empty()) && !a.chat)
    usage_error("--chat-template and --system need --chat");
  if (!a.have_prompt && !a.chat) usage_error("--prompt is required (use --prompt \"\" to start from BOS alone)");
  // Resolved once (auto asks the CUDA runtime whether a device is present); the checks and the run carry the result.
  a.device = llm::resolve_device(a.device_arg);
  check_for_device(a);
  return a;
}

// Synthetic models may run without a tokenizer: the prompt is then a list of token ids (or empty).
std::vector<int> ids_from_text(const std::string& prompt, const llm::ModelConfig& c) {
  std::vector<int> ids{c.bos_id};
  std::istringstream in(prompt);
  std::string w;
  while (in >> w) {
    char* end = nullptr;
    long v = std::strtol(w.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v >= c.vocab_size)
      llm::fail("without a tokenizer the prompt must be token ids in [0, ", c.vocab_size, "), found '", w, "'");
    ids.push_back(int(v));
  }
  return ids;
}

// The prompt's ids: BOS first where the vocabulary wants one and has one, and always for an empty prompt (the model
// needs a token).
std::vector<int> encode_prompt(const llm::Tokenizer& tok, const std::string& prompt) {
  if (prompt.empty() && tok.bos_id() < 0)
    llm::fail("the prompt is empty and the vocabulary has no BOS token to start from");
  return tok.encode(prompt, prompt.empty() || (tok.adds_bos() && tok.bos_id() >= 0));
}

int run_perplexity(const Args& a, llm::Backend& backend, const llm::Tokenizer* tok) {
  if (!tok) llm::fail("--perplexity needs a tokenizer");
  const std::string text = llm::read_input_file("--perplexity", a.perplexity);
  // BOS first where the vocabulary has one and wants it; without one the first token of the text is the context and
  // scoring starts at the second.
  const bool bos = tok->adds_bos() && tok->bos_id() >= 0;
  if (tok->bos_id() < 0)
    std::fprintf(stderr, "run-llama: the vocabulary has no BOS token: scoring from the text's second token on\n");
  const std::vector<int> ids = tok->encode(text, bos);
  if (ids.size() < 2)
    llm::fail("--perplexity: ", a.perplexity, " is too short to score: ", ids.size(),
              ids.size() == 1 ? " token" : " tokens", bos ? " with BOS" : "", "; scoring needs at least 2");
  const auto t0 = std::chrono::steady_clock::now();
  const llm::PerplexityResult r = llm::perplexity(backend, ids);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("perplexity: %s: %d tokens scored, mean NLL %.4f nats, PPL %.3f (%.1f tokens/s on %s)\n",
              a.perplexity.c_str(), r.scored, r.mean_nll, r.ppl, r.scored / s, backend.name().c_str());
  return 0;
}

llm::SpecOptions spec_options(const Args& a) {
  llm::SpecOptions so;
  so.draft_max = a.spec.draft_max;
  so.draft_min = a.spec.draft_min;
  return so;
}

// The drafter --spec asks for (null for none). A draft model loads like --model, must share the target's vocabulary
// (refused by name otherwise) and runs on its own CPU backend with the target's context.
struct Speculation {
  llm::Model draft_model;
  std::unique_ptr<llm::Tokenizer> draft_tok;
  std::unique_ptr<llm::Backend> draft_backend;
  std::unique_ptr<llm::Drafter> drafter;
};

std::unique_ptr<Speculation> make_speculation(const Args& a, const llm::Model& model, const llm::Tokenizer* tok,
                                              const llm::BackendOptions& target_opt, int ctx) {
  if (a.spec.mode == llm::SpecMode::kNone) return nullptr;
  auto s = std::make_unique<Speculation>();
  if (a.spec.mode == llm::SpecMode::kLookup) {
    s->drafter = std::make_unique<llm::LookupDrafter>();
    return s;
  }
  s->draft_model = llm::load_model(a.spec.model_draft);
  const auto refuse = [&](const std::string& why) {
    if (!why.empty()) llm::fail("--model-draft ", a.spec.model_draft, " cannot draft for ", model.source, ": ", why);
  };
  refuse(llm::draft_vocab_mismatch(model.config, nullptr, s->draft_model.config, nullptr));  // the sizes first
  // Its own vocabulary (a GGUF's, a directory's tokenizer), else the one --tokenizer names (a llama2.c file has none).
  s->draft_tok = llm::load_tokenizer(s->draft_model, "");
  if (!s->draft_tok && !a.tokenizer.empty()) s->draft_tok = llm::load_tokenizer(s->draft_model, a.tokenizer);
  refuse(llm::draft_vocab_mismatch(model.config, tok, s->draft_model.config, s->draft_tok.get()));
  llm::BackendOptions bo = target_opt;
  bo.ctx_size = ctx;
  bo.kv_dtype = llm::KvDtype::Default;
  s->draft_backend = llm::make_backend(s->draft_model, bo);
  s->drafter = std::make_unique<llm::DraftModelDrafter>(*s->draft_backend);
  std::fprintf(stderr, "run-llama: draft model %s (%d layers, dim %d)\n", s->draft_model.source.c_str(),
               s->draft_model.config.n_layers, s->draft_model.config.dim);
  return s;
}

// --chat: the template (override, detected, or the fallback named on stderr), then the REPL.
int run_chat_mode(const Args& a, const llm::Model& model, llm::Backend& backend, const llm::Tokenizer* tok,
                  llm::Drafter* drafter) {
  if (!tok) llm::fail("--chat needs a tokenizer (", model.source, " has none; pass --tokenizer PATH)");
  std::string note;
  const llm::ChatTemplate tmpl = llm::pick_chat_template(a.chat_template, model.chat_template, *tok, &note);
  if (!note.empty()) std::fprintf(stderr, "run-llama: %s\n", note.c_str());
  llm::ChatOptions co;
  co.system = a.system;
  co.sampler = {a.temp, a.top_k, a.top_p, a.seed};
  co.max_reply_tokens = a.n_predict;
  co.ignore_eos = a.ignore_eos;
  co.terminal = isatty(0) && isatty(1);
  co.drafter = drafter;
  co.spec = spec_options(a);
  return llm::run_chat(backend, *tok, model.config, tmpl, co);
}

// --dump-logits FILE: the logits after each prompt token (float32 [tokens, vocab]) to FILE, the ids to FILE.ids.
int dump_logits(const Args& a, llm::Backend& backend, const std::vector<int>& prompt, int vocab_size) {
  std::vector<float> logits = llm::teacher_forced_logits(backend, prompt);
  std::FILE* f = std::fopen(a.dump_logits.c_str(), "wb");
  bool ok = f && std::fwrite(logits.data(), sizeof(float), logits.size(), f) == logits.size();
  if (f) ok = (std::fclose(f) == 0) && ok;
  if (!ok) llm::fail("cannot write ", a.dump_logits, ": ", std::strerror(errno));
  // The ids beside them (FILE.ids, comma-separated), so a reference can run exactly these tokens.
  std::ofstream ids_out(a.dump_logits + ".ids");
  for (size_t i = 0; i < prompt.size(); ++i) ids_out << (i ? "," : "") << prompt[i];
  ids_out << "\n";
  if (!ids_out) llm::fail("cannot write ", a.dump_logits, ".ids");
  std::fprintf(stderr, "run-llama: wrote %zu x %d logits to %s (ids in %s.ids)\n", prompt.size(), vocab_size,
               a.dump_logits.c_str(), a.dump_logits.c_str());
  return 0;
}

int run(const Args& a) {
  using Clock = std::chrono::steady_clock;
  // Before the model loads: the one line every CUDA program prints without a device.
  if (a.device.device == "cuda") llm::require_cuda_device();
  // The prompt's files before the model: a mistyped name costs no model load. Ids are checked once the vocabulary is
  // known.
  const std::string prompt_text = a.prompt.file.empty() ? a.prompt.text : llm::read_prompt_file(a.prompt.file);
  const llm::PromptIdsArg ids_arg =
      a.prompt.ids.empty() ? llm::PromptIdsArg{} : llm::read_prompt_ids_arg(a.prompt.ids);
  const auto t_load = Clock::now();
  llm::Model model = llm::load_model(a.model.empty() ? llm::default_model_path() : a.model);
  if (!a.quantize.empty()) llm::quantize_model(model, llm::parse_quantize_type(a.quantize));

  std::unique_ptr<llm::Tokenizer> tok = llm::load_tokenizer(model, a.tokenizer);
  if (!tok && model.format != "synthetic" && a.prompt.ids.empty())
    llm::fail("no tokenizer found beside ", model.source, "; pass --tokenizer PATH/tokenizer.model");

  llm::BackendOptions bo;
  bo.device = a.device.device;
  bo.ctx_size = a.ctx_size;
  // A tokenizer smaller than the (padded) embedding: ids it cannot decode are never sampled.
  bo.sample_vocab = llm::sampling_vocab(model.config, tok ? tok->vocab_size() : 0);
  bo.gemv = a.gemv;
  bo.dequantize = a.dequantize;
  bo.persistent = a.decode == llm::DecodePath::Persistent;
  bo.tuning = a.tuning;
  if (bo.device == "cuda") {
    // --gemv resolved once (checked against the table when parsed); every --gemv and weight-type pair runs or is
    // refused by name (bad usage, exit 2), before any GPU work.
    const llm::GemvPlan plan = llm::gemv_plan(a.gemv);
    if (const std::string why = llm::gemv_refusal(plan, model, a.dequantize); !why.empty()) usage_error(why);
    // --decode persistent runs what its kernel takes, or is refused by name (exit 2), before any GPU work.
    if (const std::string why = llm::decode_path_refusal(a.decode, plan, model, a.dequantize,
                                                         a.kv_dtype == llm::KvDtype::FP8, true);
        !why.empty())
      usage_error(why);
    if (const std::string q = llm::quant_summary(model); !q.empty())
      std::fprintf(stderr, "run-llama: quantized weights %s: %s\n",
                   a.dequantize ? "dequantized to BF16 at load (--dequantize)" : "kept quantized", q.c_str());
  }
  if (bo.device == "cuda" && a.dtype == "f32")
    llm::fail("--dtype f32 is CPU-only: the CUDA engine stores weights in BF16 (use --device cpu)");
  bo.bf16_weights = a.dtype == "bf16";
  bo.kv_dtype = a.kv_dtype;
  if (a.kv_dtype == llm::KvDtype::FP8)
    std::fprintf(stderr, "run-llama: KV cache in fp8 (E4M3, one FP32 scale per KV head and %d positions)\n",
                 llm::kKvFp8Block);
  else if (a.kv_dtype != llm::KvDtype::Default)
    std::fprintf(stderr, "run-llama: KV cache in %s\n", llm::kv_dtype_name(a.kv_dtype));
  auto backend = llm::make_backend(model, bo);
  const double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_load).count();

  const llm::ModelConfig& c = model.config;
  std::fprintf(stderr, "run-llama: %s (%s, dim %d, %d layers, %d heads / %d kv, vocab %d) on %s, context %d\n",
               model.source.c_str(), model.format.c_str(), c.dim, c.n_layers, c.n_heads, c.n_kv_heads,
               c.vocab_size, backend->name().c_str(), backend->ctx_size());

  const auto spec = make_speculation(a, model, tok.get(), bo, backend->ctx_size());
  llm::Drafter* drafter = spec ? spec->drafter.get() : nullptr;
  if (a.chat) return run_chat_mode(a, model, *backend, tok.get(), drafter);
  if (!a.perplexity.empty()) return run_perplexity(a, *backend, tok.get());
  std::vector<int> prompt = !a.prompt.ids.empty() ? llm::parse_token_ids(ids_arg.text, ids_arg.source, c.vocab_size)
                            : tok                    ? encode_prompt(*tok, prompt_text)
                                                     : ids_from_text(prompt_text, c);
  if (!a.dump_logits.empty()) return dump_logits(a, *backend, prompt, c.vocab_size);

  llm::GenerateOptions go;
  go.n_predict = a.n_predict;
  go.sampler.temperature = a.temp;
  go.sampler.top_k = a.top_k;
  go.sampler.top_p = a.top_p;
  go.sampler.seed = a.seed;
  go.ignore_eos = a.ignore_eos;
  go.interrupt = &g_interrupted;
  go.drafter = drafter;
  go.spec = spec_options(a);

  std::unique_ptr<llm::StreamDecoder> dec;
  if (tok) dec = std::make_unique<llm::StreamDecoder>(*tok, /*strip_leading_space=*/prompt_text.empty());
  // The prompt is echoed once generation has started, so a rejected prompt leaves stdout empty.
  bool echoed = false;
  auto echo_prompt = [&] {
    if (!echoed && tok) std::fputs(prompt_text.c_str(), stdout);
    echoed = true;
  };
  auto emit = [&](int id) {
    echo_prompt();
    if (dec)
      std::fputs(dec->push(id).c_str(), stdout);
    else
      std::printf("%d ", id);
    std::fflush(stdout);
  };

  std::signal(SIGINT, on_sigint);
  llm::GenerateResult r = llm::generate(*backend, c, prompt, go, emit, load_ms);
  std::signal(SIGINT, SIG_DFL);
  echo_prompt();
  if (dec) std::fputs(dec->flush().c_str(), stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);

  if (r.stop_reason == "context")
    std::fprintf(stderr, "run-llama: stopped at the end of the context (%d positions)\n", backend->ctx_size());
  std::fputs("\n", stderr);
  if (drafter) llm::print_spec_stats(r.spec);
  llm::print_timings(r.timings);
  if (r.stop_reason == "interrupted") {
    std::fprintf(stderr, "run-llama: interrupted\n");
    return 130;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return llm::cli::run_main("run-llama", argc, argv, parse_args, run); }
