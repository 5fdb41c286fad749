// What a decode GEMV does with each finished row besides storing it: the RMSNorm fold (plain C++, shared by the BF16
// mappings, the quantized forms and their host emulation).
//
// RMSNorm(x) = x * g / rms(x), and a GEMV is linear, so W RMSNorm(x) = (W (g * x)) / rms(x). The GEMV that writes the
// residual x (o, down: y += W v) is the producer: for each finished row it also writes xg[n] = g[n] * x[n]. The GEMV
// that reads the norm (q|k|v, gate|up, the head) is the consumer: it reads xg as its x, and every one of its blocks
// computes 1 / rms(x) = 1 / sqrt(mean(x^2) + eps) itself from the residual x (a few KB, read through L1 once per
// block, after its first weight loads are in flight), then multiplies each of its rows by it. So no RMSNorm kernel
// runs between them, and nothing crosses blocks: no block sums, no counters, no fences; every block sums the squares in
// the same order (deterministic).
#pragma once

namespace llm {

struct GemvEpilogue {
  // Consumer: y[n] = (W x)[n] / sqrt(mean(norm_x[0, norm_n)^2) + eps). Null: no scale.
  const float* norm_x = nullptr;
  int norm_n = 0;
  float eps = 0.0f;
  // Producer (both set, or xg null): xg[n] = norm_w[n] * y[n] for the final y (after accumulate).
  const float* norm_w = nullptr;
  float* xg = nullptr;

  bool consumer() const { return norm_x != nullptr; }
  bool producer() const { return xg != nullptr; }
  bool any() const { return consumer() || producer(); }
};

}  // namespace llm
