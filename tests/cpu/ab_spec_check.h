// llama-ab --spec's pass (measure/ab_run.h ab_spec_pass), shared by the CPU test (tests/cpu/prompt_input_test.cpp)
// and the GPU test (tests/gpu/ab_depth_gpu_test.cu): on a backend, prompt lookup drafting through the speculative loop
// produces the plain pass's greedy tokens (ab_decode_pass), drafts something on a repetitive prompt, and does so again
// on the same cache; at a depth the context prefilled once is the drafter's history. A history that does not match the
// start position is refused.
#pragma once
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/speculative.h"
#include "measure/ab_run.h"
#include "models/model.h"

namespace llm_test {

// depth 0: every pass prefills `prompt`; depth N: `prompt` repeated to N tokens is prefilled once, then each pass
// re-prefills its last token at N - 1 (llama-ab's protocol). `accepts`: the model is known to repeat itself after this
// prompt, so some drafts must be accepted (else drafts are only required: rejected ones still verify and rewind).
inline void expect_spec_pass_matches_plain(const llm::Model& model, const llm::BackendOptions& bo,
                                           const std::vector<int>& prompt, int depth, int n, bool accepts) {
  using namespace llm;
  const std::vector<int> context = ab_depth_tokens(prompt, depth);
  const std::vector<int> pass_prompt = depth > 0 ? std::vector<int>{context.back()} : prompt;
  const int pos = depth > 0 ? depth - 1 : 0;
  const std::vector<int> history(context.begin(), context.begin() + pos);

  auto plain_b = make_backend(model, bo);
  if (depth > 0) ab_prefill_context(*plain_b, context, 42);
  const AbPass plain = ab_decode_pass(*plain_b, pass_prompt, n, 42, pos);
  ASSERT_EQ(int(plain.tokens.size()), n + 1);

  auto spec_b = make_backend(model, bo);
  if (depth > 0) ab_prefill_context(*spec_b, context, 42);
  LookupDrafter drafter;
  SpecOptions so;
  so.draft_max = 8;
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE("speculative pass " + std::to_string(pass));
    const AbSpecPass got = ab_spec_pass(*spec_b, drafter, so, pass_prompt, n, 42, pos, depth > 0 ? &history : nullptr);
    EXPECT_EQ(got.tokens, plain.tokens);
    EXPECT_GT(got.stats.drafted, 0) << "the repetitive prompt drew no draft: the check proves nothing";
    EXPECT_LE(got.stats.accepted, got.stats.drafted);
    if (accepts) {
      EXPECT_GT(got.stats.accepted, 0);
      EXPECT_LT(got.stats.steps, n + 1) << "no step produced more than one token";
    }
    EXPECT_GT(got.ms_per_token, 0.0);
  }
  if (depth > 0) {
    const std::vector<int> short_history(history.begin(), history.end() - 1);
    EXPECT_THROW(ab_spec_pass(*spec_b, drafter, so, pass_prompt, n, 42, pos, &short_history), Error);
  }
}

}  // namespace llm_test
