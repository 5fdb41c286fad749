// Helpers shared by the CPU engine tests (engine_test.cpp, kv_dtype_test.cpp).
#pragma once
#include <cmath>
#include <vector>

#include "engine/backend.h"

namespace llm_test {

// Runs tokens[i] at position i and returns the logits after each one.
inline std::vector<std::vector<float>> logits_per_position(llm::Backend& b, const std::vector<int>& tokens) {
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    b.decode(tokens[i], int(i));
    out.push_back(b.logits());
  }
  return out;
}

// ||a - b|| / ||a||
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(a[i]) * a[i];
  }
  return std::sqrt(num / den);
}

}  // namespace llm_test
