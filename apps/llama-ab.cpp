// llama-ab: the A/B run of GEMV mappings as a command line. Parses options, builds the prompt, calls run_ab
// (measure/ab_run.h) and hands the result to measure/ab_stats.h and measure/ab_render.h for the markdown table
// (stdout), JSON, CSV and the chart.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/cli.h"             // Options, usage_error, as_usage, run_main
#include "apps/shared_options.h"  // --prompt, --file, --prompt-ids, --quantize, --kv-dtype
#include "core/error.h"           // llm::fail
#include "core/gemv_table.h"      // gemv_mapping_lines, gemv_mapping_list
#include "engine/backend.h"       // require_cuda_device, make_backend (a draft model's)
#include "engine/speculative.h"   // LookupDrafter, DraftModelDrafter, draft_vocab_mismatch
#include "measure/ab_render.h"    // ab_markdown, ab_json, ab_csv, ab_write_file, ab_draw_chart
#include "engine/gemv_choice.h"  // default_gemv_name (quantized models get the quantized forms), DecodePath
#include "models/quantize_model.h"  // --quantize
#include "engine/prompt_input.h"   // --file, --prompt-ids [@FILE]
#include "measure/ab_run.h"       // run_ab, AbOptions, parse_ab_mappings, ab_runnable_entries, ab_context_refusal
#include "measure/ab_stats.h"     // summarize_ab
#include "models/model.h"         // load_model
#include "models/default_model.h"  // default_model_path
#include "tokenizer/load.h"        // load_tokenizer
#include "tokenizer/tokenizer.h"  // Tokenizer

namespace {

struct Args {
  std::string model, tokenizer;
  llm::cli::PromptOptions prompt{"Once upon a time, there was a little robot who", "", ""};  // one at most
  bool prompt_given = false;                // --prompt or --file was given (else synthetic models get fixed ids)
  llm::EngineTuning tuning;                // the developer options (--run-ahead, --grid-cap, ...)
  std::vector<int> verify_k;                // --verify-k LIST
  llm::cli::SpecArgs spec;                  // --spec, --draft-max, --draft-min, --model-draft
  int depth = 0;                            // --depth N: context depth before the timed steps (llama-bench -d)
  std::string ab;  // "" = every mapping that runs the model's weights (the registry, or the quantized forms)
  std::vector<llm::DecodePath> decode{llm::DecodePath::Graph};  // --decode: the paths every plain --ab entry runs on
  bool dequantize = false;
  llm::KvDtype kv_dtype = llm::KvDtype::Default;  // --kv-dtype: bf16 (the default) or fp8; f32 refused (CUDA)
  std::string quantize;  // --quantize q8_0|q4_0|q4_k|q6_k|q4_k_m
  bool quick_quant = false;  // --quick-quant
  std::string json, csv, chart, chart_script;
  int n_decode = 128;
  int repeats = 5;
  int warmup = 1;
  int ctx_size = 0;
  unsigned long long seed = 42;
};

const char* kUsage =
    "usage: llama-ab [--model PATH] [options]\n"
    "\n"
    "Runs the same prompt and exactly N greedy decode steps (EOS ignored) under each GEMV mapping in one process,\n"
    "alternating mappings round by round (A B C A B C ...) after warm-up, and prints a llama-bench-style report:\n"
    "tokens/s, ms/token, GEMV vs other time (from a separate profiling pass, its overhead stated), GEMV GB/s against\n"
    "the read roofline measured in the same run, per-projection times, launch shapes, the sector model's prediction,\n"
    "each token's time budget (measured vs profiled device time), and whether the change in total time matches the\n"
    "change in GEMV time. With --spec, speculative passes then alternate with plain ones on the first mapping (graph\n"
    "path; warm-up, then --repeats each; the same prompt, depth and -n): tokens/s of both, the speed-up, llama.cpp's\n"
    "draft line, and whether the tokens are the plain pass's.\n"
    "\n";

using llm::cli::usage_error;

void run_options(llm::cli::Options& o, Args& a) {
  o.text("-m, --model", "PATH", &a.model, "GGUF, Hugging Face directory, llama2.c .bin, or synthetic:NAME")
      .default_is("SmolLM2");
  o.text("--tokenizer", "PATH", &a.tokenizer, "tokenizer.model or tokenizer.json")
      .default_is("beside the model, or inside a GGUF");
  llm::cli::add_prompt_options(o, &a.prompt, "prompt (encoded with BOS first)",
                               "; no tokenizer needed (synthetic models without a tokenizer default to a fixed "
                               "16-token prompt)");
  o.integer("-n, --n-decode, --n-predict", "N", &a.n_decode, 1, 1000000, "decode steps per pass");
  o.integer("-d, --depth", "N", &a.depth, 0, 1 << 24,
            "context depth, as llama-bench -d: the prompt's ids repeated to N tokens are prefilled once (timed), "
            "then every pass runs its -n steps from position N (0 = every pass prefills the prompt itself)");
  o.text("--ab", "LIST", &a.ab,
         "GEMV mappings (listed below), comma-separated; thread-splitk and warp-few split thread's gap into "
         "coalescing and parallelism; NAME@graph or NAME@persistent runs NAME on that decode path alone")
      .default_is("every mapping of the first list, in its order; for a model with quantized weights, every "
                  "quantized form");
  o.custom("--decode", "LIST", [&a](const std::string&, const std::string& t) { a.decode = llm::parse_ab_decode(t); },
           "decode paths every --ab mapping runs on, comma-separated: graph (one CUDA graph of kernels per token) "
           "and/or persistent (one kernel per token; BF16 weights on warp-r2/warp/warp-few, quantized ones on warp or "
           "warp-dp4a, BF16 KV); in mapping-major order (warp-r2, warp-r2@persistent, warp, ...). A listed mapping "
           "the persistent path cannot run is refused; the default --ab list runs there the mappings it can")
      .default_is("graph")
      .allowed("graph, persistent");
  o.flag("--dequantize", &a.dequantize, "run a GGUF file's quantized weights as BF16 (then the first list applies)");
  llm::cli::add_quantize_option(o, &a.quantize,
                                "quantize a float or synthetic model's weights at load (as write-gguf --quantize)");
  llm::cli::add_quick_quant_option(o, &a.quick_quant);
  llm::cli::add_kv_dtype_option(o, &a.kv_dtype,
                                "KV-cache precision: bf16 (the default) or fp8 (E4M3, one FP32 scale per KV head and "
                                "block of 32 positions; head_dim 64 and 128); f32 is CPU-only");
}

void measure_and_output_options(llm::cli::Options& o, Args& a) {
  o.integer("-r, --repeats", "R", &a.repeats, 1, 1000, "timed repeats per mapping");
  o.integer("--warmup", "W", &a.warmup, 0, 100, "untimed rounds first");
  o.integer("-c, --ctx-size", "N", &a.ctx_size, 1, 1 << 24, "KV cache positions").default_is("prompt, or depth, + N");
  o.integer("-s, --seed", "S", &a.seed, 0, 1LL << 62, "sampler seed, recorded (decoding is greedy)")
      .allowed("0 to 2^62");
  o.text("--json", "FILE", &a.json, "write every measurement and the derived figures as JSON");
  o.text("--csv", "FILE", &a.csv, "write one CSV row per mapping");
  o.text("--chart", "FILE.png", &a.chart,
         "draw tokens/s and GB/s per mapping against the roofline (python3-matplotlib)");
  o.text("--chart-script", "PY", &a.chart_script, "tools/ab_chart.py to use").default_is("found beside the build tree");
  o.custom("--verify-k", "LIST", [&a](const std::string& flag, const std::string& t) {
    a.verify_k.clear();
    std::stringstream ss(t);
    std::string item;
    while (std::getline(ss, item, ',')) {
      char* end = nullptr;
      const long v = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || v < 1 || v > 64) usage_error(flag + ": '" + item + "' is not a count in 1..64");
      a.verify_k.push_back(int(v));
    }
  }, "after the passes, time speculative decoding's verify step of each k (comma-separated, each <= -n) against one "
     "decode step, on the first mapping");
  llm::cli::add_spec_options(o, &a.spec);
  llm::cli::add_tuning_options(o, &a.tuning);
}

Args parse_args(int argc, char** argv) {
  Args a;
  llm::cli::Options o(kUsage);
  run_options(o, a);
  measure_and_output_options(o, a);
  o.epilogue("GEMV mappings (the default --ab runs every one of the first list, in its order):\n" +
             llm::gemv_mapping_lines("  "));
  o.parse(argc, argv);
  a.prompt_given = o.given("--prompt") || !a.prompt.file.empty();
  llm::cli::check_one_prompt(o);
  llm::cli::check_spec_args(a.spec);
  if (a.quick_quant) llm::cli::quantize_scheme(a.quantize, true);  // --quick-quant without --quantize: bad usage
  // With --ctx-size the positions a run at depth needs are known now (the model's maximum is checked by run_ab).
  if (a.depth > 0 && a.ctx_size > 0)
    if (const std::string why = llm::ab_context_refusal(0, a.depth, a.n_decode, a.ctx_size, true); !why.empty())
      usage_error(why);
  // Unknown, empty or repeated names or decode paths: bad usage (exit 2).
  if (!a.ab.empty()) llm::ab_decode_entries(llm::parse_ab_mappings(a.ab), a.decode);
  // The A/B run is on the CUDA engine: what it cannot store is bad usage, said before the GPU is asked for.
  if (const std::string why = llm::kv_dtype_refusal(a.kv_dtype, {"cuda", ""}); !why.empty()) usage_error(why);
  return a;
}

// A fixed prompt for models without a tokenizer: BOS, then 15 ids spread over the vocabulary.
std::vector<int> fixed_prompt(const llm::ModelConfig& c) {
  std::vector<int> ids{c.bos_id};
  for (int i = 1; i < 16; ++i) ids.push_back(int((int64_t(i) * 7919 + 13) % c.vocab_size));
  return ids;
}

// The prompt as read before the GPU is asked for: a file's text, or the ids of --prompt-ids (checked against the
// vocabulary once the model is loaded), so a bad file or id is one clear line on any machine.
struct PromptInput {
  std::string text;               // --prompt or --file
  bool given = false;             // --prompt or --file was given
  std::vector<int> ids;           // --prompt-ids
  std::string ids_source;         // "--prompt-ids" or "--prompt-ids @FILE"
};

PromptInput read_prompt_input(const Args& a) {
  PromptInput p;
  p.given = a.prompt_given;
  p.text = a.prompt.file.empty() ? a.prompt.text : llm::read_prompt_file(a.prompt.file);
  if (!a.prompt.ids.empty()) {
    const llm::PromptIdsArg arg = llm::read_prompt_ids_arg(a.prompt.ids);
    p.ids = llm::parse_token_ids(arg.text, arg.source, 0);
    p.ids_source = arg.source;
  }
  return p;
}

std::vector<int> build_prompt(const Args& a, const PromptInput& p, const llm::Model& model) {
  if (!p.ids.empty()) {
    llm::check_token_ids(p.ids, p.ids_source, model.config.vocab_size);
    return p.ids;
  }
  const std::unique_ptr<llm::Tokenizer> tok = llm::load_tokenizer(model, a.tokenizer);
  if (!tok) {
    if (model.format == "synthetic" && !p.given) return fixed_prompt(model.config);
    llm::fail("no tokenizer found beside ", model.source, "; pass --tokenizer PATH or --prompt-ids LIST");
  }
  return tok->encode(p.text, tok->adds_bos() || p.text.empty());
}

// --spec's drafter and what it needs (a draft model and its CUDA engine, at the A/B run's context); null for none. The
// draft model must share the target's vocabulary (refused by name otherwise).
struct Speculation {
  llm::Model draft_model;
  std::unique_ptr<llm::Backend> draft_backend;
  std::unique_ptr<llm::Drafter> drafter;
};

std::unique_ptr<Speculation> make_speculation(const Args& a, const llm::Model& model, int ctx) {
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
  const std::unique_ptr<llm::Tokenizer> tok = llm::load_tokenizer(model, a.tokenizer);
  const std::unique_ptr<llm::Tokenizer> draft_tok = llm::load_tokenizer(s->draft_model, "");
  refuse(llm::draft_vocab_mismatch(model.config, tok.get(), s->draft_model.config, draft_tok.get()));
  llm::BackendOptions bo;
  bo.device = "cuda";
  bo.ctx_size = ctx;
  bo.tuning = a.tuning;
  s->draft_backend = llm::make_backend(s->draft_model, bo);
  s->drafter = std::make_unique<llm::DraftModelDrafter>(*s->draft_backend);
  std::fprintf(stderr, "llama-ab: draft model %s (%d layers, dim %d)\n", s->draft_model.source.c_str(),
               s->draft_model.config.n_layers, s->draft_model.config.dim);
  return s;
}

// The chart reads the JSON: a temporary file when --json was not asked for.
void draw_chart(const Args& a, const std::string& json_text) {
  std::string path = a.json;
  bool temporary = false;
  if (path.empty()) {
    char tmpl[] = "/tmp/llama-ab-XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd < 0) llm::fail("cannot create a temporary file for the chart's JSON");
    close(fd);
    path = tmpl;
    temporary = true;
    llm::ab_write_file(path, json_text);
  }
  try {
    llm::ab_draw_chart(path, a.chart, a.chart_script);
  } catch (...) {
    if (temporary) std::remove(path.c_str());
    throw;
  }
  if (temporary) std::remove(path.c_str());
  std::fprintf(stderr, "llama-ab: chart written to %s\n", a.chart.c_str());
}

int run(const Args& a) {
  const PromptInput prompt = read_prompt_input(a);  // a missing or bad prompt file is said on any machine
  llm::require_cuda_device();  // before the model loads: the one line every CUDA program prints without a GPU
  llm::Model model = llm::load_model(a.model.empty() ? llm::default_model_path() : a.model);
  if (!a.quantize.empty()) llm::quantize_model(model, llm::cli::quantize_scheme(a.quantize, a.quick_quant));
  llm::AbOptions opt;
  std::string list = a.ab;
  if (list.empty()) {  // every mapping that can run this model: the quantized forms when decode keeps weights quantized
    const bool quant = llm::default_gemv_name(model, a.dequantize) == llm::kQuantGemvDefault &&
                       std::string(llm::kQuantGemvDefault) != llm::kGemvDefaultMapping;
    list = llm::gemv_mapping_list(/*quant=*/quant);
  }
  // What the persistent path cannot run is refused by name (bad usage, exit 2) before any GPU work, as run-llama
  // --decode persistent is.
  opt.mappings = llm::cli::as_usage([&] {
    return llm::ab_runnable_entries(llm::parse_ab_mappings(list), a.decode, !a.ab.empty(), model, a.dequantize,
                                    a.kv_dtype);
  });
  opt.dequantize = a.dequantize;
  opt.kv_dtype = a.kv_dtype;
  opt.tuning = a.tuning;
  opt.prompt = build_prompt(a, prompt, model);
  opt.n_decode = a.n_decode;
  opt.depth = a.depth;
  opt.verify_k = a.verify_k;
  opt.repeats = a.repeats;
  opt.warmup = a.warmup;
  opt.seed = a.seed;
  opt.ctx_size = a.ctx_size;
  const std::unique_ptr<Speculation> spec = make_speculation(a, model, llm::ab_ctx_size(opt));
  if (spec) {
    opt.drafter = spec->drafter.get();
    opt.spec = llm::cli::spec_options(a.spec);
  }
  const llm::AbResult res = llm::run_ab(model, opt);

  const llm::AbSummary sum = llm::summarize_ab(res);
  std::fputs(llm::ab_markdown(res, sum).c_str(), stdout);
  std::fflush(stdout);
  const std::string json_text = llm::ab_json(res, sum);
  if (!a.json.empty()) llm::ab_write_file(a.json, json_text);
  if (!a.csv.empty()) llm::ab_write_file(a.csv, llm::ab_csv(res, sum));
  if (!a.chart.empty()) draw_chart(a, json_text);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return llm::cli::run_main("llama-ab", argc, argv, parse_args, run); }
