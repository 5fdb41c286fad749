// Speculative decoding on the CPU reference (engine/speculative.h): verify() against one decode() per token, rewinds
// (F32, BF16, FP8 within and across the open block), greedy output with and without speculation (stories260K,
// synthetic shapes, SmolLM2, a chat keeping its cache across turns), prompt lookup, the adaptive draft length, the
// draft model's vocabulary check and the command line's refusals. The sampling exactness test is in
// speculative_sampling_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chat/session.h"
#include "chat/template.h"
#include "greedy_reference_util.h"  // Greedy, greedy_reference
#include "default_model_util.h"  // LLM_REQUIRE_SMOLLM2, smollm2_path
#include "engine/backend.h"
#include "engine/decode_loop.h"
#include "engine/generate.h"
#include "engine/speculative.h"
#include "engine_test_util.h"   // rel_err
#include "models/model.h"
#include "models_test_util.h"   // TempDir
#include "run_program_util.h"   // expect_run_llama_refused
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using llm::KvDtype;

const std::string kBin = LLM_BINARY_DIR;
const std::string kStories = std::string(LLM_TEST_MODELS) + "/stories260K";
const std::string kStoriesBin = kStories + "/stories260K.bin";
const std::string kTok512 = kStories + "/tok512.model";

const llm::Model& model(const std::string& path) {
  static std::map<std::string, std::unique_ptr<llm::Model>> cache;
  auto& m = cache[path];
  if (!m) m = std::make_unique<llm::Model>(llm::load_model(path));
  return *m;
}

std::unique_ptr<llm::Backend> cpu(const llm::Model& m, KvDtype kv = KvDtype::Default, int ctx = 0) {
  llm::BackendOptions o;
  o.kv_dtype = kv;
  o.ctx_size = ctx;
  return llm::make_cpu_backend(m, o);
}

// Deterministic token ids in [1, vocab).
std::vector<int> some_ids(int n, int vocab, uint32_t seed) {
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    ids.push_back(1 + int((seed >> 8) % uint32_t(vocab - 1)));
  }
  return ids;
}

double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

const char* kv_name(KvDtype kv) { return kv == KvDtype::F32 ? "f32" : kv == KvDtype::BF16 ? "bf16" : "fp8"; }

// ----- verify == decode, token by token -----

// 50 positions: a prefill of 3, then verify passes of 1, 2, 3, 5, 8, 16, 1, 7, 4 tokens (crossing the FP8 block of
// 32 inside a pass), against one decode() per position on a fresh backend: every row equal, bit for bit (matmul_k adds
// each vector's products in matmul's order, and each token's KV row is stored just before it attends).
void expect_verify_equals_decode(const std::string& path, KvDtype kv) {
  SCOPED_TRACE(path + " kv " + kv_name(kv));
  const llm::Model& m = model(path);
  const std::vector<int> ids = some_ids(50, m.config.vocab_size, 7);
  auto seq = cpu(m, kv), bat = cpu(m, kv);
  const size_t V = size_t(m.config.vocab_size);
  std::vector<float> want;
  for (size_t i = 0; i < ids.size(); ++i) {
    seq->decode(ids[i], int(i));
    const std::vector<float> l = seq->logits();
    want.insert(want.end(), l.begin(), l.end());
  }
  bat->prefill(ids.data(), 3, 0);
  EXPECT_EQ(bat->logits(), std::vector<float>(want.begin() + 2 * V, want.begin() + 3 * V));
  int pos = 3;
  for (int n : {1, 2, 3, 5, 8, 16, 1, 7, 4}) {
    ASSERT_LE(pos + n, int(ids.size()));
    const std::vector<float> got = bat->verify(ids.data() + pos, n, pos);
    ASSERT_EQ(got.size(), size_t(n) * V);
    for (int j = 0; j < n; ++j)
      EXPECT_EQ(max_abs_diff(got.data() + size_t(j) * V, want.data() + size_t(pos + j) * V, V), 0.0)
          << "position " << pos + j << " (verify of " << n << " at " << pos << ")";
    EXPECT_EQ(bat->logits(), std::vector<float>(got.end() - long(V), got.end())) << "the last row is current";
    pos += n;
  }
  EXPECT_EQ(pos, 50);
}

TEST(SpecVerify, EqualsDecodeOnStories260KEveryKvDtype) {
  ASSERT_TRUE(fs::exists(kStoriesBin)) << kStoriesBin;
  for (KvDtype kv : {KvDtype::F32, KvDtype::BF16, KvDtype::FP8}) expect_verify_equals_decode(kStoriesBin, kv);
}

TEST(SpecVerify, EqualsDecodeOnSyntheticShapesEveryKvDtype) {
  // tiny-gqa: 4 query heads on 2 KV heads, untied head; tiny-hd: q_dim 96 != dim 48, one KV head, tied.
  for (const char* name : {"synthetic:tiny-gqa", "synthetic:tiny-hd"})
    for (KvDtype kv : {KvDtype::F32, KvDtype::BF16, KvDtype::FP8}) expect_verify_equals_decode(name, kv);
}

TEST(SpecVerify, RefusesBadArgumentsByName) {
  auto b = cpu(model(kStoriesBin), KvDtype::Default, 64);
  const std::vector<int> ids{1, 2, 3};
  EXPECT_THROW(b->verify(ids.data(), 0, 0), llm::Error);
  EXPECT_THROW(b->verify(ids.data(), 3, 62), llm::Error);  // past the context of 64
  EXPECT_THROW(b->rewind(65), llm::Error);
  const std::vector<int> bad{1, 100000};
  try {
    b->verify(bad.data(), 2, 0);
    FAIL() << "an id outside the vocabulary was verified";
  } catch (const llm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 100000"), std::string::npos) << e.what();
  }
}

// ----- rewind -----

// A backend that verified `wrong` tokens at `at`, was rewound to `at` and decoded the right ones from there, against
// one that only ever saw the right ones: the logits of every position after the rewind.
double rewind_worst(const std::string& path, KvDtype kv, int at, int n_wrong, int n_after) {
  const llm::Model& m = model(path);
  const int V = m.config.vocab_size;
  const std::vector<int> ids = some_ids(at + n_after, V, 11), wrong = some_ids(n_wrong, V, 99);
  auto fresh = cpu(m, kv), back = cpu(m, kv);
  fresh->prefill(ids.data(), at, 0);
  back->prefill(ids.data(), at, 0);
  back->verify(wrong.data(), n_wrong, at);
  back->rewind(at);
  double worst = 0.0;
  for (int i = at; i < at + n_after; ++i) {
    fresh->decode(ids[size_t(i)], i);
    back->decode(ids[size_t(i)], i);
    worst = std::max(worst, llm_test::rel_err(fresh->logits(), back->logits()));
  }
  return worst;
}

TEST(SpecRewind, ThenRedecodeIsAsNeverThereF32AndBf16Exactly) {
  for (KvDtype kv : {KvDtype::F32, KvDtype::BF16}) {
    SCOPED_TRACE(kv_name(kv));
    EXPECT_EQ(rewind_worst(kStoriesBin, kv, 10, 6, 8), 0.0);
    EXPECT_EQ(rewind_worst(kStoriesBin, kv, 30, 6, 8), 0.0);  // the wrong rows crossed a 32-position block
    EXPECT_EQ(rewind_worst("synthetic:tiny-gqa", kv, 20, 16, 20), 0.0);
  }
}

TEST(SpecRewind, Fp8ExactInsideTheOpenBlockBoundedAcrossIt) {
  // Inside the open block (positions 40..45 of block 32..63): its rows are kept as computed, the rewind is exact.
  EXPECT_EQ(rewind_worst(kStoriesBin, KvDtype::FP8, 40, 6, 10), 0.0);
  EXPECT_EQ(rewind_worst("synthetic:tiny-gqa", KvDtype::FP8, 33, 16, 10), 0.0);
  // Across it (wrong rows 30..35 opened block 1; the rewind goes back into block 0): block 0's rows come back from
  // their FP8 codes and are rounded once more (engine/kv_cache.h): not exact, bounded by one more E4M3 rounding.
  const double across = rewind_worst(kStoriesBin, KvDtype::FP8, 30, 6, 10);
  std::printf("stories260K FP8 KV: rewind back across a block boundary, worst relative L2 of the logits %.2e\n",
              across);
  EXPECT_LT(across, 0.05);
}

// ----- greedy output with and without speculation -----

// Speculative greedy output against the reference: equal token for token, except that a position whose top-2 margin
// is under 1e-3 may differ (the sums of a batched pass may round differently); such positions are counted and printed.
void expect_greedy_same(const std::string& what, llm::Backend& ref, llm::Backend& target, llm::Drafter& drafter,
                        const llm::ModelConfig& c, const std::vector<int>& prompt, int n, int draft_max = 8) {
  SCOPED_TRACE(what);
  const llm_test::Greedy want = llm_test::greedy_reference(ref, prompt, n, c.eos_ids);
  llm::GenerateOptions go;
  go.n_predict = n;
  go.sampler.temperature = 0.0f;
  go.drafter = &drafter;
  go.spec.draft_max = draft_max;
  const llm::GenerateResult got = llm::generate(target, c, prompt, go, nullptr);
  int near_ties = 0;
  for (float mgn : want.margin) near_ties += mgn < 1e-3f;
  size_t first_diff = 0;
  while (first_diff < want.tokens.size() && first_diff < got.tokens.size() &&
         want.tokens[first_diff] == got.tokens[first_diff])
    ++first_diff;
  std::printf("%s: %zu tokens, drafted %lld, accepted %lld (%.1f%%) in %lld verify steps; %d near-tie positions "
              "(top-2 margin < 1e-3)\n",
              what.c_str(), got.tokens.size(), (long long)got.spec.drafted, (long long)got.spec.accepted,
              100.0 * got.spec.accept_rate(), (long long)got.spec.steps, near_ties);
  if (first_diff < want.tokens.size() && first_diff < got.tokens.size()) {
    EXPECT_LT(want.margin[first_diff], 1e-3f) << "greedy outputs differ at token " << first_diff
                                              << " where the target's top-2 margin is " << want.margin[first_diff];
  } else {
    EXPECT_EQ(got.tokens, want.tokens);
  }
  EXPECT_GE(got.spec.drafted, got.spec.accepted);
  if (got.stop_reason == "length") {
    EXPECT_EQ(got.spec.steps + got.spec.accepted, int64_t(got.tokens.size()))
        << "every verify step yields its accepted drafts and one token of the target's";
  }
}

TEST(SpecGreedy, Stories260KLookupAndDraftModelGiveTheSameTokens) {
  const llm::Model& m = model(kStoriesBin);
  auto tok = llm::load_tokenizer(m, kTok512);
  const std::vector<int> prompt = tok->encode("Once upon a time, there was a little girl named Lily. Lily", true);
  for (KvDtype kv : {KvDtype::F32, KvDtype::FP8}) {
    llm::LookupDrafter lookup;
    auto ref = cpu(m, kv), target = cpu(m, kv);
    expect_greedy_same(std::string("stories260K lookup, kv ") + kv_name(kv), *ref, *target, lookup, m.config, prompt,
                       120);
  }
  // A draft model: the same weights rounded to BF16 (a close but different model, so some drafts are rejected).
  llm::BackendOptions bo;
  bo.bf16_weights = true;
  auto draft_backend = llm::make_cpu_backend(m, bo);
  llm::DraftModelDrafter draft(*draft_backend);
  auto ref = cpu(m), target = cpu(m);
  expect_greedy_same("stories260K draft model (BF16 copy)", *ref, *target, draft, m.config, prompt, 120, 5);
  // The target itself drafting: every draft is accepted.
  auto self_backend = cpu(m);
  llm::DraftModelDrafter self(*self_backend);
  auto ref2 = cpu(m), target2 = cpu(m);
  expect_greedy_same("stories260K drafting for itself", *ref2, *target2, self, m.config, prompt, 60, 4);
}

// SpecOptions::guard. A target whose verify errs at near ties (the CPU engine, its verify rows' top two swapped where
// their margin is under 0.5, so a near tie picks the runner-up: what a verify summing in another order than decode
// can do): unguarded, lookup changes the greedy output (the negative control); guarded at 0.5, every such row's
// token comes from a decode step and the output is plain greedy's, token for token.
// A backend around another that forwards every call (the test backends below override what they change or record).
class Forwarding : public llm::Backend {
 public:
  explicit Forwarding(std::unique_ptr<llm::Backend> inner) : in_(std::move(inner)) {}
  int ctx_size() const override { return in_->ctx_size(); }
  void prefill(const int* t, int n, int pos) override { in_->prefill(t, n, pos); }
  void decode(int t, int pos) override { in_->decode(t, pos); }
  int sample(const llm::SamplerParams& p, uint64_t step) override { return in_->sample(p, step); }
  std::vector<float> logits() override { return in_->logits(); }
  bool supports_verify() const override { return true; }
  void rewind(int pos) override { in_->rewind(pos); }
  std::vector<float> verify(const int* t, int n, int pos) override { return in_->verify(t, n, pos); }
  std::vector<int> verify_argmax(const int* t, int n, int pos, int vocab_limit,
                                 std::vector<float>* margins) override {
    return in_->verify_argmax(t, n, pos, vocab_limit, margins);
  }

 protected:
  std::unique_ptr<llm::Backend> in_;
};

class NearTieSwapBackend final : public Forwarding {
 public:
  using Forwarding::Forwarding;
  std::string name() const override { return "near-tie-swap"; }
  // The base class's verify_argmax would forward past the swap: the default one judges the swapped rows.
  std::vector<int> verify_argmax(const int* t, int n, int pos, int vocab_limit,
                                 std::vector<float>* margins) override {
    return llm::Backend::verify_argmax(t, n, pos, vocab_limit, margins);
  }
  std::vector<float> verify(const int* t, int n, int pos) override {
    std::vector<float> rows = in_->verify(t, n, pos);
    const size_t V = rows.size() / size_t(n);
    for (int i = 0; i < n; ++i) {
      float* r = rows.data() + size_t(i) * V;
      const int a = llm::argmax(r, int(V));
      int b = a == 0 ? 1 : 0;
      for (int j = 0; j < int(V); ++j)
        if (j != a && r[j] > r[b]) b = j;
      if (r[a] - r[b] < kSwapBelow) std::swap(r[a], r[b]), swapped++;
    }
    return rows;
  }
  static constexpr float kSwapBelow = 0.5f;
  int swapped = 0;
};

TEST(SpecGreedy, GuardHandsNearTiesToADecodeStep) {
  const llm::Model& m = model(kStoriesBin);
  auto tok = llm::load_tokenizer(m, kTok512);
  const std::vector<int> prompt = tok->encode("Once upon a time, there was a little girl named Lily. Lily", true);
  auto ref = cpu(m);
  const llm_test::Greedy want = llm_test::greedy_reference(*ref, prompt, 120, m.config.eos_ids);
  for (float guard : {0.0f, NearTieSwapBackend::kSwapBelow}) {
    SCOPED_TRACE("guard " + std::to_string(guard));
    NearTieSwapBackend target(cpu(m));
    llm::LookupDrafter lookup;
    llm::GenerateOptions go;
    go.n_predict = 120;
    go.sampler.temperature = 0.0f;
    go.drafter = &lookup;
    go.spec.guard = guard;
    const llm::GenerateResult got = llm::generate(target, m.config, prompt, go, nullptr);
    std::printf("guard %.2f: %zu tokens, %d verify rows swapped, %lld guarded, %lld steps, %lld accepted\n", guard,
                got.tokens.size(), target.swapped, (long long)got.spec.guarded, (long long)got.spec.steps,
                (long long)got.spec.accepted);
    ASSERT_GT(target.swapped, 0) << "the prompt reaches no near tie: the test checks nothing";
    if (guard > 0) {
      EXPECT_EQ(got.tokens, want.tokens) << "guarded: plain greedy's tokens";
      EXPECT_GT(got.spec.guarded, 0);
      EXPECT_GT(got.spec.accepted, 0) << "the guard must not turn every step into a decode";
    } else {
      EXPECT_NE(got.tokens, want.tokens) << "negative control: the swapped near ties change the output";
      EXPECT_EQ(got.spec.guarded, 0);
    }
    if (got.stop_reason == "length")
      EXPECT_EQ(got.spec.steps + got.spec.accepted, int64_t(got.tokens.size())) << "one token of the target's a step";
  }
}

// The speculative loop puts the prompt into the cache as the plain loop does: the same prefill calls (positions and
// pieces), and no verify or decode step at a prompt position. (It used to leave the prompt's last token to its first
// verify: on a backend whose verify sums otherwise than its prefill, that one K/V row differed from plain decoding's
// and drifted greedy output apart later, 4 of 22 spec-bench outputs on the GPU.) A recording backend around the CPU
// engine, a prompt whose lookup drafts at once, pieces of 5 (so a piece boundary falls inside the prompt).
class Recording final : public Forwarding {
 public:
  using Forwarding::Forwarding;
  std::string name() const override { return "recording"; }
  int prefill_piece() const override { return 5; }
  void prefill(const int* t, int n, int pos) override {
    prefills.emplace_back(pos, n);
    Forwarding::prefill(t, n, pos);
  }
  void decode(int t, int pos) override {
    steps_at.push_back(pos);
    Forwarding::decode(t, pos);
  }
  std::vector<float> verify(const int* t, int n, int pos) override {
    steps_at.push_back(pos);
    return Forwarding::verify(t, n, pos);
  }
  std::vector<int> verify_argmax(const int* t, int n, int pos, int vocab_limit,
                                 std::vector<float>* margins) override {
    steps_at.push_back(pos);
    return Forwarding::verify_argmax(t, n, pos, vocab_limit, margins);
  }
  std::vector<std::pair<int, int>> prefills;  // (pos, n) of every prefill call
  std::vector<int> steps_at;                  // the first position of every decode step and verify pass
};

// A backend whose verify says it costs `costs` (Backend::verify_costs); records the tokens of every verify pass.
class Priced final : public Forwarding {
 public:
  Priced(std::unique_ptr<llm::Backend> inner, llm::DraftCosts costs) : Forwarding(std::move(inner)), costs_(costs) {}
  std::string name() const override { return "priced"; }
  llm::DraftCosts verify_costs() const override { return costs_; }
  std::vector<int> verify_argmax(const int* t, int n, int pos, int vocab_limit,
                                 std::vector<float>* margins) override {
    longest = std::max(longest, n);
    return Forwarding::verify_argmax(t, n, pos, vocab_limit, margins);
  }
  int longest = 0;  // the most tokens one verify pass took

 private:
  llm::DraftCosts costs_;
};

// The adaptive draft length weighs a pass by the target's own costs unless SpecOptions::costs names some: a verify that
// says each draft costs 5 decode steps gets one draft per pass; the same backend with the default costs named gets
// longer drafts on a repetitive prompt; the output is plain greedy's either way.
TEST(SpecGreedy, DraftLengthTakesTheTargetsVerifyCosts) {
  const llm::Model& m = model(kStoriesBin);
  auto tok = llm::load_tokenizer(m, kTok512);
  const std::vector<int> prompt = tok->encode("Lily and Tom. Lily and Tom. Lily and Tom. Lily and", true);
  llm::DecodeLoopOptions opt;
  opt.max_new = 40;
  opt.sampler.temperature = 0.0f;
  auto plain = cpu(m);
  const llm::DecodeLoopResult want = llm::decode_loop(*plain, prompt, opt);
  Priced dear(cpu(m), llm::DraftCosts{1.0, 5.0}), named(cpu(m), llm::DraftCosts{1.0, 5.0});
  llm::LookupDrafter lookup_a, lookup_b;
  llm::SpecStats a, b;
  EXPECT_EQ(llm::speculative_loop(dear, lookup_a, prompt, opt, llm::SpecOptions{}, &a).tokens, want.tokens);
  llm::SpecOptions with_default;
  with_default.costs = llm::DraftCosts{};
  EXPECT_EQ(llm::speculative_loop(named, lookup_b, prompt, opt, with_default, &b).tokens, want.tokens);
  EXPECT_EQ(dear.longest, 2) << "one draft per pass (the pending token and one draft) at 5 steps a draft";
  EXPECT_GT(named.longest, 3) << "the default costs named: longer drafts on the same run";
  EXPECT_GT(a.drafted, 0);
  EXPECT_LT(a.drafted, b.drafted);

  // The CUDA engine's decode-order verify (engine/backend.h decode_order_draft_costs): the default where the decode
  // step is latency-bound, ~0.4 of a step per draft where its GEMVs stream.
  EXPECT_DOUBLE_EQ(llm::decode_order_draft_costs(0.09e9).per_token, llm::DraftCosts{}.per_token);
  EXPECT_DOUBLE_EQ(llm::decode_order_draft_costs(llm::kDecodeOrderStreamingBytes).pass, llm::DraftCosts{}.pass);
  EXPECT_DOUBLE_EQ(llm::decode_order_draft_costs(0.6e9).per_token, 0.42);
  EXPECT_DOUBLE_EQ(llm::decode_order_draft_costs(4.3e9).pass, 1.0);
  EXPECT_DOUBLE_EQ(plain->verify_costs().pass, llm::DraftCosts{}.pass) << "the CPU reference keeps the default";
}

TEST(SpecGreedy, PrefillsThePromptAsThePlainLoopDoes) {
  const llm::Model& m = model(kStoriesBin);
  auto tok = llm::load_tokenizer(m, kTok512);
  const std::vector<int> prompt = tok->encode("Lily and Tom. Lily and Tom. Lily and Tom. Lily and", true);
  const int n_prompt = int(prompt.size());
  ASSERT_GT(n_prompt, 10);
  llm::DecodeLoopOptions opt;
  opt.max_new = 40;
  opt.sampler.temperature = 0.0f;
  Recording plain(cpu(m)), spec(cpu(m));
  const llm::DecodeLoopResult want = llm::decode_loop(plain, prompt, opt);
  llm::LookupDrafter lookup;
  llm::SpecStats stats;
  const llm::DecodeLoopResult got = llm::speculative_loop(spec, lookup, prompt, opt, llm::SpecOptions{}, &stats);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(spec.prefills, plain.prefills) << "the same prefill calls";
  int covered = 0;
  for (const auto& [pos, n] : spec.prefills) {
    EXPECT_EQ(pos, covered);
    covered += n;
  }
  EXPECT_EQ(covered, n_prompt) << "the whole prompt, last token included";
  ASSERT_FALSE(spec.steps_at.empty());
  for (int pos : spec.steps_at) EXPECT_GE(pos, n_prompt) << "a decode step or verify at a prompt position";
  EXPECT_EQ(spec.steps_at.front(), n_prompt) << "the first step verifies its drafts after the prompt";
  EXPECT_GT(stats.drafted, 0) << "lookup drafted nothing: the first step's pass is not exercised";
  EXPECT_EQ(stats.steps + stats.accepted, int64_t(got.tokens.size())) << "one token of the target's a step";
}

// A drafter that knows the greedy answer but errs at an offset that moves every step, so passes are rejected at every
// depth and many would cross an FP8 block boundary; it records what it was asked for.
class ErringDrafter final : public llm::Drafter {
 public:
  ErringDrafter(std::vector<int> full, int vocab) : full_(std::move(full)), vocab_(vocab) {}
  std::string name() const override { return "erring"; }
  std::vector<int> propose(const std::vector<int>& context, int max, const llm::SamplerParams&, llm::SpecRng&,
                           std::vector<std::vector<double>>* q) override {
    if (q) q->clear();
    asked.emplace_back(int(context.size()) - 1, max);  // (the pending token's position, drafts asked for)
    std::vector<int> out;
    for (int i = 0; i < max && context.size() + size_t(i) < full_.size(); ++i) out.push_back(full_[context.size() + i]);
    const size_t at = size_t(step_ % 9);  // 8: none wrong (so the adaptive length grows again)
    if (at < out.size()) out[at] = (out[at] + 1) % vocab_;
    ++step_;
    return out;
  }
  std::vector<std::pair<int, int>> asked;

 private:
  std::vector<int> full_;
  int vocab_, step_ = 0;
};

TEST(SpecGreedy, Fp8DraftsStopAtTheBlockBoundarySoRewindsStayExact) {
  // An FP8 cache keeps only its open block's rows as computed: a pass that crossed into the next block and was then
  // rewound back across the boundary would round that block's rows once more (3.7e-2 on the logits, the rewind test
  // above) and change greedy tokens. Backend::exact_rewind_end stops the drafts at the boundary; an F32 cache has none.
  const llm::Model& m = model(kStoriesBin);
  auto tok = llm::load_tokenizer(m, kTok512);
  const std::vector<int> prompt = tok->encode("Once upon a time, there was a little girl named Lily. Lily", true);
  for (KvDtype kv : {KvDtype::FP8, KvDtype::F32}) {
    SCOPED_TRACE(kv_name(kv));
    llm::DecodeLoopOptions opt;
    opt.max_new = 150;
    opt.sampler.temperature = 0.0f;
    auto ref = cpu(m, kv);
    const llm::DecodeLoopResult want = llm::decode_loop(*ref, prompt, opt);
    std::vector<int> full = prompt;
    full.insert(full.end(), want.tokens.begin(), want.tokens.end());
    ErringDrafter drafter(full, m.config.vocab_size);
    auto target = cpu(m, kv);
    llm::SpecStats st;
    const llm::DecodeLoopResult got = llm::speculative_loop(*target, drafter, prompt, opt, llm::SpecOptions{}, &st);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_GT(st.accepted, 0);
    EXPECT_LT(st.accepted, st.drafted);
    int crossing = 0;
    for (const auto& [pos, max] : drafter.asked) crossing += (pos + max) / llm::kKvFp8Block != pos / llm::kKvFp8Block;
    if (kv == KvDtype::FP8) {
      EXPECT_EQ(crossing, 0) << "a pass asked to cross an FP8 block boundary";
    } else {
      EXPECT_GT(crossing, 0) << "an F32 cache has no boundary to stop at";
    }
  }
}

TEST(SpecGreedy, SyntheticShapeGivesTheSameTokens) {
  const llm::Model& m = model("synthetic:tiny-gqa");
  std::vector<int> prompt = some_ids(12, m.config.vocab_size, 5);
  prompt.insert(prompt.end(), prompt.begin(), prompt.begin() + 6);  // a repeat, so lookup has something to propose
  llm::LookupDrafter lookup;
  auto ref = cpu(m), target = cpu(m);
  expect_greedy_same("synthetic tiny-gqa lookup", *ref, *target, lookup, m.config, prompt, 80, 16);
}

TEST(SpecGreedy, SmolLM2LookupGivesTheSameTokens) {
  LLM_REQUIRE_SMOLLM2();
#if defined(LLM_SANITIZED)
  GTEST_SKIP() << "135M-parameter forward passes are too slow under AddressSanitizer; runs in the main suite";
#endif
  const llm::Model& m = model(llm_test::smollm2_path());
  auto tok = llm::load_tokenizer(m, "");
  const std::vector<int> prompt = tok->encode(
      "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n# The same two functions with "
      "docstrings:\ndef add(a, b):\n",
      false);
  llm::LookupDrafter lookup;
  auto ref = cpu(m), target = cpu(m);
  expect_greedy_same("SmolLM2 lookup", *ref, *target, lookup, m.config, prompt, 24);
}

// A chat keeps its KV cache across turns with speculation too: the same replies, the same cached ids, and the cache
// holds what a fresh prefill of those ids gives.
TEST(SpecGreedy, ChatKeepsItsCacheAcrossTurns) {
  const llm::Model& m = model(kStoriesBin);
  auto tok = llm::load_tokenizer(m, kTok512);
  const llm::ChatTemplate tmpl(llm::ChatFormat::kZephyr);
  llm::ChatSessionOptions plain;
  plain.sampler.temperature = 0.0f;
  llm::LookupDrafter lookup;
  llm::ChatSessionOptions spec = plain;
  spec.drafter = &lookup;
  spec.spec.draft_max = 6;
  auto b0 = cpu(m), b1 = cpu(m);
  llm::ChatSession s0(*b0, *tok, m.config, tmpl, plain), s1(*b1, *tok, m.config, tmpl, spec);
  for (const char* user : {"Tell me a story about a cat.", "And then what happened?", "Who was there?"}) {
    const llm::ChatReply r0 = s0.send(user, 40, nullptr), r1 = s1.send(user, 40, nullptr);
    EXPECT_EQ(r1.tokens, r0.tokens) << user;
    EXPECT_EQ(r1.stop_reason, r0.stop_reason) << user;
    EXPECT_EQ(s1.ids(), s0.ids()) << user;
  }
  EXPECT_GT(s1.spec_stats().steps, 0);
  // The speculative session's cache: its next decode after the kept ids equals a fresh backend's over the same ids.
  const std::vector<int>& ids = s1.ids();
  ASSERT_LT(ids.size() + 1, size_t(b1->ctx_size()));
  auto fresh = cpu(m);
  fresh->prefill(ids.data(), int(ids.size()), 0);
  fresh->decode(5, int(ids.size()));
  b1->decode(5, int(ids.size()));
  EXPECT_EQ(b1->logits(), fresh->logits());
}

// ----- drafters and the draft length -----

TEST(SpecLookup, LongestRecentNgramProposesWhatFollowedIt) {
  using llm::lookup_proposal;
  EXPECT_EQ(lookup_proposal({1, 2, 3, 4, 1, 2, 3}, 3), (std::vector<int>{4, 1, 2}));
  // The longest n-gram wins over a more recent shorter one: [1 2 3] (at 0) beats [3] (at 5).
  EXPECT_EQ(lookup_proposal({1, 2, 3, 4, 9, 3, 5, 1, 2, 3}, 3), (std::vector<int>{4, 9, 3}));
  // Among occurrences of the same n-gram, the most recent: [5 6] at 3, not at 0.
  EXPECT_EQ(lookup_proposal({5, 6, 7, 5, 6, 8, 5, 6}, 2), (std::vector<int>{8, 5}));
  // The continuation stops at the end of the context; max bounds it.
  EXPECT_EQ(lookup_proposal({1, 2, 1}, 5), (std::vector<int>{2, 1}));
  EXPECT_EQ(lookup_proposal({1, 2, 3, 4, 5, 6, 1, 2}, 1), (std::vector<int>{3}));
  // n-gram bounds: a 3-gram needed for a match that only n = 3 finds is missed with ngram_max 2... and a unigram
  // match is refused with ngram_min 2.
  EXPECT_EQ(lookup_proposal({7, 1, 2, 3, 8, 9, 3}, 2, 3, 2), (std::vector<int>{}));
  EXPECT_EQ(lookup_proposal({7, 1, 2, 3, 8, 9, 3}, 2, 3, 1), (std::vector<int>{8, 9}));
  // Nothing to find.
  EXPECT_TRUE(lookup_proposal({1, 2, 3, 4}, 4).empty());
  EXPECT_TRUE(lookup_proposal({1}, 4).empty());
  EXPECT_TRUE(lookup_proposal({}, 4).empty());
  EXPECT_TRUE(lookup_proposal({1, 1}, 0).empty());
}

TEST(SpecDraftLength, AdaptsToTheAcceptanceSeenByCost) {
  // The prior (a = 3/4) under the default costs (1.25 + 0.1 per draft): k = 5 yields 3.29 tokens for 1.75 steps.
  llm::DraftLength d(1, 8);
  EXPECT_DOUBLE_EQ(d.acceptance(), 0.75);
  EXPECT_EQ(d.next(), 5);
  for (int i = 0; i < 30; ++i) d.update(d.next(), d.next());  // everything accepted: the longest draft
  EXPECT_GT(d.acceptance(), 0.95);
  EXPECT_EQ(d.next(), 8);
  for (int i = 0; i < 60; ++i) d.update(d.next(), 0);  // nothing accepted: the shortest the floor allows
  EXPECT_LT(d.acceptance(), 0.05);
  EXPECT_EQ(d.next(), 1);
  const int before = d.next();
  const double a = d.acceptance();
  d.update(0, 0);  // no draft: unchanged
  EXPECT_EQ(d.next(), before);
  EXPECT_DOUBLE_EQ(d.acceptance(), a);
  // The floor holds however little is accepted; min 0 still drafts one (a step with none would learn nothing).
  llm::DraftLength floor3(3, 8), floor0(0, 8);
  for (int i = 0; i < 30; ++i) floor3.update(floor3.next(), 0), floor0.update(floor0.next(), 0);
  EXPECT_EQ(floor3.next(), 3);
  EXPECT_EQ(floor0.next(), 1);
  // The same history, cheaper draft tokens: a longer draft (the per-token cost is what makes length expensive).
  llm::DraftLength cheap(1, 16, llm::DraftCosts{1.1, 0.01}), dear(1, 16, llm::DraftCosts{1.1, 0.5});
  for (int i = 0; i < 10; ++i) cheap.update(4, 3), dear.update(4, 3);
  EXPECT_DOUBLE_EQ(cheap.acceptance(), dear.acceptance());
  EXPECT_GT(cheap.next(), dear.next());
  // The rate it maximises, checked against a direct evaluation at the acceptance reached.
  const double acc = cheap.acceptance();
  auto rate = [acc](int k, double pass, double tok) {
    return (1 - std::pow(acc, k + 1)) / (1 - acc) / (pass + tok * k);
  };
  for (int k = 1; k <= 16; ++k) EXPECT_GE(rate(cheap.next(), 1.1, 0.01), rate(k, 1.1, 0.01)) << "k " << k;
  for (int k = 1; k <= 16; ++k) EXPECT_GE(rate(dear.next(), 1.1, 0.5), rate(k, 1.1, 0.5)) << "k " << k;
  EXPECT_THROW(llm::DraftLength(5, 4), llm::Error);
  EXPECT_THROW(llm::DraftLength(0, 0), llm::Error);
  EXPECT_THROW(llm::DraftLength(1, 4, llm::DraftCosts{0.0, 0.1}), llm::Error);
  EXPECT_THROW(llm::DraftLength(1, 4, llm::DraftCosts{1.0, -0.1}), llm::Error);
}

// A tokenizer that is another one but for the spelling of one piece.
class OnePieceDiffers final : public llm::Tokenizer {
 public:
  OnePieceDiffers(const llm::Tokenizer& t, int id) : t_(t), id_(id) {}
  int vocab_size() const override { return t_.vocab_size(); }
  int bos_id() const override { return t_.bos_id(); }
  int eos_id() const override { return t_.eos_id(); }
  std::vector<int> encode(const std::string& s, bool bos) const override { return t_.encode(s, bos); }
  std::string decode(const std::vector<int>& ids) const override { return t_.decode(ids); }
  std::string piece(int id) const override { return id == id_ ? "<changed>" : t_.piece(id); }
  int token_id(const std::string& p) const override { return t_.token_id(p); }
  PieceKind piece_kind(int id) const override { return t_.piece_kind(id); }
  std::string unk_surface() const override { return t_.unk_surface(); }
  LeadingSpace leading_space() const override { return t_.leading_space(); }

 private:
  const llm::Tokenizer& t_;
  int id_;
};

TEST(SpecDraftModel, VocabularyMismatchIsNamed) {
  const llm::Model& s = model(kStoriesBin);
  auto tok = llm::load_tokenizer(s, kTok512);
  EXPECT_EQ(llm::draft_vocab_mismatch(s.config, tok.get(), s.config, tok.get()), "");
  const llm::Model& g = model("synthetic:tiny-gqa");
  EXPECT_EQ(llm::draft_vocab_mismatch(s.config, tok.get(), g.config, nullptr),
            "its vocabulary has 256 tokens, the target's 512");
  OnePieceDiffers other(*tok, 300);
  EXPECT_EQ(llm::draft_vocab_mismatch(s.config, tok.get(), s.config, &other),
            "token 300 is '<changed>' in it, '" + tok->piece(300) + "' in the target");
  EXPECT_EQ(llm::draft_vocab_mismatch(s.config, tok.get(), s.config, nullptr), "it has no tokenizer to compare");
  llm::ModelConfig c = s.config;
  c.bos_id = 7;
  EXPECT_NE(llm::draft_vocab_mismatch(s.config, tok.get(), c, tok.get()).find("its BOS id is 7"), std::string::npos);
}

// verify_argmax's default (what the CPU reference runs; the CUDA engine's own is judged against it in the GPU suite):
// per row the argmax over [0, vocab_limit), lowest index on ties, -1 where that range is not finite.
TEST(SpecVerify, ArgmaxOfRowsLowestIndexOnTiesMinusOneWhereNotFinite) {
  struct Rows final : llm::Backend {
    std::vector<float> rows;
    std::string name() const override { return "rows"; }
    int ctx_size() const override { return 64; }
    void prefill(const int*, int, int) override {}
    void decode(int, int) override {}
    int sample(const llm::SamplerParams&, uint64_t) override { return 0; }
    std::vector<float> logits() override { return {}; }
    std::vector<float> verify(const int*, int, int) override { return rows; }
  } b;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  b.rows = {1.0f, 3.0f, 3.0f, 9.0f,    // whole row: 3; below 3: the tie at 1 and 2 goes to 1
            -2.0f, -1.0f, -5.0f, nan,  // NaN past the limit of 3 is not looked at
            0.0f, inf, 0.0f, 0.0f};    // Inf inside the range: -1
  const int ids[3] = {5, 6, 7};
  EXPECT_EQ(b.verify_argmax(ids, 3, 0, 0), (std::vector<int>{3, -1, -1}));
  EXPECT_EQ(b.verify_argmax(ids, 3, 0, 3), (std::vector<int>{1, 1, -1}));
  EXPECT_EQ(b.verify_argmax(ids, 3, 0, 100), (std::vector<int>{3, -1, -1}));  // a limit past the row: the row
  // Top-2 margins beside the ids: 9 - 3; the tie 3 = 3 below the limit: 0; -1 over -2; no margin where not finite.
  std::vector<float> margins;
  EXPECT_EQ(b.verify_argmax(ids, 3, 0, 0, &margins), (std::vector<int>{3, -1, -1}));
  EXPECT_EQ(margins, (std::vector<float>{6.0f, inf, inf}));
  EXPECT_EQ(b.verify_argmax(ids, 3, 0, 3, &margins), (std::vector<int>{1, 1, -1}));
  EXPECT_EQ(margins, (std::vector<float>{0.0f, 1.0f, inf}));
  EXPECT_EQ(llm::top2_margin(b.rows.data(), 1, 0), inf);  // one value: no second
  // On a real model: the ids are argmax() of verify()'s rows.
  const llm::Model& m = model(kStoriesBin);
  const std::vector<int> toks = some_ids(12, m.config.vocab_size, 3);
  auto a = cpu(m, KvDtype::F32), c = cpu(m, KvDtype::F32);
  const std::vector<float> rows = a->verify(toks.data(), 12, 0);
  const std::vector<int> got = c->verify_argmax(toks.data(), 12, 0, 0);
  ASSERT_EQ(got.size(), 12u);
  const int V = m.config.vocab_size;
  for (int i = 0; i < 12; ++i) EXPECT_EQ(got[size_t(i)], llm::argmax(rows.data() + size_t(i) * V, V)) << "row " << i;
}

TEST(SpecDraftModel, LoopRefusesABackendWithoutVerify) {
  // A backend that keeps the defaults (as the CUDA engine does today) is refused by name, before anything runs.
  struct NoVerify final : llm::Backend {
    std::string name() const override { return "test"; }
    int ctx_size() const override { return 64; }
    void prefill(const int*, int, int) override {}
    void decode(int, int) override {}
    int sample(const llm::SamplerParams&, uint64_t) override { return 0; }
    std::vector<float> logits() override { return {}; }
  } b;
  EXPECT_FALSE(b.supports_verify());
  const std::vector<int> ids{1, 2};
  try {
    b.verify(ids.data(), 2, 0);
    FAIL();
  } catch (const llm::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "test backend: speculative decoding needs verify() (2 tokens at position 0), not supported by this "
              "backend");
  }
  EXPECT_THROW(b.rewind(0), llm::Error);
  llm::LookupDrafter lookup;
  llm::DecodeLoopOptions lo;
  EXPECT_THROW(llm::speculative_loop(b, lookup, ids, lo, llm::SpecOptions{}), llm::Error);
  EXPECT_THROW(llm::DraftModelDrafter{b}, llm::Error);
}

// ----- the command line -----

TEST(SpecCli, RunLlamaRefusesBadCombinationsByName) {
  llm_test::TempDir tmp;
  const std::string exe = kBin + "/run-llama";
  const std::vector<std::string> stories{"--model", kStoriesBin, "--tokenizer", kTok512, "--prompt", "Once", "-n",
                                         "4"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = stories;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  llm_test::expect_run_llama_refused(exe, with({"--device", "cpu", "--spec", "draft"}), 2,
                                     {"--spec draft needs --model-draft PATH"}, tmp);
  llm_test::expect_run_llama_refused(exe, with({"--device", "cpu", "--model-draft", kStoriesBin}), 2,
                                     {"--model-draft needs --spec draft"}, tmp);
  llm_test::expect_run_llama_refused(exe, with({"--device", "cpu", "--spec", "sometimes"}), 2, {"sometimes"}, tmp);
  llm_test::expect_run_llama_refused(exe, with({"--device", "cpu", "--spec", "lookup", "--draft-min", "9"}), 2,
                                     {"--draft-min 9 is above --draft-max 8"}, tmp);
  llm_test::expect_run_llama_refused(
      exe, with({"--device", "cpu", "--spec", "draft", "--model-draft", "synthetic:tiny-gqa"}), 1,
      {"--model-draft synthetic:tiny-gqa cannot draft for", "its vocabulary has 256 tokens, the target's 512"}, tmp);
}

TEST(SpecCli, RunLlamaGreedyTextIsTheSameAndSaysTheAcceptance) {
  llm_test::TempDir tmp;
  const std::string exe = kBin + "/run-llama";
  const std::vector<std::string> base{"--model", kStoriesBin, "--tokenizer", kTok512, "--device", "cpu",
                                      "--prompt", "Once upon a time", "-n", "40", "--temp", "0"};
  const llm_test::ProgramRun plain = llm_test::run_program(exe, base, tmp);
  ASSERT_EQ(plain.code, 0) << plain.err;
  for (std::vector<std::string> spec : {std::vector<std::string>{"--spec", "lookup", "--draft-max", "4"},
                                        std::vector<std::string>{"--spec", "draft", "--model-draft", kStoriesBin}}) {
    std::vector<std::string> a = base;
    a.insert(a.end(), spec.begin(), spec.end());
    const llm_test::ProgramRun r = llm_test::run_program(exe, a, tmp);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, plain.out);
    EXPECT_NE(r.err.find("draft: n_drafted = "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(", n_accept = "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("llama_perf_context_print:        eval time"), std::string::npos) << r.err;
  }
}

}  // namespace

// The CUDA engine's choice of verify (engine/backend.h verify_in_decode_order, asked by CudaEngine::decode_order_verify):
// decode order where every kernel has a token axis, up to 1 GiB of weights per token under auto, whatever the size
// when asked for; never where a kernel lacks the axis or when the pass is asked for.
TEST(SpecVerifyOrder, DecodeOrderWhereTheAxisIsAndAutoUpToItsBound) {
  using llm::VerifyOrder;
  const double smollm2 = 0.09e9, tinyllama_bf16 = 2.2e9, at = llm::kDecodeOrderAutoBytes;
  EXPECT_TRUE(llm::verify_in_decode_order(VerifyOrder::kAuto, smollm2, true));
  EXPECT_TRUE(llm::verify_in_decode_order(VerifyOrder::kAuto, at, true));
  EXPECT_FALSE(llm::verify_in_decode_order(VerifyOrder::kAuto, at + 1, true));
  EXPECT_FALSE(llm::verify_in_decode_order(VerifyOrder::kAuto, tinyllama_bf16, true));
  EXPECT_TRUE(llm::verify_in_decode_order(VerifyOrder::kDecode, tinyllama_bf16, true));
  for (VerifyOrder o : {VerifyOrder::kAuto, VerifyOrder::kDecode, VerifyOrder::kPass})
    EXPECT_FALSE(llm::verify_in_decode_order(o, smollm2, false)) << "a kernel without the token axis";
  EXPECT_FALSE(llm::verify_in_decode_order(VerifyOrder::kPass, smollm2, true));
}
