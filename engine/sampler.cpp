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

float top2_margin(const float* x, int n, int best) {
  float second = -INFINITY;
  for (int i = 0; i < n; ++i)
    if (i != best && x[i] > second) second = x[i];
  return n < 2 ? INFINITY : x[best] - second;
}

namespace {

// softmax(logits / T), most likely first (ties by lower index, so the order and the draw are deterministic), cut to
// top_k then top_p: prob [n], idx [n] sorted, keep = how many of idx are candidates, total = their probability.
struct Candidates {
  std::vector<double> prob;
  std::vector<int> idx;
  int keep = 0;
  double total = 0.0;
};

Candidates candidates(const float* logits, int n, const SamplerParams& p) {
  Candidates c;
  const float mx = logits[argmax(logits, n)];
  c.idx.resize(static_cast<size_t>(n));
  std::iota(c.idx.begin(), c.idx.end(), 0);
  c.prob.resize(static_cast<size_t>(n));
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += c.prob[size_t(i)] = std::exp(double(logits[i] - mx) / p.temperature);
  for (auto& q : c.prob) q /= sum;
  std::stable_sort(c.idx.begin(), c.idx.end(), [&](int a, int b) { return c.prob[size_t(a)] > c.prob[size_t(b)]; });
  int keep = (p.top_k > 0 && p.top_k < n) ? p.top_k : n;
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    int k = 0;
    while (k < keep) {
      cum += c.prob[size_t(c.idx[size_t(k)])];
      ++k;
      if (cum >= p.top_p) break;
    }
    keep = k;
  }
  c.keep = keep;
  for (int k = 0; k < keep; ++k) c.total += c.prob[size_t(c.idx[size_t(k)])];
  return c;
}

}  // namespace

bool is_greedy(const SamplerParams& p) { return p.temperature <= 0.0f || p.top_k == 1; }

int sample_cpu(const float* logits, int n, const SamplerParams& p, uint64_t step) {
  if (is_greedy(p)) return argmax(logits, n);
  const Candidates c = candidates(logits, n, p);
  double u = double(rng_unit(p.seed, kSamplerStream, step)) * c.total;
  double cum = 0.0;
  for (int k = 0; k < c.keep; ++k) {
    cum += c.prob[size_t(c.idx[size_t(k)])];
    if (u < cum) return c.idx[size_t(k)];
  }
  return c.idx[size_t(c.keep - 1)];
}

std::vector<double> sampler_probs(const float* logits, int n, const SamplerParams& p) {
  std::vector<double> out(size_t(n), 0.0);
  if (is_greedy(p)) {
    out[size_t(argmax(logits, n))] = 1.0;
    return out;
  }
  const Candidates c = candidates(logits, n, p);
  for (int k = 0; k < c.keep; ++k) out[size_t(c.idx[size_t(k)])] = c.prob[size_t(c.idx[size_t(k)])] / c.total;
  return out;
}

int draw_from(const std::vector<double>& prob, double total, float u) {
  const double target = double(u) * total;
  double cum = 0.0;
  int last = -1;
  for (size_t i = 0; i < prob.size(); ++i) {
    if (prob[i] <= 0.0) continue;
    cum += prob[i];
    last = int(i);
    if (target < cum) return int(i);
  }
  return last;  // rounding: the last id with mass
}

}  // namespace llm
