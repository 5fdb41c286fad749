// Shared by the CUDA-engine tests (model_test.cu, long_context_test.cu, kv_fp8_engine_test.cu): the skip without a
// device, the fixed token sequence they feed, and the relative L2 distance of two logit vectors.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/backend.h"  // cuda_device_available
#include "models/model.h"

#define REQUIRE_GPU() \
  if (!llm::cuda_device_available()) GTEST_SKIP() << "no CUDA device"

namespace llm_gpu_test {

// BOS, then a fixed spread of ids over the vocabulary.
inline std::vector<int> test_tokens(const llm::ModelConfig& c, int n) {
  std::vector<int> t(static_cast<size_t>(n));
  t[0] = (c.bos_id >= 0 && c.bos_id < c.vocab_size) ? c.bos_id : 0;
  for (int i = 1; i < n; ++i) t[size_t(i)] = int((int64_t(i) * 7919 + 13) % c.vocab_size);
  return t;
}

// ||got - want|| / ||want||; infinite for a size mismatch, an empty reference or a non-finite logit.
inline double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size() || want.empty()) return std::numeric_limits<double>::infinity();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    const double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace llm_gpu_test
