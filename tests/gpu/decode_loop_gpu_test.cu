// The one decode loop on the CUDA engine: run-llama, a chat turn and llama-ab produce the same ids, for every GEMV
// mapping in the registry (stories260K).
#include <gtest/gtest.h>

#include <string>

#include "core/gemv_names.h"
#include "tests/cpu/decode_loop_check.h"
#include "tokenizer/load.h"

using namespace llm;

TEST(CudaDecodeLoop, RunLlamaChatAndAbProduceTheSameIds) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = std::string(LLM_TEST_MODELS) + "/stories260K";
  Model m = load_model(dir + "/stories260K.bin");
  auto tok = load_tokenizer(m, dir + "/tok512.model");
  for (int i = 0; i < kGemvMappingCount; ++i) {
    SCOPED_TRACE(kGemvMappingNames[i].name);
    BackendOptions bo;
    bo.device = "cuda";
    bo.ctx_size = 256;
    bo.gemv = kGemvMappingNames[i].name;
    llm_test::expect_one_loop(m, *tok, bo, 40);
  }
}
