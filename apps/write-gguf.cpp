// write-gguf: writes any model the engine loads (GGUF, Hugging Face directory, llama2.c file, synthetic:NAME) as one
// GGUF file with its vocabulary, optionally quantized on the way, so that llama.cpp and run-llama run the same file.
// The command line only: the file is written by models/gguf_writer.h, the quantization is models/quantize_model.h's.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "apps/cli.h"                  // Options, usage_error, run_main
#include "apps/shared_options.h"       // --quantize
#include "core/error.h"                // llm::fail
#include "models/gguf_writer.h"        // write_gguf, GgufWriteOptions
#include "models/model.h"              // load_model, load_synthetic
#include "models/quantize_model.h"     // parse_quantize_type
#include "tokenizer/load.h"            // vocab_for_gguf

namespace {

const char* kUsage =
    "usage: write-gguf --model PATH|synthetic:NAME [--tokenizer PATH] [--quantize TYPE [--quick-quant]] [--seed N]\n"
    "                  [--threads N] --out FILE.gguf\n"
    "\n"
    "Writes the model as a GGUF v3 llama file with its vocabulary, which llama.cpp and run-llama both load.\n"
    "\n";

struct Args {
  std::string model, tokenizer, quantize, out;
  unsigned long long seed = 0;
  int threads = 0;
  bool quick = false;
};

Args parse(int argc, char** argv) {
  using llm::cli::usage_error;
  Args a;
  llm::cli::Options o(kUsage);
  o.text("-m, --model", "PATH", &a.model,
         "a GGUF file, a Hugging Face directory, a llama2.c .bin, or synthetic:NAME (required)");
  o.text("--tokenizer", "PATH", &a.tokenizer, "tokenizer.model or tokenizer.json to write")
      .default_is("the one beside the model, or the GGUF's own vocabulary; synthetic models get a stand-in "
                  "sentencepiece vocabulary");
  llm::cli::add_quantize_option(
      o, &a.quantize,
      "projections and head in that type; q4_k_m: llama.cpp's Q4_K_M mix. Rows a type cannot hold fall back as "
      "llama.cpp does (Q4_K -> Q5_0, Q6_K -> Q8_0, else F16) and are listed. Refused on a model whose weights are "
      "already quantized. Without it every tensor keeps its type (norms are written as F32).");
  llm::cli::add_quick_quant_option(o, &a.quick);
  o.integer("--seed", "N", &a.seed, 0, 1LL << 62, "seed of a synthetic model's weights").allowed("0 to 2^62");
  o.integer("--threads", "N", &a.threads, 1, 1024, "quantization threads").default_is("all cores");
  o.text("-o, --out", "FILE.gguf", &a.out, "the file to write (replaced if it exists; required)");
  o.parse(argc, argv);
  if (a.model.empty()) usage_error("--model is required (a model path or synthetic:NAME)");
  if (a.out.empty()) usage_error("--out is required (the .gguf file to write)");
  if (a.quick) llm::cli::quantize_scheme(a.quantize, a.quick);  // --quick-quant without --quantize: bad usage
  const std::string synthetic = "synthetic:";
  if (o.given("--seed") && a.model.compare(0, synthetic.size(), synthetic) != 0)
    usage_error("--seed applies to synthetic:NAME models only, not '", a.model, "'");
  return a;
}

int run(const Args& a) {
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  const std::string synthetic = "synthetic:";
  const bool is_synthetic = a.model.compare(0, synthetic.size(), synthetic) == 0;
  std::error_code ec;
  if (!is_synthetic && fs::exists(a.out, ec) && fs::equivalent(a.model, a.out, ec))
    llm::fail("--out ", a.out, " is the model file itself; write to another path");
  llm::Model model = is_synthetic ? llm::load_synthetic(a.model.substr(synthetic.size()), a.seed)
                                  : llm::load_model(a.model);
  const auto vocab = llm::vocab_for_gguf(model, a.tokenizer);

  llm::GgufWriteOptions opt;
  if (!a.quantize.empty()) opt.quantize = llm::cli::quantize_scheme(a.quantize, a.quick);
  opt.threads = a.threads;
  opt.name = is_synthetic ? a.model : fs::path(a.model).filename().string();
  int last_pct = -1;
  opt.progress = [&](const std::string& tensor, uint64_t done, uint64_t total) {
    if (total < (uint64_t(256) << 20)) return;  // small files finish before anyone looks
    const int pct = int(100.0 * double(done) / double(total));
    if (pct / 5 == last_pct / 5 && done != total) return;
    last_pct = pct;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "write-gguf: %3d%%  %.2f / %.2f GB  %.0f s  (%s)\n", pct, double(done) / 1e9,
                 double(total) / 1e9, s, tensor.c_str());
  };
  const llm::GgufWriteSummary sum = llm::write_gguf(model, vocab.get(), a.out, opt);

  std::string types;
  for (const auto& [type, n] : sum.tensors_by_type)
    types += (types.empty() ? "" : ", ") + type + " x " + std::to_string(n);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!sum.fallbacks.empty()) {
    std::string list;
    for (const std::string& f : sum.fallbacks) list += (list.empty() ? "" : "; ") + f;
    std::fprintf(stderr, "write-gguf: --quantize %s: %zu tensors fall back as llama.cpp does: %s\n",
                 a.quantize.c_str(), sum.fallbacks.size(), llm::printable(list, 2000).c_str());
  }
  std::fprintf(stderr, "write-gguf: wrote %s (%.1f MB, %.1f s): %s; vocabulary %s\n", a.out.c_str(),
               double(sum.file_bytes) / 1e6, s, types.c_str(), sum.vocab.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return llm::cli::run_main("write-gguf", argc, argv, parse, run); }
