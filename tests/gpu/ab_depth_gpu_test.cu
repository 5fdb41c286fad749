// llama-ab --depth on the CUDA engine (tests/cpu/ab_depth_check.h): a pass after a context prefilled once samples the
// ids of a pass that prefills the whole context itself, for the default BF16 mapping and the thread mapping, at two
// depths (stories260K has 512 positions).
#include <gtest/gtest.h>

#include <string>

#include "core/gemv_table.h"
#include "tests/cpu/ab_depth_check.h"

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
