// The one decode loop (engine/decode_loop.h) on the CPU reference: run-llama, a chat turn and llama-ab produce the
// same ids; the loop's stop reasons, positions and sampler steps.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "decode_loop_check.h"
#include "engine/decode_loop.h"
#include "tokenizer/load.h"

using namespace llm;

namespace {

const std::string kStories = std::string(LLM_TEST_MODELS) + "/stories260K";

TEST(DecodeLoop, RunLlamaChatAndAbProduceTheSameIds) {
  Model m = load_model(kStories + "/stories260K.bin");
  auto tok = load_tokenizer(m, kStories + "/tok512.model");
  BackendOptions bo;
  bo.ctx_size = 256;
  llm_test::expect_one_loop(m, *tok, bo, 40);
}

TEST(DecodeLoop, StopReasonsAndCacheEveryToken) {
  Model m = load_model(kStories + "/stories260K.bin");
  BackendOptions bo;
  bo.ctx_size = 16;
  auto b = make_backend(m, bo);
  DecodeLoopOptions o;
  o.sampler.temperature = 0.0f;
  o.max_new = 100;
  // Without caching the last token, a 10-token prompt in 16 positions produces 7 tokens: 6 decoded at 10..15, the
  // 7th sampled from position 15's logits has no position left.
  std::vector<int> prompt(10, 1);
  DecodeLoopResult r = decode_loop(*b, prompt, o);
  EXPECT_EQ(r.stop, StopReason::kContext);
  EXPECT_EQ(r.tokens.size(), 7u);
  EXPECT_EQ(r.eval_tokens, 6);
  EXPECT_EQ(r.next_step, 7u);
  // Caching every token: each produced token takes a position, so 6 fit.
  o.cache_every_token = true;
  r = decode_loop(*b, prompt, o);
  EXPECT_EQ(r.stop, StopReason::kContext);
  EXPECT_EQ(r.tokens.size(), 6u);
  // A stop id ends the loop before the token is produced; the callback can stop after a token.
  o.cache_every_token = false;
  o.stop_ids = {r.tokens[0]};
  EXPECT_EQ(decode_loop(*b, prompt, o).stop, StopReason::kEos);
  o.stop_ids.clear();
  int seen = 0;
  r = decode_loop(*b, prompt, o, [&](int) { return ++seen < 3; });
  EXPECT_EQ(r.stop, StopReason::kCallback);
  EXPECT_EQ(r.tokens.size(), 3u);
  // A start position continues after cached tokens; a prompt past the context is refused.
  o.start_pos = 12;
  EXPECT_THROW(decode_loop(*b, prompt, o), Error);
  o.start_pos = 3;
  o.max_new = 2;
  r = decode_loop(*b, prompt, o);
  EXPECT_EQ(r.stop, StopReason::kLength);
  EXPECT_EQ(r.prefilled, 10);
  EXPECT_EQ(std::string(stop_reason_name(r.stop)), "length");
}

}  // namespace
