// The chat session on the CUDA engine with the real default model: turn 2 (KV cache kept, only its own tokens
// prefilled at the end of the cache) continues exactly as a fresh CUDA run over the same ids, under two GEMV mappings
// switched between the turns as /gemv does.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "../cpu/default_model_util.h"
#include "chat/session.h"
#include "chat/template.h"
#include "engine/backend.h"
#include "engine/cuda_backend.h"
#include "engine/generate.h"
#include "models/model.h"
#include "tokenizer/load.h"

namespace {

std::vector<int> greedy_continuation(llm::Backend& b, const llm::ModelConfig& c, const std::vector<int>& prompt,
                                     int n) {
  llm::GenerateOptions go;
  go.n_predict = n;
  go.sampler.temperature = 0.0f;
  std::vector<int> out;
  llm::generate(b, c, prompt, go, [&](int id) { out.push_back(id); });
  return out;
}

TEST(ChatCuda, SecondTurnContinuesAsAFreshRunOverTheSameIds) {
  if (!llm::cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  LLM_REQUIRE_SMOLLM2();
  const llm::Model m = llm::load_model(llm_test::smollm2_path());
  const auto tok = llm::load_tokenizer(m, "");
  llm::BackendOptions o;
  o.device = "cuda";
  o.ctx_size = 512;
  auto b = llm::make_cuda_backend(m, o);
  llm::ChatSessionOptions so;
  so.sampler.temperature = 0.0f;
  llm::ChatSession s(*b, *tok, m.config, llm::ChatTemplate(llm::ChatFormat::kChatML), so);

  const llm::ChatReply r1 = s.send("What is the capital of France?", 24, nullptr);
  EXPECT_NE(r1.text.find("Paris"), std::string::npos) << r1.text;
  dynamic_cast<llm::CudaBackend&>(*b).set_gemv("warp");  // what /gemv warp does between turns
  const size_t before = s.ids().size();
  const llm::ChatReply r2 = s.send("Name three primary colors.", 24, nullptr);
  ASSERT_GT(r2.tokens.size(), 0u);
  EXPECT_EQ(r2.stats.prompt_tokens, int(s.ids().size() - before - r2.tokens.size()));

  const std::vector<int> prompt(s.ids().begin(), s.ids().end() - long(r2.tokens.size()));
  auto fresh = llm::make_cuda_backend(m, o);
  const std::vector<int> again = greedy_continuation(*fresh, m.config, prompt, int(r2.tokens.size()));
  EXPECT_EQ(again, r2.tokens) << "session: " << r2.text << "\nfresh:   " << tok->decode(again);
}

}  // namespace
