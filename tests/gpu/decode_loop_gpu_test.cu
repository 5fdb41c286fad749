// The one decode loop on the CUDA engine: run-llama, a chat turn and llama-ab produce the same ids, for every GEMV
// mapping in the registry (stories260K).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/gemv_table.h"
#include "engine/decode_loop.h"
#include "tests/cpu/decode_loop_check.h"
#include "tokenizer/load.h"

using namespace llm;

TEST(CudaDecodeLoop, RunLlamaChatAndAbProduceTheSameIds) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = std::string(LLM_TEST_MODELS) + "/stories260K";
  Model m = load_model(dir + "/stories260K.bin");
  auto tok = load_tokenizer(m, dir + "/tok512.model");
  for (const GemvRow& row : kGemvTable) {
    if (!row.has_bf16()) continue;  // stories260K is F32: decode runs BF16 forms only
    SCOPED_TRACE(row.name);
    BackendOptions bo;
    bo.device = "cuda";
    bo.ctx_size = 256;
    bo.gemv = row.name;
    llm_test::expect_one_loop(m, *tok, bo, 40);
  }
}

// The CUDA engine runs ahead (Backend::runs_ahead): the loop queues step t + 1 before it waits for step t's id. The
// same loops with one host round trip per token (EngineTuning::run_ahead = false) must give the same ids, stop
// reasons, step counts and caches, on the graph and the persistent path: greedy and seeded sampling, a stop id, a
// callback stop, the context's end, and chat turns that continue after a stop (where the step queued ahead was
// dropped and its KV row must not matter).
TEST(CudaDecodeLoop, RunAheadMatchesOneRoundTripPerToken) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = std::string(LLM_TEST_MODELS) + "/stories260K";
  Model m = load_model(dir + "/stories260K.bin");
  for (const bool persistent : {false, true}) {
    SCOPED_TRACE(persistent ? "persistent" : "graph");
    auto make = [&](bool ahead, int ctx) {
      BackendOptions bo;
      bo.device = "cuda";
      bo.ctx_size = ctx;
      bo.gemv = "warp-r2";
      bo.persistent = persistent;
      bo.tuning.run_ahead = ahead;
      return make_backend(m, bo);
    };
    auto a = make(true, 256), b = make(false, 256);
    ASSERT_TRUE(a->runs_ahead());
    ASSERT_FALSE(b->runs_ahead());
    const std::vector<int> p1 = {1, 365, 301, 261, 400};
    auto both = [&](const std::vector<int>& prompt, const DecodeLoopOptions& o, int stop_after) {
      int seen_a = 0, seen_b = 0;
      const DecodeLoopResult ra = decode_loop(*a, prompt, o, [&](int) { return ++seen_a < stop_after; });
      const DecodeLoopResult rb = decode_loop(*b, prompt, o, [&](int) { return ++seen_b < stop_after; });
      EXPECT_EQ(ra.tokens, rb.tokens);
      EXPECT_EQ(ra.stop, rb.stop);
      EXPECT_EQ(ra.eval_tokens, rb.eval_tokens);
      EXPECT_EQ(ra.next_step, rb.next_step);
      EXPECT_EQ(ra.prefilled, rb.prefilled);
      return ra;
    };
    DecodeLoopOptions o;
    o.sampler.temperature = 0.0f;
    o.max_new = 30;
    const DecodeLoopResult greedy = both(p1, o, 1 << 30);
    EXPECT_EQ(greedy.stop, StopReason::kLength);
    ASSERT_EQ(greedy.tokens.size(), 30u);
    EXPECT_EQ(greedy.eval_tokens, 29);
    // Seeded sampling: the same draws per step.
    o.sampler.temperature = 0.9f;
    o.sampler.top_k = 40;
    o.sampler.top_p = 0.9f;
    o.sampler.seed = 7;
    const DecodeLoopResult sampled = both(p1, o, 1 << 30);
    EXPECT_NE(sampled.tokens, greedy.tokens) << "temperature 0.9 gave the greedy sequence";
    // A stop id (the greedy run's 6th token, first seen there), then the callback stopping after 4 tokens.
    o.sampler.temperature = 0.0f;
    size_t k = 5;
    while (k > 0 && std::find(greedy.tokens.begin(), greedy.tokens.begin() + k, greedy.tokens[k]) !=
                        greedy.tokens.begin() + k)
      --k;
    o.stop_ids = {greedy.tokens[k]};
    const DecodeLoopResult eos = both(p1, o, 1 << 30);
    EXPECT_EQ(eos.stop, StopReason::kEos);
    EXPECT_EQ(eos.tokens.size(), k);
    o.stop_ids.clear();
    EXPECT_EQ(both(p1, o, 4).stop, StopReason::kCallback);
    // Chat turns: every token cached; the second turn continues after the first (stopped by the callback, then by a
    // stop id), over the rows the dropped steps wrote.
    o.cache_every_token = true;
    o.max_new = 12;
    const DecodeLoopResult t1 = both(p1, o, 7);
    ASSERT_EQ(t1.tokens.size(), 7u);
    DecodeLoopOptions o2 = o;
    o2.start_pos = int(p1.size() + t1.tokens.size());
    o2.first_step = t1.next_step;
    const std::vector<int> p2 = {2, 1, 404, 320};
    const DecodeLoopResult t2 = both(p2, o2, 1 << 30);
    EXPECT_EQ(t2.stop, StopReason::kLength);
    o2.stop_ids = {t2.tokens[3]};
    const DecodeLoopResult t2s = both(p2, o2, 1 << 30);
    EXPECT_EQ(t2s.stop, StopReason::kEos);
    DecodeLoopOptions o3 = o2;
    o3.stop_ids.clear();
    o3.start_pos = o2.start_pos + int(p2.size() + t2s.tokens.size());
    o3.first_step = t2s.next_step;
    EXPECT_EQ(both({5, 6, 7}, o3, 1 << 30).tokens.size(), 12u);
    // The context's end: a 10-token prompt in 16 positions, without and with caching every token.
    a = make(true, 16);
    b = make(false, 16);
    DecodeLoopOptions oc;
    oc.sampler.temperature = 0.0f;
    oc.max_new = 100;
    const std::vector<int> p10(10, 1);
    DecodeLoopResult c = both(p10, oc, 1 << 30);
    EXPECT_EQ(c.stop, StopReason::kContext);
    EXPECT_EQ(c.tokens.size(), 7u);
    oc.cache_every_token = true;
    c = both(p10, oc, 1 << 30);
    EXPECT_EQ(c.stop, StopReason::kContext);
    EXPECT_EQ(c.tokens.size(), 6u);
  }
}
