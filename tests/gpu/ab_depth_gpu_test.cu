// llama-ab --depth and --spec on the CUDA engine (tests/cpu/ab_depth_check.h): a pass after a context prefilled once samples the
// ids of a pass that prefills the whole context itself, for the default BF16 mapping and the thread mapping, at two
// depths (stories260K has 512 positions).
#include <gtest/gtest.h>

#include <string>

#include <vector>

#include "core/gemv_table.h"
#include "engine/speculative.h"
#include "measure/ab_run.h"
#include "tests/cpu/ab_depth_check.h"
#include "tests/cpu/ab_spec_check.h"

using namespace llm;

TEST(CudaAbDepth, APassAtDepthContinuesTheContextPrefilledOnce) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = std::string(LLM_TEST_MODELS) + "/stories260K";
  const Model m = load_model(dir + "/stories260K.bin");
  for (const char* gemv : {kGemvDefaultMapping, "thread"}) {
    for (int depth : {70, 400}) {
      SCOPED_TRACE(std::string(gemv) + " depth " + std::to_string(depth));
      BackendOptions bo;
      bo.device = "cuda";
      bo.ctx_size = 448;
      bo.gemv = gemv;
      llm_test::expect_depth_pass_matches_full_prefill(m, bo, {1, 403, 407, 261, 378, 429, 261, 287}, depth, 24);
    }
  }
}

// llama-ab --spec on the CUDA engine: the lookup pass gives the plain pass's greedy tokens (tests/cpu/ab_spec_check.h),
// and run_ab with a drafter reports its speculative passes beside plain ones on the first mapping.
TEST(CudaAbDepth, SpeculativePassesMatchThePlainPassAndReachTheReport) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = std::string(LLM_TEST_MODELS) + "/stories260K";
  const Model m = load_model(dir + "/stories260K.bin");
  BackendOptions bo;
  bo.device = "cuda";
  bo.ctx_size = 160;
  const std::vector<int> story = {1, 403, 407, 261, 378, 429, 261, 287};
  std::vector<int> repeated;
  for (int i = 0; i < 4; ++i) repeated.insert(repeated.end(), story.begin() + (i ? 1 : 0), story.end());
  llm_test::expect_spec_pass_matches_plain(m, bo, repeated, 0, 40, true);
  llm_test::expect_spec_pass_matches_plain(m, bo, repeated, 70, 40, false);

  AbOptions opt;
  opt.mappings = {kGemvDefaultMapping, "thread"};
  opt.prompt = repeated;
  opt.n_decode = 40;
  opt.repeats = 2;
  opt.warmup = 1;
  opt.progress = nullptr;
  LookupDrafter drafter;
  opt.drafter = &drafter;
  const AbResult res = run_ab(m, opt);
  ASSERT_EQ(res.spec.size(), 1u);
  const auto& sp = res.spec[0];
  EXPECT_EQ(sp.drafter, "lookup");
  EXPECT_EQ(sp.mapping, kGemvDefaultMapping);
  EXPECT_EQ(sp.tokens, 41);
  EXPECT_EQ(sp.tokens_matching_plain, 41);
  EXPECT_GT(sp.drafted, 0);
  EXPECT_GT(sp.accepted, 0);
  EXPECT_LT(sp.steps, 41);
  EXPECT_GT(sp.ms_per_token, 0.0);
  EXPECT_GT(sp.plain_ms_per_token, 0.0);
}
