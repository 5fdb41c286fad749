// Issue 14's quality bar on a real model and a long real text: SmolLM2-135M-Instruct (the default model, its Q4_1
// GGUF kept quantized) over Debian's GPL-3 text (tests/data/long_text_gpl3.txt, 7,639 ids, one window), teacher
// forced on the CUDA engine. With the BF16 KV cache the perplexity is within 0.5% of transformers' float32 figure on
// the same ids (tests/data/long_text_gpl3_hf_ref.json, tools/hf_long_ppl.py); with the FP8 KV cache within 2% of
// ours with BF16. Measured on the H200 (2026-12-01): 15.626 (HF 15.6209) and 15.894 (+1.7%). Skips without the
// model (scripts/setup.sh fetches it) or a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../cpu/default_model_util.h"
#include "engine/backend.h"
#include "engine/cuda_backend.h"
#include "engine/perplexity.h"
#include "models/model.h"

namespace {

double ppl_on_cuda(const llm::Model& m, const std::vector<int>& ids, llm::KvDtype kv) {
  llm::BackendOptions o;
  o.device = "cuda";
  o.kv_dtype = kv;
  o.ctx_size = int(ids.size());
  auto eng = llm::make_cuda_engine(m, o);
  const llm::PerplexityResult r = llm::perplexity(*eng, ids);
  EXPECT_EQ(r.scored, int(ids.size()) - 1);
  return r.ppl;
}

}  // namespace

TEST(CudaLongText, PerplexityMatchesTransformersWithBf16KvAndFp8StaysWithin2Percent) {
  if (!llm::cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  LLM_REQUIRE_SMOLLM2();
  std::ifstream in(std::string(LLM_SOURCE_DIR) + "/tests/data/long_text_gpl3_hf_ref.json");
  ASSERT_TRUE(in) << "tests/data/long_text_gpl3_hf_ref.json missing";
  const nlohmann::json ref = nlohmann::json::parse(in);
  const std::vector<int> ids = ref.at("ids").get<std::vector<int>>();
  const double hf = ref.at("perplexity").get<double>();
  ASSERT_GE(ids.size(), 4000u);
  const llm::Model m = llm::load_model(llm_test::smollm2_path());
  const double bf16 = ppl_on_cuda(m, ids, llm::KvDtype::BF16);
  const double fp8 = ppl_on_cuda(m, ids, llm::KvDtype::FP8);
  std::printf("long text, %zu ids: transformers %.4f, ours BF16 KV %.4f (%+.3f%%), FP8 KV %.4f (%+.3f%% vs BF16)\n",
              ids.size(), hf, bf16, 100.0 * (bf16 / hf - 1.0), fp8, 100.0 * (fp8 / bf16 - 1.0));
  EXPECT_LE(std::fabs(bf16 / hf - 1.0), 0.005) << "BF16 KV against transformers";
  EXPECT_LE(std::fabs(fp8 / bf16 - 1.0), 0.02) << "FP8 KV against BF16 KV";
  EXPECT_NE(fp8, bf16) << "FP8 KV gave BF16's perplexity exactly: is the FP8 cache in use?";
}
