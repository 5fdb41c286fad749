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

// The distribution sample_cpu draws from, as probabilities [n] (zero outside the kept set, summing to 1): the same
// temperature / top_k / top_p transform; greedy (temperature 0 or top_k 1) is a point mass on argmax. Speculative
// sampling (engine/speculative.h) needs it for the target (p) and a draft model (q).
std::vector<double> sampler_probs(const float* logits, int n, const SamplerParams& p);
// Draws from probabilities prob[0..n) (summing to `total`, not necessarily 1) with the uniform number u in [0, 1).
int draw_from(const std::vector<double>& prob, double total, float u);
int argmax(const float* x, int n);
// x[best] minus the largest other value of x[0..n) (best: argmax's index); +inf for n < 2.
float top2_margin(const float* x, int n, int best);
// Whether p samples greedily (temperature 0 or top_k 1): sample_cpu is then argmax.
bool is_greedy(const SamplerParams& p);

}  // namespace llm
