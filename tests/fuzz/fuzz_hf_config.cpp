// libFuzzer target: arbitrary bytes as config.json, and the bytes after the first NUL (if any) as the
// generation_config.json beside it. Refusal must be llm::Error; an accepted config must pass validate() and yield a
// weight table of the promised length.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "fuzz_common.h"
#include "models/hf_config.h"

namespace {

constexpr const char* kTarget = "fuzz_hf_config";

void check_accepted(const llm::ModelConfig& c) {
  try {
    c.validate("fuzz");
  } catch (const llm::Error& e) {
    llm_fuzz::finding(kTarget, std::string("accepted config fails validate(): ") + e.what());
  }
  if (c.eos_ids.empty()) llm_fuzz::finding(kTarget, "accepted config without eos ids");
  llm::ModelWeights w;
  const size_t n = llm::hf_weight_table(c, w).size();
  if (n != 2 + 9 * size_t(c.n_layers) + (c.tied_embeddings ? 0 : 1))
    llm_fuzz::finding(kTarget, "weight table has " + std::to_string(n) + " entries");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = llm_fuzz::temp_dir();
  const std::string gen = dir + "/generation_config.json";
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t config_size = nul ? size_t(nul - data) : size;
  llm_fuzz::write_file(dir + "/config.json", data, config_size);
  if (nul)
    llm_fuzz::write_file(gen, nul + 1, size - config_size - 1);
  else
    std::remove(gen.c_str());
  llm_fuzz::expect_ok_or_error(kTarget, [&] { check_accepted(llm::load_hf_config(dir + "/config.json")); });
  return 0;
}
