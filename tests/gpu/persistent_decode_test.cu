// The persistent decode path (--decode persistent, kernels/persistent_decode.h) against the graph path with the same
// GEMV mapping: teacher-forced logits within relative L2 1e-5 at every position (stories260K, the synthetic shapes,
// awkward shapes, a context long enough for split-KV attention and its merge); bitwise repeatability over 20 runs of
// 1,000 steps; a wait that never ends becomes an error (and the engine stays usable); refusals by name; the profile
// adds up; a chat reply interrupted like Ctrl-C leaves the engine usable.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../cpu/default_model_util.h"
#include "chat/session.h"
#include "chat/template.h"
#include "core/error.h"
#include "engine/cuda_backend.h"
#include "engine/generate.h"
#include "models/model.h"
#include "tests/gpu/engine_gpu_test_util.h"
#include "tokenizer/load.h"

using namespace llm;
using llm_gpu_test::rel_l2;
using llm_gpu_test::test_tokens;

namespace {

Model stories260k() { return load_model(std::string(LLM_TEST_MODELS) + "/stories260K/stories260K.bin"); }

BackendOptions cuda_options(const std::string& gemv, int ctx, bool persistent) {
  BackendOptions bo;
  bo.device = "cuda";
  bo.ctx_size = ctx;
  bo.gemv = gemv;
  bo.persistent = persistent;
  return bo;
}

// Prefills n_prefill tokens on both paths, then decodes n_steps teacher-forced tokens; returns the worst relative L2
// distance of the persistent logits from the graph logits (after prefill and at every decode position).
double worst_distance(const Model& m, const std::string& gemv, int ctx, int n_prefill, int n_steps) {
  auto graph = make_cuda_engine(m, cuda_options(gemv, ctx, false));
  auto pers = make_cuda_engine(m, cuda_options(gemv, ctx, true));
  EXPECT_TRUE(pers->persistent());
  EXPECT_FALSE(graph->persistent());
  const std::vector<int> t = test_tokens(m.config, n_prefill + n_steps);
  double worst = 0.0;
  if (n_prefill > 0) {
    graph->prefill(t.data(), n_prefill, 0);
    pers->prefill(t.data(), n_prefill, 0);
    worst = rel_l2(pers->logits(), graph->logits());
  }
  for (int i = 0; i < n_steps; ++i) {
    const int pos = n_prefill + i;
    graph->decode(t[size_t(pos)], pos);
    pers->decode(t[size_t(pos)], pos);
    const double d = rel_l2(pers->logits(), graph->logits());
    EXPECT_LE(d, 1e-5) << "position " << pos;
    if (d > 1e-5) return d;  // one position is enough to show it
    worst = std::max(worst, d);
  }
  return worst;
}

TEST(PersistentDecode, MatchesGraphPathOnStories260K) {
  REQUIRE_GPU();
  const Model m = stories260k();
  for (const char* gemv : {"warp-r2", "warp", "warp-few"}) {
    SCOPED_TRACE(gemv);
    const double d = worst_distance(m, gemv, 256, 0, 200);
    std::printf("stories260K %s: worst rel L2 %.3g over 200 positions\n", gemv, d);
  }
}

TEST(PersistentDecode, MatchesGraphPathOnSyntheticAndAwkwardShapes) {
  REQUIRE_GPU();
  // tiny-odd: vocabulary 1001, hidden 300 (no multiple of 8), a GQA group of 5, q_dim 160 != dim 200.
  for (const char* name : {"tiny-gqa", "tiny-odd", "smollm2-135m"}) {
    SCOPED_TRACE(name);
    const Model m = load_synthetic(name, 5);
    for (const char* gemv : {"warp-r2", "warp"}) {
      SCOPED_TRACE(gemv);
      const double d = worst_distance(m, gemv, 256, 17, 60);
      std::printf("%s %s: worst rel L2 %.3g\n", name, gemv, d);
    }
  }
}

TEST(PersistentDecode, MatchesGraphPathOnTheLargerShapes) {
  REQUIRE_GPU();
  for (const char* name : {"tinyllama-1.1b", "llama3.1-8b"}) {
    SCOPED_TRACE(name);
    const Model m = load_synthetic(name, 7);
    const double d = worst_distance(m, "warp-r2", 1024, 40, 8);
    std::printf("%s warp-r2: worst rel L2 %.3g\n", name, d);
  }
}

// Past a few hundred positions attention splits each kv head's keys over several blocks and the last one merges them.
TEST(PersistentDecode, MatchesGraphPathWithSplitKeysAndMerge) {
  REQUIRE_GPU();
  for (const char* name : {"tiny-long", "tiny-odd"}) {
    SCOPED_TRACE(name);
    const Model m = load_synthetic(name, 11);
    const double d = worst_distance(m, "warp-r2", 4096, 3000, 24);
    std::printf("%s after 3000 prefilled: worst rel L2 %.3g\n", name, d);
  }
}

// 20 runs of 1,000 greedy steps: the same tokens and bit-identical logits every time (the counters and the split
// merge must not make the result depend on which block arrives first).
TEST(PersistentDecode, ThousandStepsTwentyTimesAreBitwiseIdentical) {
  REQUIRE_GPU();
  const Model m = stories260k();
  auto b = make_cuda_engine(m, cuda_options("warp-r2", 1024, true));
  SamplerParams greedy;
  greedy.temperature = 0.0f;
  std::vector<int> ref_tokens;
  std::vector<float> ref_logits;
  for (int run = 0; run < 20; ++run) {
    std::vector<int> tokens;
    std::vector<float> logits;
    int tok = m.config.bos_id;
    for (int pos = 0; pos < 1000; ++pos) {
      b->decode(tok, pos);
      const std::vector<float> l = b->logits();
      logits.insert(logits.end(), l.begin(), l.end());
      tok = b->sample(greedy, uint64_t(pos));
      tokens.push_back(tok);
    }
    if (run == 0) {
      ref_tokens = tokens;
      ref_logits = logits;
      continue;
    }
    ASSERT_EQ(tokens, ref_tokens) << "run " << run;
    ASSERT_EQ(0, std::memcmp(logits.data(), ref_logits.data(), logits.size() * sizeof(float))) << "run " << run;
  }
}

// A block that never arrives (LLM_PERSISTENT_FAULT=1): the others time out, the step fails with an error naming the
// wait, and the next step (fault gone) runs and matches the graph path.
TEST(PersistentDecode, AWaitThatNeverEndsIsAnErrorNotAHang) {
  REQUIRE_GPU();
  const Model m = load_synthetic("tiny-gqa", 3);
  auto graph = make_cuda_engine(m, cuda_options("warp-r2", 64, false));
  auto pers = make_cuda_engine(m, cuda_options("warp-r2", 64, true));
  ASSERT_GT(pers->persistent_grid(), 1) << "the fault needs a second block";
  setenv("LLM_PERSISTENT_FAULT", "1", 1);
  setenv("LLM_PERSISTENT_TIMEOUT_MS", "200", 1);
  std::string what;
  try {
    pers->decode(5, 0);
    pers->logits();
  } catch (const Error& e) {
    what = e.what();
  }
  unsetenv("LLM_PERSISTENT_FAULT");
  unsetenv("LLM_PERSISTENT_TIMEOUT_MS");
  EXPECT_NE(what.find("timed out"), std::string::npos) << what;
  EXPECT_NE(what.find("persistent decode"), std::string::npos) << what;
  for (int pos = 0; pos < 5; ++pos) {
    graph->decode(5 + pos, pos);
    pers->decode(5 + pos, pos);
    EXPECT_LE(rel_l2(pers->logits(), graph->logits()), 1e-5) << "position " << pos;
  }
}

TEST(PersistentDecode, RefusesWhatItCannotRunByName) {
  REQUIRE_GPU();
  const Model m = stories260k();
  auto expect_refusal = [&](const BackendOptions& bo, const std::string& needle) {
    std::string what;
    try {
      make_cuda_engine(m, bo);
    } catch (const Error& e) {
      what = e.what();
    }
    EXPECT_NE(what.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << what;
  };
  for (const char* gemv : {"cublas", "thread", "colmajor", "thread-splitk"})
    expect_refusal(cuda_options(gemv, 64, true), std::string("'") + gemv + "' cannot run inside it");
  BackendOptions fp8 = cuda_options("warp-r2", 64, true);
  fp8.kv_dtype = KvDtype::FP8;
  const Model hd64 = load_synthetic("tiny-long", 1);
  {
    std::string what;
    try {
      make_cuda_engine(hd64, fp8);
    } catch (const Error& e) {
      what = e.what();
    }
    EXPECT_NE(what.find("--kv-dtype fp8"), std::string::npos) << what;
  }
  BackendOptions unfused = cuda_options("warp-r2", 64, true);
  unfused.fuse_projections = false;
  expect_refusal(unfused, "fused projections");
  {
    std::string what;
    try {
      make_cuda_engine(load_synthetic("tiny-hd", 1), cuda_options("warp-r2", 64, true));
    } catch (const Error& e) {
      what = e.what();
    }
    EXPECT_NE(what.find("head_dim 24"), std::string::npos) << what;
  }
  // Switching to a mapping it cannot run, while persistent, is refused and keeps the current one.
  auto b = make_cuda_engine(m, cuda_options("warp-r2", 64, true));
  EXPECT_THROW(b->set_gemv("cublas"), Error);
  EXPECT_EQ(b->gemv(), "warp-r2");
  b->set_gemv("warp");
  EXPECT_EQ(b->gemv(), "warp");
  b->decode(1, 0);
  EXPECT_EQ(b->logits().size(), size_t(m.config.vocab_size));
}

// Profiled persistent steps: the parts (waits included) add up to the kernel's measured time, every stage is seen.
TEST(PersistentDecode, ProfileAddsUpAndSeesEveryStage) {
  REQUIRE_GPU();
  const Model m = load_synthetic("smollm2-135m", 2);
  auto b = make_cuda_engine(m, cuda_options("warp-r2", 256, true));
  for (int pos = 0; pos < 3; ++pos) b->decode(pos + 1, pos);
  b->reset_profile();
  b->set_profiling(true);
  for (int pos = 3; pos < 13; ++pos) b->decode(pos + 1, pos);
  b->set_profiling(false);
  const DecodeProfile p = b->profile();
  EXPECT_EQ(p.steps, 10);
  double sum = 0.0;
  for (int part = 0; part < DecodeProfile::kParts; ++part) sum += p.ms[part];
  EXPECT_NEAR(sum, p.total_ms, 1e-6 * p.total_ms);
  for (int part : {DecodeProfile::kQKV, DecodeProfile::kO, DecodeProfile::kGateUp, DecodeProfile::kDown,
                   DecodeProfile::kHead, DecodeProfile::kAttention, DecodeProfile::kWait, DecodeProfile::kNorm})
    EXPECT_GT(p.ms[part], 0.0) << DecodeProfile::part_name(part);
  std::printf("smollm2-135m persistent, per token: total %.4f ms", p.total_ms / 10);
  for (int part = 0; part < DecodeProfile::kParts; ++part)
    if (p.ms[part] > 0) std::printf(", %s %.4f", DecodeProfile::part_name(part), p.ms[part] / 10);
  std::printf("\n");
}

// A chat reply interrupted as Ctrl-C does (the flag raised while tokens stream) on the persistent path: the next turn
// runs and continues exactly as a fresh graph-path run over the same ids.
TEST(PersistentDecode, InterruptedChatReplyLeavesTheEngineUsable) {
  REQUIRE_GPU();
  LLM_REQUIRE_SMOLLM2();
  const Model m = load_model(llm_test::smollm2_path());
  const auto tok = load_tokenizer(m, "");
  BackendOptions o = cuda_options("warp-r2", 512, true);
  o.dequantize = true;
  auto b = make_cuda_backend(m, o);
  ChatSessionOptions so;
  so.sampler.temperature = 0.0f;
  ChatSession s(*b, *tok, m.config, ChatTemplate(ChatFormat::kChatML), so);
  volatile std::sig_atomic_t interrupt = 0;
  int pieces = 0;
  const ChatReply r1 = s.send("Tell me a long story about a dragon.", 64,
                              [&](const std::string&) {
                                if (++pieces == 4) interrupt = 1;
                              },
                              &interrupt);
  EXPECT_EQ(r1.stop_reason, "interrupted");
  interrupt = 0;
  const size_t before = s.ids().size();
  const ChatReply r2 = s.send("What is the capital of France?", 16, nullptr, &interrupt);
  ASSERT_GT(r2.tokens.size(), 0u);
  EXPECT_GT(s.ids().size(), before);
  const std::vector<int> prompt(s.ids().begin(), s.ids().end() - long(r2.tokens.size()));
  o.persistent = false;
  auto fresh = make_cuda_backend(m, o);
  GenerateOptions go;
  go.n_predict = int(r2.tokens.size());
  go.sampler.temperature = 0.0f;
  std::vector<int> again;
  generate(*fresh, m.config, prompt, go, [&](int id) { again.push_back(id); });
  EXPECT_EQ(again, r2.tokens) << tok->decode(again) << " vs " << r2.text;
}

}  // namespace
