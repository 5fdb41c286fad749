// libFuzzer target: arbitrary bytes as a llama2.c checkpoint (.bin). Refusal must be llm::Error; an accepted file
// must have every weight inside the file, and (when tiny) must run one CPU forward step and then either sample an
// in-range token or stop with the non-finite-logits error (weights holding NaN, Inf or huge values) -- and that error
// only when the logits really hold NaN or Inf.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "fuzz_common.h"
#include "models/model.h"

namespace {

constexpr const char* kTarget = "fuzz_llama2c";

void check_inside(const llm::HostTensor& t, const uint8_t* base, size_t size) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  if (p < base + 28 || p + t.nbytes() > base + size) llm_fuzz::finding(kTarget, "tensor outside the file: " + t.name);
}

void check_accepted(const llm::Model& m, size_t size) {
  const llm::ModelWeights& w = m.weights;
  if (int(w.layers.size()) != m.config.n_layers) llm_fuzz::finding(kTarget, "layer count differs from the header");
  const auto* base = static_cast<const uint8_t*>(w.embedding.data);
  base -= 28;  // the embedding is the first weight, right after the 7-int header
  check_inside(w.embedding, base, size);
  check_inside(w.final_norm, base, size);
  check_inside(w.head, base, size);
  for (const llm::LayerWeights& l : w.layers)
    for (const llm::HostTensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up,
                                     &l.w_down})
      check_inside(*t, base, size);
  if (size > (1 << 16)) return;  // forward only on tiny models: keeps executions fast

  llm_fuzz::check_forward_and_sample(kTarget, m);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = llm_fuzz::temp_dir() + "/model.bin";
  llm_fuzz::write_file(path, data, size);
  llm_fuzz::expect_ok_or_error(kTarget, [&] { check_accepted(llm::load_llama2c(path), size); });
  return 0;
}
