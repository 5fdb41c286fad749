// The non-speculative greedy reference of the speculative-decoding tests (tests/cpu/speculative_test.cpp,
// tests/gpu/speculative_test.cu): one decode per token, with the top-2 margin of every step.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/backend.h"
#include "engine/sampler.h"  // argmax

namespace llm_test {

struct Greedy {
  std::vector<int> tokens;
  std::vector<float> margin;  // top-1 minus top-2 logit at each produced token
};

inline Greedy greedy_reference(llm::Backend& b, const std::vector<int>& prompt, int n, const std::vector<int>& stop) {
  Greedy g;
  b.prefill(prompt.data(), int(prompt.size()), 0);
  int pos = int(prompt.size());
  for (int i = 0; i < n; ++i) {
    const std::vector<float> l = b.logits();
    const int t = llm::argmax(l.data(), int(l.size()));
    float second = -INFINITY;
    for (size_t j = 0; j < l.size(); ++j)
      if (int(j) != t) second = std::max(second, l[j]);
    if (std::find(stop.begin(), stop.end(), t) != stop.end()) break;
    g.tokens.push_back(t);
    g.margin.push_back(l[size_t(t)] - second);
    if (i + 1 < n) b.decode(t, pos++);
  }
  return g;
}

}  // namespace llm_test
