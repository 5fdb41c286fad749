// --quantize: a synthetic float model quantized at load runs on the CPU reference with logits close to the float
// model's (Q8_0 closer than Q4_0), every projection and the head become blocks, and a quantized model is refused;
// the q4_k_m mix picks the types of llama.cpp's Q4_K_M rule, and rows a type cannot hold fall back as llama.cpp's do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
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

// `model` (tiny-gqa) quantized to `type` (every projection takes it: checked), its logits' relative L2 distance from
// want's.
double quantized_distance(const char* type, const std::vector<float>& want, const char* model = "tiny-gqa") {
  llm::Model m = llm::load_synthetic(model);
  llm::quantize_model(m, llm::parse_quantize_type(type), 2);
  for (const auto& l : m.weights.layers)
    for (const llm::HostTensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      EXPECT_EQ(t->quant, uint32_t(llm::parse_quantize_type(type).type)) << t->name;
  const double err = rel_l2(logits_of(m), want);
  std::printf("--quantize %s: logits relative L2 %.3g from the float model\n", type, err);
  return err;
}

TEST(QuantizeModel, LogitsFollowTheFloatModel) {
  const std::vector<float> want = logits_of(llm::load_synthetic("tiny-gqa"));
  const double err[2] = {quantized_distance("q8_0", want), quantized_distance("q4_0", want)};
  EXPECT_GT(err[0], 0.0);   // the weights did change
  EXPECT_LT(err[0], 2e-2);  // Q8_0: 8 bits per weight plus a scale per 32
  EXPECT_LT(err[1], 2e-1);  // Q4_0: coarser
  EXPECT_LT(err[0], err[1]);
}

// The legacy types with a min or a fifth bit (ggml's reference quantizers, byte for byte gguf's: tests/cpu/quant_test.cpp):
// every projection takes the type, and more bits give logits nearer the float model's.
TEST(QuantizeModel, LegacyTypesWithMinsAndFiveBits) {
  const std::vector<float> want = logits_of(llm::load_synthetic("tiny-gqa"));
  const char* types[3] = {"q4_1", "q5_0", "q5_1"};
  double err[3];
  for (int i = 0; i < 3; ++i) {
    err[i] = quantized_distance(types[i], want);
    EXPECT_GT(err[i], 0.0) << types[i];
    EXPECT_LT(err[i], 2e-1) << types[i];
  }
  EXPECT_LT(err[2], err[0]);  // Q5_1 (5 bits and a min) nearer than Q4_1
}

// The K-quants with and without a fifth bit on rows of 256 (tiny-long): Q5_K's logits nearer the float model than
// Q4_K's, Q6_K's nearer still.
TEST(QuantizeModel, KQuantsWithFiveBits) {
  const std::vector<float> want = logits_of(llm::load_synthetic("tiny-long"));
  const double q4 = quantized_distance("q4_k", want, "tiny-long"), q5 = quantized_distance("q5_k", want, "tiny-long"),
               q6 = quantized_distance("q6_k", want, "tiny-long");
  EXPECT_GT(q5, 0.0);
  EXPECT_LT(q5, q4);
  EXPECT_LT(q6, q5);
}

TEST(QuantizeModel, RefusesQuantizedWeightsAndBadTypes) {
  llm::Model m = llm::load_synthetic("tiny-gqa");
  llm::quantize_model(m, llm::parse_quantize_type("q8_0"), 1);
  try {
    llm::quantize_model(m, llm::parse_quantize_type("q4_0"), 1);
    FAIL() << "quantized twice";
  } catch (const llm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("already quantized (Q8_0 x"), std::string::npos) << e.what();
  }
  EXPECT_THROW(llm::parse_quantize_type("q3_k"), llm::Error);
  EXPECT_THROW(llm::parse_quantize_type("Q4_K_M"), llm::Error);
  EXPECT_TRUE(llm::parse_quantize_type("q4_k_m").q4_k_m);
  EXPECT_EQ(llm::parse_quantize_type("q6_k").type, llm::GgmlQuantType::Q6_K);
  EXPECT_EQ(llm::parse_quantize_type("q5_k").type, llm::GgmlQuantType::Q5_K);
}

// llama.cpp's use_more_bits layers, written out by hand: for 32 layers i < 4, i >= 28 and i = 6, 9, ..., 27
// ((i - 4) % 3 == 2); for 2 layers n/8 = 0 and 7n/8 = 1, so layer 1 only.
const std::set<int> kMoreBits32 = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
const std::set<int> kMoreBits2 = {1};

TEST(QuantizeModel, Q4KMPicksTheTypesOfLlamaCppsRule) {
  using llm::GgmlQuantType;
  using llm::WeightRole;
  for (const auto& [n, more] : {std::make_pair(32, kMoreBits32), std::make_pair(2, kMoreBits2)}) {
    for (int l = 0; l < n; ++l) {
      SCOPED_TRACE("layer " + std::to_string(l) + " of " + std::to_string(n));
      const GgmlQuantType six = more.count(l) ? GgmlQuantType::Q6_K : GgmlQuantType::Q4_K;
      EXPECT_EQ(llm::q4_k_m_type(WeightRole::AttnV, l, n, 4096, false), six);
      EXPECT_EQ(llm::q4_k_m_type(WeightRole::FfnDown, l, n, 14336, false), six);
      for (WeightRole r : {WeightRole::AttnQ, WeightRole::AttnK, WeightRole::AttnOutput, WeightRole::FfnGate,
                           WeightRole::FfnUp})
        EXPECT_EQ(llm::q4_k_m_type(r, l, n, 4096, false), GgmlQuantType::Q4_K);
    }
    EXPECT_EQ(llm::q4_k_m_type(WeightRole::Output, -1, n, 4096, false), GgmlQuantType::Q6_K);
    EXPECT_EQ(llm::q4_k_m_type(WeightRole::TokenEmbd, -1, n, 4096, false), GgmlQuantType::Q4_K);
    EXPECT_EQ(llm::q4_k_m_type(WeightRole::TokenEmbd, -1, n, 4096, true), GgmlQuantType::Q6_K);  // tied: the output
    EXPECT_EQ(llm::q4_k_m_type(WeightRole::Output, -1, n, 576, false), GgmlQuantType::Q8_0);  // not a multiple of 256
  }
  // A 70B (llama.cpp's LLM_TYPE_70B): attn_v's Q4_K becomes Q5_K; its Q6_K layers and every other role stay.
  for (int l = 0; l < 80; ++l) {
    const bool more = l < 10 || l >= 70 || (l - 10) % 3 == 2;
    EXPECT_EQ(llm::q4_k_m_type(WeightRole::AttnV, l, 80, 8192, false, true),
              more ? GgmlQuantType::Q6_K : GgmlQuantType::Q5_K) << l;
    EXPECT_EQ(llm::q4_k_m_type(WeightRole::AttnQ, l, 80, 8192, false, true), GgmlQuantType::Q4_K);
    EXPECT_EQ(llm::q4_k_m_type(WeightRole::FfnDown, l, 80, 28672, false, true),
              more ? GgmlQuantType::Q6_K : GgmlQuantType::Q4_K);
  }
}

// The 70B plan (synthetic llama3.1-70b: 80 layers, 64 / 8 heads): what llama-quantize's Q4_K_M makes of Llama 3 70B,
// counted per type, with the attn_v bump to Q5_K; no tensor is built (the plan reads shapes only).
TEST(QuantizeModel, Q4KMPlanOfThe70BShape) {
  const llm::Model m = llm::load_synthetic("llama3.1-70b");
  const auto plan = llm::quantize_plan(m, llm::parse_quantize_type("q4_k_m"));
  std::map<std::string, int> count;
  for (const llm::QuantizeTarget& q : plan) count[llm::ggml_quant_name(q.wanted)]++;
  // use_more_bits on 80 layers: 10 + 10 + every third of the 60 between = 40 layers with Q6_K attn_v and ffn_down.
  EXPECT_EQ(count["Q6_K"], 1 + 2 * 40);   // output + attn_v, ffn_down
  EXPECT_EQ(count["Q5_K"], 40);           // attn_v elsewhere
  EXPECT_EQ(count["Q4_K"], 1 + 80 * 7 - 2 * 40 - 40);
  EXPECT_TRUE(llm::quantize_fallbacks(plan).empty());
  // The same rule without grouped-query attention (llama2-7b, 32 layers) has no Q5_K.
  for (const llm::QuantizeTarget& q : llm::quantize_plan(llm::load_synthetic("llama2-7b"),
                                                         llm::parse_quantize_type("q4_k_m")))
    EXPECT_NE(q.wanted, llm::GgmlQuantType::Q5_K);
}

TEST(QuantizeModel, Q4KMPlanOfA32LayerModelAndOfSmolLM2Shapes) {
  // llama2-7b shapes: 32 layers, every row a multiple of 256, untied: the rule's types with no fallback.
  const llm::Model m = llm::load_synthetic("llama2-7b");
  const auto plan = llm::quantize_plan(m, llm::parse_quantize_type("q4_k_m"));
  ASSERT_EQ(plan.size(), size_t(1 + 32 * 7 + 1));
  std::map<std::string, int> count;
  for (const llm::QuantizeTarget& q : plan) {
    SCOPED_TRACE(q.tensor->name);
    EXPECT_EQ(q.type, uint32_t(q.wanted));
    count[llm::ggml_quant_name(q.wanted)]++;
    const bool v_or_down = q.role == llm::WeightRole::AttnV || q.role == llm::WeightRole::FfnDown;
    const bool six = q.role == llm::WeightRole::Output || (v_or_down && kMoreBits32.count(q.layer));
    EXPECT_EQ(q.wanted, six ? llm::GgmlQuantType::Q6_K : llm::GgmlQuantType::Q4_K);
  }
  EXPECT_EQ(count["Q6_K"], 1 + 2 * 16);  // output + attn_v and ffn_down on 16 layers (what llama-quantize prints)
  EXPECT_EQ(count["Q4_K"], 1 + 32 * 7 - 2 * 16);
  EXPECT_TRUE(llm::quantize_fallbacks(plan).empty());

  // SmolLM2-135M shapes (576 wide, tied): llama-quantize's stand-ins. The tied embedding is the output: Q8_0
  // directly; 576-wide rows Q4_K -> Q5_0, Q6_K -> Q8_0; down_proj (1536 wide) keeps Q4_K/Q6_K.
  const llm::Model s = llm::load_synthetic("smollm2-135m");
  for (const llm::QuantizeTarget& q : llm::quantize_plan(s, llm::parse_quantize_type("q4_k_m"))) {
    SCOPED_TRACE(q.tensor->name);
    if (q.role == llm::WeightRole::TokenEmbd) EXPECT_EQ(q.type, uint32_t(llm::GgmlQuantType::Q8_0));
    else if (q.role == llm::WeightRole::FfnDown) EXPECT_EQ(q.type, uint32_t(q.wanted));
    else if (q.wanted == llm::GgmlQuantType::Q4_K) EXPECT_EQ(q.type, uint32_t(llm::GgmlQuantType::Q5_0));
    else EXPECT_EQ(q.type, uint32_t(llm::GgmlQuantType::Q8_0));
  }
}

TEST(QuantizeModel, RowsATypeCannotHoldFallBackAsLlamaCppDoes) {
  using llm::GgmlQuantType;
  EXPECT_EQ(llm::fallback_quant_type(GgmlQuantType::Q4_K, 4096), uint32_t(GgmlQuantType::Q4_K));
  EXPECT_EQ(llm::fallback_quant_type(GgmlQuantType::Q4_K, 576), uint32_t(GgmlQuantType::Q5_0));
  EXPECT_EQ(llm::fallback_quant_type(GgmlQuantType::Q6_K, 576), uint32_t(GgmlQuantType::Q8_0));
  EXPECT_EQ(llm::fallback_quant_type(GgmlQuantType::Q5_K, 576), uint32_t(GgmlQuantType::Q5_1));
  EXPECT_EQ(llm::fallback_quant_type(GgmlQuantType::Q4_K, 172), 1u);  // F16
  EXPECT_EQ(llm::fallback_quant_type(GgmlQuantType::Q6_K, 100), 1u);
  EXPECT_EQ(llm::fallback_quant_type(GgmlQuantType::Q8_0, 172), 1u);  // "must use F16 due to unusual shape"
  // In a model: tiny-hd (48 wide) quantized as q4_k: every projection F16 or Q5_0, each named in the fallbacks.
  llm::Model m = llm::load_synthetic("tiny-hd");
  const auto plan = llm::quantize_model(m, llm::parse_quantize_type("q4_k"), 2);
  const auto fallbacks = llm::quantize_fallbacks(plan);
  EXPECT_EQ(fallbacks.size(), plan.size());
  EXPECT_EQ(m.weights.layers[0].wq.dtype, llm::DType::F16);
  EXPECT_EQ(m.weights.layers[0].wq.quant, 0u);
  EXPECT_EQ(m.weights.layers[0].wo.quant, uint32_t(GgmlQuantType::Q5_0));  // 96 wide
  EXPECT_NE(std::find(fallbacks.begin(), fallbacks.end(),
                      m.weights.layers[0].wo.name + " (96 wide): Q4_K -> Q5_0"), fallbacks.end());
  // F16 reads are the weights rounded to F16, exactly
  const llm::Model f = llm::load_synthetic("tiny-hd");
  const std::vector<float> want = f.weights.layers[0].wq.to_f32(), got = m.weights.layers[0].wq.to_f32();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], llm::f16_to_f32(llm::f32_to_f16(want[i]))) << i;
}

}  // namespace
