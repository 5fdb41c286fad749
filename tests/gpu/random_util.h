// Shared by the GEMV tests: the run's random seed (fresh each run; LLM_TEST_SEED=<n> reproduces a failing one) and a
// host parallel-for for the FP64 references.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <thread>
#include <vector>

#include "core/counter_rng.h"  // rng_mix

namespace llm_test {

// The seed of this test binary's random inputs (one per process), printed once so a failure can be reproduced.
inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("LLM_TEST_SEED");
    const uint64_t s = env ? std::strtoull(env, nullptr, 10)
                           : llm::rng_mix(uint64_t(std::chrono::system_clock::now().time_since_epoch().count()));
    std::cout << "[ gemv    ] random inputs seeded with LLM_TEST_SEED=" << s << " (set it to reproduce)\n";
    return s;
  }();
  return seed;
}

// f(begin, end) over [0, n) split across the hardware's threads (at most 64).
template <typename F>
void parallel_for(size_t n, F f) {
  const size_t workers = std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), 64));
  const size_t per = (n + workers - 1) / workers;
  std::vector<std::thread> pool;
  for (size_t w = 0; w < workers; ++w) {
    const size_t b = w * per, e = std::min(n, b + per);
    if (b < e) pool.emplace_back([=] { f(b, e); });
  }
  for (auto& t : pool) t.join();
}

}  // namespace llm_test
