// The CPU reference run as N simulated tensor-parallel ranks (engine/cpu_tp_backend.cpp) against the unsharded CPU
// reference: logits within 1e-5, greedy tokens identical, sampling combined as the unsharded sampler picks; the
// refusals through make_backend and run-llama --tp.
//
// The tolerance: every rank computes its rows of q, k, v, gate, up and the head exactly as the unsharded reference
// does (the same dot products), so what differs is only the order of the FP32 additions in o and down (each rank's
// partial sum over its columns, then the all-reduce) and what that carries through the later layers. Those rounding
// differences scale with the size of the values summed, not with each logit (a logit near zero has an absolute error
// set by the row's scale), so the check is max |tp - ref| / max(1, max |ref|) <= 1e-5: relative to the row's largest
// logit, absolute for rows below 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "default_model_util.h"
#include "engine/backend.h"
#include "engine/generate.h"
#include "engine/speculative.h"
#include "engine/tp_plan.h"
#include "models/model.h"
#include "models/quantize_model.h"
#include "run_program_util.h"
#include "tp_test_util.h"

namespace {

const std::string kStories = std::string(LLM_TEST_MODELS) + "/stories260K/stories260K.bin";
const std::string kStoriesTok = std::string(LLM_TEST_MODELS) + "/stories260K/tok512.model";

std::unique_ptr<llm::Backend> cpu_backend(const llm::Model& m, int tp, int ctx = 64,
                                          llm::KvDtype kv = llm::KvDtype::Default, int sample_vocab = 0) {
  llm::BackendOptions o;
  o.device = "cpu";
  o.ctx_size = ctx;
  o.tp = tp;
  o.kv_dtype = kv;
  o.sample_vocab = sample_vocab;
  return llm::make_backend(m, o);
}

// max |a - b| / max(1, max |a|) (see the top of the file).
double scaled_err(const std::vector<float>& ref, const std::vector<float>& got) {
  double num = 0, scale = 1;
  for (size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::fabs(double(ref[i]) - double(got[i])));
    scale = std::max(scale, std::fabs(double(ref[i])));
  }
  return num / scale;
}

// Teacher-forced over `ids`: the largest scaled error of any position's logits, and that every logit was finite.
double max_err_over(const llm::Model& m, int tp, const std::vector<int>& ids, llm::KvDtype kv = llm::KvDtype::Default) {
  auto ref = cpu_backend(m, 1, 64, kv);
  auto sim = cpu_backend(m, tp, 64, kv);
  EXPECT_EQ(sim->name(), "cpu (tp " + std::to_string(tp) + ", simulated ranks)");
  double worst = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    ref->decode(ids[i], int(i));
    sim->decode(ids[i], int(i));
    const std::vector<float> a = ref->logits(), b = sim->logits();
    EXPECT_EQ(a.size(), size_t(m.config.vocab_size));
    EXPECT_EQ(b.size(), a.size());
    if (b.size() != a.size()) return 1e9;
    for (float v : b) EXPECT_TRUE(std::isfinite(v));
    worst = std::max(worst, scaled_err(a, b));
  }
  return worst;
}

std::vector<int> some_ids(int vocab, int n) {
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) ids.push_back(int((uint64_t(i) * 7919 + 13) % uint64_t(vocab)));
  return ids;
}

TEST(TpSimulated, SyntheticGqaWithAVocabularyNoRankCountDividesMatchesUnsharded) {
  for (bool tied : {false, true}) {
    const llm::Model m = llm_test::tiny_gqa_odd_vocab(tied);  // 8/4 heads, vocabulary 1001
    for (int n : {2, 4}) {
      const double e = max_err_over(m, n, some_ids(1001, 12));
      EXPECT_LE(e, 1e-5) << "N = " << n << (tied ? ", tied" : ", untied");
      RecordProperty("err_n" + std::to_string(n) + (tied ? "_tied" : ""), std::to_string(e));
    }
  }
}

TEST(TpSimulated, QuantizedShardsAndBf16KvMatchUnsharded) {
  llm::Model m = llm_test::tiny_gqa_odd_vocab();
  llm::quantize_model(m, llm::parse_quantize_type("q8_0"));  // o and down split on whole blocks at N = 2
  EXPECT_LE(max_err_over(m, 2, some_ids(1001, 10)), 1e-5);
  EXPECT_LE(max_err_over(llm_test::tiny_gqa_odd_vocab(), 4, some_ids(1001, 10), llm::KvDtype::BF16), 1e-5);
  // Q4_K o and down (blocks of 256) split at column 256 of 512.
  llm::Model k = llm_test::tiny_tp_model(8, 4, 64, 512, 300, false);
  llm::quantize_model(k, llm::parse_quantize_type("q4_k"));
  ASSERT_EQ(k.weights.layers[1].w_down.quant, uint32_t(llm::GgmlQuantType::Q4_K));
  EXPECT_LE(max_err_over(k, 2, some_ids(300, 10)), 1e-5);
}

TEST(TpSimulated, Stories260KLogitsMatchUnshardedOverTwoAndFourRanks) {
  const llm::Model m = llm::load_model(kStories);  // 8/4 heads, FFN 172, vocabulary 512, tied
  for (int n : {2, 4}) EXPECT_LE(max_err_over(m, n, some_ids(512, 24)), 1e-5) << "N = " << n;
}

// Greedy: the ranks' combined argmax gives the unsharded run's tokens, through the decode loop's own calls.
TEST(TpSimulated, Stories260KGreedyTokensAreIdenticalToUnsharded) {
  const llm::Model m = llm::load_model(kStories);
  const llm::SamplerParams greedy{0.0f, 40, 0.95f, 1};
  std::vector<std::vector<int>> runs;
  for (int n : {1, 2, 4}) {
    auto b = cpu_backend(m, n, 128);
    std::vector<int> out;
    const std::vector<int> prompt = {1, 403, 407, 261, 378};  // BOS "Once upon a time"
    b->prefill(prompt.data(), int(prompt.size()), 0);
    for (int pos = int(prompt.size()); pos < 100; ++pos) {
      out.push_back(b->sample(greedy, uint64_t(pos)));
      b->decode(out.back(), pos);
    }
    runs.push_back(out);
  }
  EXPECT_EQ(runs[1], runs[0]);
  EXPECT_EQ(runs[2], runs[0]);
}

// Temperature sampling gathers the ranks' logits and samples them as the unsharded sampler does; a sampled
// vocabulary smaller than the head (sample_vocab) cuts into the last rank's rows.
TEST(TpSimulated, SamplingAndASmallerSampledVocabularyPickAsUnsharded) {
  const llm::Model m = llm_test::tiny_gqa_odd_vocab();
  for (int sample_vocab : {0, 900, 400}) {  // 400: rank 1 of 2 (ids 500..1000) has no candidate at all
    auto ref = cpu_backend(m, 1, 64, llm::KvDtype::Default, sample_vocab);
    auto sim = cpu_backend(m, 2, 64, llm::KvDtype::Default, sample_vocab);
    const std::vector<int> ids = some_ids(1001, 8);
    for (size_t i = 0; i < ids.size(); ++i) {
      ref->decode(ids[i], int(i));
      sim->decode(ids[i], int(i));
      for (const llm::SamplerParams& p : {llm::SamplerParams{0.0f, 40, 0.95f, 3}, llm::SamplerParams{0.9f, 0, 0.9f, 3},
                                          llm::SamplerParams{1.2f, 50, 1.0f, 4}}) {
        const int a = ref->sample(p, i), b = sim->sample(p, i);
        EXPECT_EQ(b, a) << "position " << i << " T " << p.temperature << " sample_vocab " << sample_vocab;
        if (sample_vocab) {
          EXPECT_LT(b, sample_vocab);
        }
      }
    }
  }
}

// NaN among a rank's candidates stops the run as on the unsharded reference; past the sampled vocabulary it is no
// candidate and the pick goes on.
TEST(TpSimulated, NonFiniteLogitsOfAnyRankStopTheRunOnlyWhenTheyAreCandidates) {
  llm::Model m = llm_test::tiny_gqa_odd_vocab();
  auto head = std::make_shared<std::vector<float>>(m.weights.head.to_f32());
  (*head)[size_t(700) * 64] = std::nanf("");  // head row 700: rank 1's of 2
  m.weights.head.synthetic = false;
  m.weights.head.dtype = llm::DType::F32;
  m.weights.head.data = head->data();
  m.weights.head.owner = head;
  m.weights.head.rope_head_dim = 0;
  for (int sample_vocab : {0, 600}) {
    auto ref = cpu_backend(m, 1, 64, llm::KvDtype::Default, sample_vocab);
    auto sim = cpu_backend(m, 2, 64, llm::KvDtype::Default, sample_vocab);
    ref->decode(5, 0);
    sim->decode(5, 0);
    const llm::SamplerParams greedy{0.0f, 40, 0.95f, 3}, warm{0.8f, 40, 0.95f, 3};
    for (const llm::SamplerParams& p : {greedy, warm}) {
      if (sample_vocab == 0) {
        EXPECT_THROW(ref->sample(p, 9), llm::NonFiniteLogits);
        EXPECT_THROW(sim->sample(p, 9), llm::NonFiniteLogits);
      } else {
        EXPECT_EQ(sim->sample(p, 9), ref->sample(p, 9));
      }
    }
  }
}

// Speculative verify on the ranks: n tokens through each rank together give, row for row, the logits of n decode()
// calls bit for bit (each rank's matmul_k is its matmul per vector; the all-reduce is element by element).
TEST(TpSimulated, VerifyEqualsDecodeBitForBit) {
  const llm::Model stories = llm::load_model(kStories);
  const llm::Model tiny = llm_test::tiny_gqa_odd_vocab();
  for (const llm::Model* m : {&stories, &tiny})
    for (int n : {2, 4}) {
      SCOPED_TRACE(m->source + " N = " + std::to_string(n));
      const std::vector<int> ids = some_ids(m->config.vocab_size, 20);
      auto seq = cpu_backend(*m, n), bat = cpu_backend(*m, n);
      ASSERT_TRUE(bat->supports_verify());
      const size_t V = size_t(m->config.vocab_size);
      std::vector<float> want;
      for (size_t i = 0; i < ids.size(); ++i) {
        seq->decode(ids[i], int(i));
        const std::vector<float> l = seq->logits();
        want.insert(want.end(), l.begin(), l.end());
      }
      bat->prefill(ids.data(), 11, 0);  // a pass of 8, then 3
      EXPECT_EQ(bat->logits(), std::vector<float>(want.begin() + 10 * long(V), want.begin() + 11 * long(V)));
      const std::vector<float> got = bat->verify(ids.data() + 11, 9, 11);
      EXPECT_EQ(got, std::vector<float>(want.begin() + 11 * long(V), want.end()));
      bat->rewind(15);
      bat->decode(ids[15], 15);
      EXPECT_EQ(bat->logits(), std::vector<float>(want.begin() + 15 * long(V), want.begin() + 16 * long(V)));
    }
}

// --spec lookup over the simulated ranks: the greedy tokens of plain decoding on the same ranks.
TEST(TpSimulated, SpeculativeLookupOnTheRanksGivesTheGreedyTokens) {
  const llm::Model m = llm::load_model(kStories);
  const std::vector<int> prompt = {1, 403, 407, 261, 378};
  llm::GenerateOptions go;
  go.n_predict = 80;
  go.sampler.temperature = 0.0f;
  auto plain = cpu_backend(m, 2, 128);
  const llm::GenerateResult want = llm::generate(*plain, m.config, prompt, go, nullptr);
  llm::LookupDrafter lookup;
  go.drafter = &lookup;
  auto spec = cpu_backend(m, 2, 128);
  const llm::GenerateResult got = llm::generate(*spec, m.config, prompt, go, nullptr);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_GT(got.spec.drafted, 0);
}

TEST(TpSimulated, ShapesThatCannotBeSplitAreRefusedByName) {
  const llm::Model stories = llm::load_model(kStories);
  try {
    cpu_backend(stories, 3);
    FAIL() << "--tp 3 on stories260K was not refused";
  } catch (const llm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_heads = 8 is not divisible by 3"), std::string::npos) << e.what();
  }
  llm::Model q = llm_test::tiny_gqa_odd_vocab();
  llm::quantize_model(q, llm::parse_quantize_type("q8_0"));
  try {
    cpu_backend(q, 4);
    FAIL() << "a quant block cut by the o split was not refused";
  } catch (const llm::Error& e) {
    EXPECT_NE(std::string(e.what()).find(q.weights.layers[0].wo.name + " (Q8_0"), std::string::npos) << e.what();
  }
}

// The real default model: 9 heads / 3 KV heads. Three ranks of 3 heads / 1 KV head each match the unsharded run;
// two ranks are refused by name (the refusal needs no forward pass, so it runs under the sanitizers too).
TEST(TpSmolLM2, TwoRanksAreRefusedByName) {
  LLM_REQUIRE_SMOLLM2();
  const llm::Model m = llm::load_model(llm_test::smollm2_path());
  try {
    cpu_backend(m, 2);
    FAIL() << "--tp 2 on SmolLM2 was not refused";
  } catch (const llm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_kv_heads = 3 is not divisible by 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(llm::tp_refusal(m, 3), "");  // Q4_1 o and down split at columns 192 and 512: whole blocks of 32
}

TEST(TpSmolLM2, ThreeRanksMatchUnsharded) {
  LLM_REQUIRE_SMOLLM2();
#if defined(LLM_SANITIZED)
  GTEST_SKIP() << "135M-parameter forward passes are too slow under AddressSanitizer; runs in the main suite";
#endif
  const llm::Model m = llm::load_model(llm_test::smollm2_path());
  const std::vector<int> ids = {1, 504, 3458, 282, 4649, 314};  // "<|im_start|>The capital of France is"
  EXPECT_LE(max_err_over(m, 3, ids), 1e-5);
}

TEST(TpRunLlama, TpRunsOnTheCpuAndOnCudaAndIsRefusedForShapesThatDoNotSplit) {
  const std::string exe = std::string(LLM_BINARY_DIR) + "/run-llama";
  llm_test::TempDir tmp;
  const std::vector<std::string> base = {"--model", kStories, "--tokenizer", kStoriesTok, "--prompt",
                                         "Once upon a time", "-n", "24", "--temp", "0", "--device", "cpu"};
  std::vector<std::string> outs;
  for (const char* n : {"1", "2", "4"}) {
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--tp", n});
    const llm_test::ProgramRun r = llm_test::run_program(exe, args, tmp);
    ASSERT_TRUE(r.exited && r.code == 0) << r.err;
    if (std::string(n) != "1") {
      EXPECT_NE(r.err.find("on cpu (tp " + std::string(n) + ", simulated ranks)"), std::string::npos) << r.err;
    }
    outs.push_back(r.out);
  }
  EXPECT_GT(outs[0].size(), std::string("Once upon a time").size());
  EXPECT_EQ(outs[1], outs[0]);
  EXPECT_EQ(outs[2], outs[0]);
  // On CUDA: a build without the CUDA engine refuses --tp as usage; without a GPU the run stops at the no-device line
  // (not a --tp refusal); with one, two ranks (sharing the GPU where there is one) write what one rank writes.
  std::vector<std::string> cuda = base;
  cuda.erase(cuda.end() - 2, cuda.end());  // "--device", "cpu"
  cuda.insert(cuda.end(), {"--device", "cuda"});
  std::vector<std::string> cuda2 = cuda;
  cuda2.insert(cuda2.end(), {"--tp", "2"});
  unsetenv("LLM_TP_CUDA");  // experimental on CUDA: refused as usage unless asked for (or no CUDA engine at all)
  const std::string gate = llm::tp_device_refusal(2, {"cuda", ""});
  ASSERT_FALSE(gate.empty());
  llm_test::expect_run_llama_refused(exe, cuda2, 2, {gate}, tmp);
  setenv("LLM_TP_CUDA", "1", 1);
  if (const std::string why = llm::tp_device_refusal(2, {"cuda", ""}); !why.empty()) {  // a build without CUDA
    EXPECT_NE(why.find("no CUDA engine"), std::string::npos) << why;
    llm_test::expect_run_llama_refused(exe, cuda2, 2, {why}, tmp);
  } else if (!llm::cuda_device_available()) {
    llm_test::expect_run_llama_refused(exe, cuda2, 1, {llm::cuda_no_device_message()}, tmp);
  } else {
    const llm_test::ProgramRun one = llm_test::run_program(exe, cuda, tmp);
    const llm_test::ProgramRun two = llm_test::run_program(exe, cuda2, tmp);
    ASSERT_TRUE(one.exited && one.code == 0) << one.err;
    ASSERT_TRUE(two.exited && two.code == 0) << two.err;
    EXPECT_NE(two.err.find("on cuda (tp 2)"), std::string::npos) << two.err;
    EXPECT_GT(one.out.size(), std::string("Once upon a time").size());
    EXPECT_EQ(two.out, one.out);
  }
  unsetenv("LLM_TP_CUDA");
  std::vector<std::string> three = base;
  three.insert(three.end(), {"--tp", "3"});
  llm_test::expect_run_llama_refused(exe, three, 2,
                                     {"--tp 3: ", "cannot be split over 3 ranks", "n_heads = 8 is not divisible by 3"},
                                     tmp);
}

}  // namespace
