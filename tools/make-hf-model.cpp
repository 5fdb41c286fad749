// make-hf-model: writes a synthetic model (exact shapes of a real checkpoint, counter-based weights) as a Hugging
// Face directory that transformers and this engine can both load.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/cli.h"  // Options, usage_error, run_main
#include "core/error.h"
#include "models/hf_writer.h"
#include "models/model.h"

namespace {

struct Args {
  std::string name, out;
  unsigned long long seed = 0;
  llm::HfWriteOptions opt;
};

llm::DType parse_dtype(const std::string& s) {
  return s == "f16" ? llm::DType::F16 : s == "f32" ? llm::DType::F32 : llm::DType::BF16;  // checked by the table
}

Args parse(int argc, char** argv) {
  Args a;
  llm::cli::Options o(
      "usage: make-hf-model --synthetic NAME --out DIR [--dtype bf16|f16|f32] [--shards N] [--seed S]\n"
      "                     [--rope-parameters] [--tokenizer PATH] [--force]\n"
      "\n");
  o.choice("--synthetic", "NAME", &a.name, llm::synthetic_model_names(), "the synthetic model to write; required");
  o.text("--out", "DIR", &a.out, "the directory to write (required)");
  o.choice("--dtype", "T", &a.opt.dtype, {"bf16", "f16", "f32"}, parse_dtype, "on-disk element type")
      .default_is("bf16");
  o.integer("--shards", "N", &a.opt.shards, 1, 1000000,
            "1: model.safetensors; N > 1: N shards and model.safetensors.index.json (at most one per tensor)");
  o.integer("--seed", "S", &a.seed, 0, 1LL << 62, "seed of the counter-based weights").allowed("0 to 2^62");
  o.flag("--rope-parameters", &a.opt.rope_parameters,
         "write transformers-5 rope_parameters instead of rope_theta + rope_scaling");
  o.text("--tokenizer", "PATH", &a.opt.tokenizer, "tokenizer.model to copy beside the weights");
  o.flag("--force", &a.opt.overwrite, "write into a non-empty DIR (its old weight files are removed)");
  o.parse(argc, argv);
  if (a.name.empty() || a.out.empty()) llm::cli::usage_error("--synthetic NAME and --out DIR are required");
  return a;
}

int run(const Args& a) {
  llm::Model m = llm::load_synthetic(a.name, a.seed);
  llm::HfWriteOptions opt = a.opt;
  const auto start = std::chrono::steady_clock::now();
  int last_pct = -1;
  opt.progress = [&](const std::string& tensor, uint64_t done, uint64_t total) {
    // A line per 5% on models over 256 MB; small ones finish before anyone looks.
    if (total < (uint64_t(256) << 20)) return;
    int pct = int(100.0 * double(done) / double(total));
    if (pct / 5 == last_pct / 5 && done != total) return;
    last_pct = pct;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "make-hf-model: %3d%%  %.2f / %.2f GB  %.0f s  (%s)\n", pct, double(done) / 1e9,
                 double(total) / 1e9, s, tensor.c_str());
  };
  llm::write_hf_model(m, a.out, opt);
  std::fprintf(stderr, "make-hf-model: wrote synthetic:%s (seed %llu) to %s\n", a.name.c_str(), a.seed,
               a.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return llm::cli::run_main("make-hf-model", argc, argv, parse, run); }
