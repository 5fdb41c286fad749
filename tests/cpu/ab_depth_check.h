// llama-ab --depth's pass, shared by the CPU test (tests/cpu/prompt_input_test.cpp) and the GPU test
// (tests/gpu/ab_depth_gpu_test.cu): with a context of `depth` tokens prefilled once (ab_prefill_context), a pass that
// re-prefills only the last of them at position depth - 1 (ab_decode_pass's start_pos) samples the ids of a pass that
// prefills all of them itself; a second pass on the same cache samples them again; the same token at position 0
// samples other ids (so the check depends on the depth).
#pragma once
#include <gtest/gtest.h>

#include <vector>

#include "engine/backend.h"
#include "measure/ab_run.h"
#include "models/model.h"

namespace llm_test {

inline void expect_depth_pass_matches_full_prefill(const llm::Model& model, const llm::BackendOptions& bo,
                                                   const std::vector<int>& prompt, int depth, int n) {
  using namespace llm;
  const std::vector<int> context = ab_depth_tokens(prompt, depth);
  ASSERT_EQ(int(context.size()), depth);

  auto full = make_backend(model, bo);
  const AbPass want = ab_decode_pass(*full, context, n, 42);
  ASSERT_EQ(int(want.tokens.size()), n + 1);

  auto deep = make_backend(model, bo);
  EXPECT_GT(ab_prefill_context(*deep, context, 42), 0.0);
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE("pass " + std::to_string(pass));
    const AbPass got = ab_decode_pass(*deep, {context.back()}, n, 42, depth - 1);
    EXPECT_EQ(got.tokens, want.tokens);
  }
  auto bare = make_backend(model, bo);
  EXPECT_NE(ab_decode_pass(*bare, {context.back()}, n, 42).tokens, want.tokens);
  // Steps past the cache are refused by the loop, not run.
  EXPECT_THROW(ab_decode_pass(*deep, {context.back()}, n, 42, deep->ctx_size()), Error);
}

}  // namespace llm_test
