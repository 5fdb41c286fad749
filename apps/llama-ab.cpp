// llama-ab: the A/B run of GEMV mappings as a command line. Parses options, builds the prompt, calls run_ab
// (measure/ab_run.h) and hands the result to measure/ab_stats.h and measure/ab_render.h for the markdown table
// (stdout), JSON, CSV and the chart.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/cli.h"             // value, parse_int, usage_error, run_main
#include "core/error.h"           // llm::fail
#include "core/gemv_names.h"      // gemv_mapping_lines, gemv_mapping_list
#include "engine/backend.h"       // require_cuda_device
#include "measure/ab_render.h"    // ab_markdown, ab_json, ab_csv, ab_write_file, ab_draw_chart
#include "engine/gemv_choice.h"  // default_gemv_name: quantized models get the quantized forms by default
#include "models/quantize_model.h"  // --quantize
#include "measure/ab_run.h"       // run_ab, AbOptions, parse_ab_mappings
#include "measure/ab_stats.h"     // summarize_ab
#include "models/model.h"         // load_model
#include "models/default_model.h"  // default_model_path
#include "tokenizer/load.h"        // load_tokenizer
#include "tokenizer/tokenizer.h"  // Tokenizer

namespace {

struct Args {
  std::string model, tokenizer, prompt = "Once upon a time, there was a little robot who", prompt_ids;
  bool have_prompt = false;
  std::string ab;  // "" = every mapping that runs the model's weights (the registry, or the quantized forms)
  bool dequantize = false;
  std::string quantize;  // --quantize q8_0|q4_0|q4_k
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
    "and whether the change in total time matches the change in GEMV time.\n"
    "\n"
    "  -m, --model PATH        GGUF, Hugging Face directory, llama2.c .bin, or synthetic:NAME (default: SmolLM2)\n"
    "      --tokenizer PATH    tokenizer.model or tokenizer.json (default: beside the model, or inside a GGUF)\n"
    "  -p, --prompt TEXT       prompt (encoded with BOS first; default: a short story opening)\n"
    "      --prompt-ids LIST   prompt as token ids, e.g. 1,450,3303 (no tokenizer needed; synthetic models without a\n"
    "                          tokenizer default to a fixed 16-token prompt)\n"
    "  -n, --n-decode N        decode steps per pass (default: 128)\n"
    "      --ab LIST           GEMV mappings (listed below), comma-separated (default: every mapping of the first\n"
    "                          list, in its order; for a model with quantized weights, every quantized form);\n"
    "                          thread-splitk and warp-few split thread's gap into coalescing and parallelism\n"
    "      --dequantize        run a GGUF file's quantized weights as BF16 (then the first list applies)\n"
    "      --quantize TYPE     q8_0, q4_0 or q4_k: quantize a float or synthetic model's weights at load\n"
    "  -r, --repeats R         timed repeats per mapping (default: 5)\n"
    "      --warmup W          untimed rounds first (default: 1)\n"
    "  -c, --ctx-size N        KV cache positions (default: prompt + N)\n"
    "  -s, --seed S            sampler seed, recorded (decoding is greedy) (default: 42)\n"
    "      --json FILE         write every measurement and the derived figures as JSON\n"
    "      --csv FILE          write one CSV row per mapping\n"
    "      --chart FILE.png    draw tokens/s and GB/s per mapping against the roofline (python3-matplotlib)\n"
    "      --chart-script PY   tools/ab_chart.py to use (default: found beside the build tree)\n"
    "  -h, --help              this text\n"
    "\n"
    "GEMV mappings (the default --ab runs every one of the first list, in its order):\n";

using llm::cli::parse_int;
using llm::cli::usage_error;

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string o = argv[i];
    auto value = [&] { return llm::cli::value(argc, argv, i, o); };
    if (o == "-h" || o == "--help") {
      std::fputs(kUsage, stdout);
      std::fputs(llm::gemv_mapping_lines("  ").c_str(), stdout);
      std::exit(0);
    } else if (o == "-m" || o == "--model") {
      a.model = value();
    } else if (o == "--tokenizer") {
      a.tokenizer = value();
    } else if (o == "-p" || o == "--prompt") {
      a.prompt = value();
      a.have_prompt = true;
    } else if (o == "--prompt-ids") {
      a.prompt_ids = value();
    } else if (o == "-n" || o == "--n-decode" || o == "--n-predict") {
      a.n_decode = int(parse_int(o, value(), 1, 1000000));
    } else if (o == "--ab") {
      a.ab = value();
    } else if (o == "--dequantize") {
      a.dequantize = true;
    } else if (o == "--quantize") {
      a.quantize = value();
      llm::parse_quantize_type(a.quantize);
    } else if (o == "-r" || o == "--repeats") {
      a.repeats = int(parse_int(o, value(), 1, 1000));
    } else if (o == "--warmup") {
      a.warmup = int(parse_int(o, value(), 0, 100));
    } else if (o == "-c" || o == "--ctx-size") {
      a.ctx_size = int(parse_int(o, value(), 1, 1 << 24));
    } else if (o == "-s" || o == "--seed") {
      a.seed = (unsigned long long)parse_int(o, value(), 0, 1LL << 62);
    } else if (o == "--json") {
      a.json = value();
    } else if (o == "--csv") {
      a.csv = value();
    } else if (o == "--chart") {
      a.chart = value();
    } else if (o == "--chart-script") {
      a.chart_script = value();
    } else {
      usage_error("unknown option '" + o + "'");
    }
  }
  if (a.have_prompt && !a.prompt_ids.empty()) usage_error("--prompt and --prompt-ids exclude each other");
  if (!a.ab.empty()) llm::parse_ab_mappings(a.ab);  // unknown, empty or repeated names: bad usage (exit 2)
  return a;
}

std::vector<int> parse_ids(const std::string& list) {
  std::vector<int> ids;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE || v < 0 || v > (1L << 30))
      usage_error("--prompt-ids: '" + item + "' is not a token id");
    ids.push_back(int(v));
  }
  if (ids.empty()) usage_error("--prompt-ids: empty list");
  return ids;
}

// A fixed prompt for models without a tokenizer: BOS, then 15 ids spread over the vocabulary.
std::vector<int> fixed_prompt(const llm::ModelConfig& c) {
  std::vector<int> ids{c.bos_id};
  for (int i = 1; i < 16; ++i) ids.push_back(int((int64_t(i) * 7919 + 13) % c.vocab_size));
  return ids;
}

std::vector<int> build_prompt(const Args& a, const llm::Model& model) {
  if (!a.prompt_ids.empty()) return parse_ids(a.prompt_ids);
  const std::unique_ptr<llm::Tokenizer> tok = llm::load_tokenizer(model, a.tokenizer);
  if (!tok) {
    if (model.format == "synthetic" && !a.have_prompt) return fixed_prompt(model.config);
    llm::fail("no tokenizer found beside ", model.source, "; pass --tokenizer PATH or --prompt-ids LIST");
  }
  return tok->encode(a.prompt, tok->adds_bos() || a.prompt.empty());
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
  llm::require_cuda_device();  // before the model loads: the one line every CUDA program prints without a GPU
  llm::Model model = llm::load_model(a.model.empty() ? llm::default_model_path() : a.model);
  if (!a.quantize.empty()) llm::quantize_model(model, llm::parse_quantize_type(a.quantize));
  llm::AbOptions opt;
  std::string list = a.ab;
  if (list.empty()) {  // every mapping that can run this model: the quantized forms when decode keeps weights quantized
    const bool quant = llm::default_gemv_name(model, a.dequantize) == llm::kQuantGemvDefault &&
                       std::string(llm::kQuantGemvDefault) != llm::kGemvDefaultMapping;
    if (quant)
      for (int i = 0; i < llm::kQuantGemvCount; ++i) list += (i ? "," : "") + std::string(llm::kQuantGemvNames[i].name);
    else
      list = llm::gemv_mapping_list();
  }
  opt.mappings = llm::parse_ab_mappings(list);
  opt.dequantize = a.dequantize;
  opt.prompt = build_prompt(a, model);
  opt.n_decode = a.n_decode;
  opt.repeats = a.repeats;
  opt.warmup = a.warmup;
  opt.seed = a.seed;
  opt.ctx_size = a.ctx_size;
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
