// --quantize: a synthetic float model quantized at load runs on the CPU reference with logits close to the float
// model's (Q8_0 closer than Q4_0), every projection and the head become blocks, and a quantized model is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/generate.h"
#include "models/model.h"
#include "models/quantize_model.h"

namespace {

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

std::vector<float> logits_of(const llm::Model& m) {
  llm::BackendOptions bo;
  bo.ctx_size = 16;
  auto b = llm::make_backend(m, bo);
  return llm::teacher_forced_logits(*b, {1, 5, 9, 3, 7, 2});
}

TEST(QuantizeModel, LogitsFollowTheFloatModel) {
  const llm::Model ref = llm::load_synthetic("tiny-gqa");
  const std::vector<float> want = logits_of(ref);
  double err[2] = {0, 0};
  int i = 0;
  for (const char* type : {"q8_0", "q4_0"}) {
    llm::Model m = llm::load_synthetic("tiny-gqa");
    llm::quantize_model(m, llm::parse_quantize_type(type), 2);
    for (const auto& l : m.weights.layers)
      for (const llm::HostTensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
        EXPECT_EQ(t->quant, uint32_t(llm::parse_quantize_type(type))) << t->name;
    err[i] = rel_l2(logits_of(m), want);
    std::printf("--quantize %s: logits relative L2 %.3g from the float model\n", type, err[i]);
    ++i;
  }
  EXPECT_GT(err[0], 0.0);   // the weights did change
  EXPECT_LT(err[0], 2e-2);  // Q8_0: 8 bits per weight plus a scale per 32
  EXPECT_LT(err[1], 2e-1);  // Q4_0: coarser
  EXPECT_LT(err[0], err[1]);
}

TEST(QuantizeModel, RefusesQuantizedWeightsAndBadTypes) {
  llm::Model m = llm::load_synthetic("tiny-gqa");
  llm::quantize_model(m, llm::GgmlQuantType::Q8_0, 1);
  try {
    llm::quantize_model(m, llm::GgmlQuantType::Q4_0, 1);
    FAIL() << "quantized twice";
  } catch (const llm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("already quantized (Q8_0 x"), std::string::npos) << e.what();
  }
  EXPECT_THROW(llm::parse_quantize_type("q3_k"), llm::Error);
}

}  // namespace
