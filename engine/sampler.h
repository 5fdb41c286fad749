// Sampling parameters and the CPU reference sampler. The CUDA backend implements the same rule on the device.
//   temperature == 0      -> greedy (argmax, lowest index on ties)
//   otherwise             -> softmax(logits / T), keep the top_k most likely (0 = all), then the smallest set of the
//                            most likely whose probability sums to >= top_p, renormalise, draw with one uniform number.
// The uniform number for step s is rng_unit(seed, 0x5A4D504C, s) (core/counter_rng.h): same seed, same tokens.
#pragma once
#include <cstdint>
#include <vector>

namespace llm {

struct SamplerParams {
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  uint64_t seed = 42;
};

constexpr uint64_t kSamplerStream = 0x5A4D504C;

// Samples one token from logits[0..n) for step `step`.
int sample_cpu(const float* logits, int n, const SamplerParams& p, uint64_t step);
int argmax(const float* x, int n);

}  // namespace llm
