// What a decode GEMV does with each finished row besides storing it: the RMSNorm fold (plain C++, shared by the BF16
// mappings, the quantized forms and their host emulation).
//
// RMSNorm(x) = x * g / rms(x), and a GEMV is linear, so W RMSNorm(x) = (W (g * x)) / rms(x). The GEMV that writes the
// residual x (o, down: y += W v) is the producer: for each finished row it also writes xg[n] = g[n] * x[n] and adds
// x[n]^2 to its block's sum; the last block to finish adds the block sums in block order (deterministic) and writes
// 1 / rms(x) = 1 / sqrt(mean(x^2) + eps) to *inv. The GEMV that reads the norm (q|k|v, gate|up, the head) is the
// consumer: it reads xg as its x and multiplies each row by *scale (= the producer's *inv). So no RMSNorm kernel runs
// between them: the norm costs one extra store per residual row and one multiply per output row.
#pragma once
#include <cstddef>

namespace llm {

struct GemvEpilogue {
  // Consumer: y[n] = (*scale) * (W x)[n]. Null: no scale.
  const float* scale = nullptr;
  // Producer (all four set, or xg null): xg[n] = norm_w[n] * y[n] for the final y (after accumulate); partials holds
  // one float per block of the launch (kGemvEpiloguePartials at most); arrivals is a counter at 0 before the launch
  // and left at 0 after it; *inv = 1 / sqrt(sum(y^2) / N + eps).
  const float* norm_w = nullptr;
  float* xg = nullptr;
  float* inv = nullptr;
  float* partials = nullptr;
  unsigned* arrivals = nullptr;
  float eps = 0.0f;
  // An input hint, not part of the fold: x already in warp-dp4a's int8 form (quant_x_smem layout, quant_x_smem_bytes(K)
  // bytes, 16-byte aligned; written by the kernel before, e.g. quant_batch_swiglu_x) for the same x the launch gets.
  // warp-dp4a copies it into shared memory instead of quantizing x in every block; every other form ignores it (x
  // stays valid), so it never changes which mappings may run a launch (any() leaves it out).
  const void* x_q8 = nullptr;

  bool producer() const { return xg != nullptr; }
  bool any() const { return scale != nullptr || xg != nullptr; }
};

// Blocks one producing launch may have (its partials buffer holds this many floats).
constexpr int kGemvEpiloguePartials = 1 << 16;

}  // namespace llm
