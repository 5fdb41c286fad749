// make-hf-model: writes a synthetic model (exact shapes of a real checkpoint, counter-based weights) as a Hugging
// Face directory that transformers and this engine can both load.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "models/hf_writer.h"
#include "models/model.h"

namespace {

void usage(FILE* f) {
  std::string names;
  for (const auto& n : llm::synthetic_model_names()) names += (names.empty() ? "" : ", ") + n;
  std::fprintf(f,
               "usage: make-hf-model --synthetic NAME --out DIR [--dtype bf16|f16|f32] [--shards N] [--seed S]\n"
               "                     [--rope-parameters] [--tokenizer PATH] [--force]\n"
               "  NAME: %s\n"
               "  --rope-parameters  write transformers-5 rope_parameters instead of rope_theta + rope_scaling\n"
               "  --force            write into a non-empty DIR (its old weight files are removed)\n",
               names.c_str());
}

llm::DType parse_dtype(const std::string& s) {
  if (s == "bf16") return llm::DType::BF16;
  if (s == "f16") return llm::DType::F16;
  if (s == "f32") return llm::DType::F32;
  llm::fail("--dtype must be bf16, f16 or f32, found '", s, "'");
}

long long parse_int(const std::string& flag, const std::string& s) {
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end || v < 0) llm::fail(flag, " needs a non-negative integer, found '", s, "'");
  return v;
}

int run(int argc, char** argv) {
  std::string name, out;
  uint64_t seed = 0;
  llm::HfWriteOptions opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) llm::fail(a, " needs a value");
      return argv[++i];
    };
    if (a == "--synthetic") name = value();
    else if (a == "--out") out = value();
    else if (a == "--dtype") opt.dtype = parse_dtype(value());
    else if (a == "--shards") opt.shards = int(parse_int(a, value()));
    else if (a == "--seed") seed = uint64_t(parse_int(a, value()));
    else if (a == "--rope-parameters") opt.rope_parameters = true;
    else if (a == "--tokenizer") opt.tokenizer = value();
    else if (a == "--force") opt.overwrite = true;
    else if (a == "-h" || a == "--help") return usage(stdout), 0;
    else llm::fail("unknown argument '", a, "' (see --help)");
  }
  if (name.empty() || out.empty()) {
    usage(stderr);
    return 2;
  }
  llm::Model m = llm::load_synthetic(name, seed);
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
  llm::write_hf_model(m, out, opt);
  std::fprintf(stderr, "make-hf-model: wrote synthetic:%s (seed %llu) to %s\n", name.c_str(),
               (unsigned long long)seed, out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
