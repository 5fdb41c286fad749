#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/counter_rng.h"

namespace llm {

int argmax(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

int sample_cpu(const float* logits, int n, const SamplerParams& p, uint64_t step) {
  if (p.temperature <= 0.0f || p.top_k == 1) return argmax(logits, n);
  const float mx = logits[argmax(logits, n)];
  std::vector<int> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::vector<double> prob(static_cast<size_t>(n));
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += prob[size_t(i)] = std::exp(double(logits[i] - mx) / p.temperature);
  for (auto& q : prob) q /= sum;
  // Most likely first; ties by lower index, so the order (and the draw) is deterministic.
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return prob[size_t(a)] > prob[size_t(b)]; });
  int keep = (p.top_k > 0 && p.top_k < n) ? p.top_k : n;
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    int k = 0;
    while (k < keep) {
      cum += prob[size_t(idx[size_t(k)])];
      ++k;
      if (cum >= p.top_p) break;
    }
    keep = k;
  }
  double total = 0.0;
  for (int k = 0; k < keep; ++k) total += prob[size_t(idx[size_t(k)])];
  double u = double(rng_unit(p.seed, kSamplerStream, step)) * total;
  double cum = 0.0;
  for (int k = 0; k < keep; ++k) {
    cum += prob[size_t(idx[size_t(k)])];
    if (u < cum) return idx[size_t(k)];
  }
  return idx[size_t(keep - 1)];
}

}  // namespace llm
