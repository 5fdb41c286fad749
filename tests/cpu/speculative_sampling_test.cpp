// Speculative sampling keeps the target's distribution (engine/speculative.h): over many seeds, the first token the
// speculative loop samples (decided by the accept/reject rule on a draft) follows p, the target's sampling
// distribution after the prompt (engine/sampler.h sampler_probs), by a chi-square test; the negative control (every
// draft accepted, AcceptRule::kAcceptAll) fails the same test. stories260K on the CPU, fixed seeds: deterministic.
//
// The test: bins are the ids whose expected count N p(id) is at least 5, the rest pooled into one bin (merged into the
// smallest bin when its own expected count is under 5); the statistic sum (O - E)^2 / E against the chi-square
// quantile of upper-tail probability 1e-6 with bins - 1 degrees of freedom (Wilson-Hilferty: within a few percent for
// these sizes). A correct sampler fails it one time in a million seeds sets; the controls miss by orders of magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "models/model.h"
#include "tokenizer/load.h"

namespace {

const std::string kStories = std::string(LLM_TEST_MODELS) + "/stories260K";
const std::string kStoriesBin = kStories + "/stories260K.bin";
const std::string kTok512 = kStories + "/tok512.model";
constexpr int kRuns = 1500;

struct ChiSquare {
  double stat = 0.0;
  int df = 0;
  double critical = 0.0;
  bool passes() const { return stat < critical; }
};

// Upper-tail quantile of chi-square with df degrees of freedom at z standard deviations (z = 4.753: p = 1e-6).
double chi2_quantile(int df, double z = 4.753) {
  const double k = df, a = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

ChiSquare chi_square(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  std::vector<int> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
  std::vector<double> e, o;
  double rest_e = 0.0, rest_o = 0.0;
  for (int id : order) {
    const double expect = n * p[size_t(id)];
    if (expect >= 5.0) {
      e.push_back(expect);
      o.push_back(counts[size_t(id)]);
    } else {
      rest_e += expect;
      rest_o += counts[size_t(id)];
    }
  }
  if (rest_e >= 5.0 || e.empty()) {
    e.push_back(rest_e);
    o.push_back(rest_o);
  } else {
    e.back() += rest_e;
    o.back() += rest_o;
  }
  ChiSquare c;
  for (size_t i = 0; i < e.size(); ++i)
    if (e[i] > 0.0) c.stat += (o[i] - e[i]) * (o[i] - e[i]) / e[i];
    else if (o[i] > 0.0) c.stat = INFINITY;  // an id of probability zero was sampled
  c.df = std::max(1, int(e.size()) - 1);
  c.critical = chi2_quantile(c.df);
  return c;
}

const llm::Model& stories() {
  static const llm::Model m = llm::load_model(kStoriesBin);
  return m;
}

// p: the target's sampling distribution after `prompt`.
std::vector<double> target_p(const std::vector<int>& prompt, const llm::SamplerParams& sp) {
  auto b = llm::make_cpu_backend(stories(), llm::BackendOptions{});
  b->prefill(prompt.data(), int(prompt.size()), 0);
  const std::vector<float> l = b->logits();
  return llm::sampler_probs(l.data(), int(l.size()), sp);
}

// Counts of the first token the speculative loop produces over seeds 1..kRuns (one draft per run).
std::vector<int> first_tokens(llm::Drafter& drafter, const std::vector<int>& prompt, llm::SamplerParams sp,
                              llm::AcceptRule rule, double* accept_rate) {
  auto target = llm::make_cpu_backend(stories(), llm::BackendOptions{});
  std::vector<int> counts(size_t(stories().config.vocab_size), 0);
  llm::SpecOptions so;
  so.draft_max = 1;
  so.rule = rule;
  llm::SpecStats stats;
  for (int seed = 1; seed <= kRuns; ++seed) {
    llm::DecodeLoopOptions lo;
    lo.max_new = 2;  // room for one draft before the last token
    sp.seed = uint64_t(seed);
    lo.sampler = sp;
    const llm::DecodeLoopResult r = llm::speculative_loop(*target, drafter, prompt, lo, so, &stats);
    EXPECT_FALSE(r.tokens.empty());
    if (!r.tokens.empty()) counts[size_t(r.tokens[0])]++;
  }
  EXPECT_EQ(stats.drafted, kRuns) << "every run drafted its one token";
  *accept_rate = stats.accept_rate();
  return counts;
}

void report(const char* what, const ChiSquare& c, double accept) {
  std::printf("%-44s chi-square %10.1f, df %3d, critical (p = 1e-6) %6.1f, draft accepted %.1f%%\n", what, c.stat,
              c.df, c.critical, 100.0 * accept);
}

std::vector<int> prompt_ids(const std::string& text) {
  auto tok = llm::load_tokenizer(stories(), kTok512);
  return tok->encode(text, true);
}

TEST(SpecSampling, LookupDraftKeepsTheTargetDistributionAndAcceptAllDoesNot) {
  // Lookup proposes the token that followed "Lily saw a" earlier in the prompt (" big", p = 0.335): a point mass q.
  const std::vector<int> prompt = prompt_ids("Lily saw a big dog. Lily saw a");
  llm::SamplerParams sp{1.0f, 0, 1.0f, 0};
  const std::vector<double> p = target_p(prompt, sp);
  const int proposed = llm::lookup_proposal(prompt, 1).at(0);
  std::printf("lookup proposes id %d, target p = %.3f\n", proposed, p[size_t(proposed)]);
  ASSERT_GT(p[size_t(proposed)], 0.05);
  ASSERT_LT(p[size_t(proposed)], 0.95) << "a near-certain draft would make the test weak";

  // The plain sampler over the same seeds passes (the test can pass).
  auto b = llm::make_cpu_backend(stories(), llm::BackendOptions{});
  b->prefill(prompt.data(), int(prompt.size()), 0);
  std::vector<int> plain(p.size(), 0);
  for (int seed = 1; seed <= kRuns; ++seed) {
    sp.seed = uint64_t(seed);
    plain[size_t(b->sample(sp, 0))]++;
  }
  const ChiSquare c0 = chi_square(plain, p, kRuns);
  report("no speculation (sample_cpu)", c0, 0.0);
  EXPECT_TRUE(c0.passes());

  llm::LookupDrafter lookup;
  double acc = 0.0;
  const ChiSquare c1 = chi_square(first_tokens(lookup, prompt, sp, llm::AcceptRule::kExact, &acc), p, kRuns);
  report("lookup, exact accept/reject", c1, acc);
  EXPECT_TRUE(c1.passes());
  EXPECT_NEAR(acc, p[size_t(proposed)], 0.05) << "a point-mass draft is accepted with probability p(x)";

  const ChiSquare c2 = chi_square(first_tokens(lookup, prompt, sp, llm::AcceptRule::kAcceptAll, &acc), p, kRuns);
  report("lookup, negative control (accept every draft)", c2, acc);
  EXPECT_FALSE(c2.passes());
}

TEST(SpecSampling, DraftModelKeepsTheTargetDistributionAndAcceptAllDoesNot) {
  // The draft: the same model sampled hotter (q != p everywhere), with top_k and top_p on the target, so some
  // proposals fall outside p's support and the residual max(0, p - q) matters.
  const std::vector<int> prompt = prompt_ids("Once upon a time, there was a little");
  const llm::SamplerParams sp{1.0f, 40, 0.95f, 0};
  const llm::SamplerParams hot{2.0f, 0, 1.0f, 0};
  const std::vector<double> p = target_p(prompt, sp);
  auto draft_backend = llm::make_cpu_backend(stories(), llm::BackendOptions{});
  llm::DraftModelDrafter draft(*draft_backend, &hot);

  double acc = 0.0;
  const ChiSquare c1 = chi_square(first_tokens(draft, prompt, sp, llm::AcceptRule::kExact, &acc), p, kRuns);
  report("draft model (T 2 for T 1, top-k 40, top-p 0.95)", c1, acc);
  EXPECT_TRUE(c1.passes());
  EXPECT_GT(acc, 0.05);
  EXPECT_LT(acc, 0.95);

  const ChiSquare c2 = chi_square(first_tokens(draft, prompt, sp, llm::AcceptRule::kAcceptAll, &acc), p, kRuns);
  report("draft model, negative control (accept all)", c2, acc);
  EXPECT_FALSE(c2.passes());
}

TEST(SpecSampling, SameSeedSameTokens) {
  const std::vector<int> prompt = prompt_ids("Once upon a time, Lily ran. Once upon a");
  llm::LookupDrafter lookup;
  llm::DecodeLoopOptions lo;
  lo.max_new = 30;
  lo.sampler = {0.9f, 40, 0.95f, 1234};
  auto a = llm::make_cpu_backend(stories(), llm::BackendOptions{});
  const llm::DecodeLoopResult r1 = llm::speculative_loop(*a, lookup, prompt, lo, llm::SpecOptions{});
  const llm::DecodeLoopResult r2 = llm::speculative_loop(*a, lookup, prompt, lo, llm::SpecOptions{});
  EXPECT_EQ(r1.tokens, r2.tokens);
  EXPECT_EQ(r1.next_step, r2.next_step);
  lo.sampler.seed = 99;
  const llm::DecodeLoopResult r3 = llm::speculative_loop(*a, lookup, prompt, lo, llm::SpecOptions{});
  EXPECT_NE(r1.tokens, r3.tokens);
}

}  // namespace
