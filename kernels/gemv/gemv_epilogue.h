// What a decode GEMV does with each finished row besides storing it: the RMSNorm fold (plain C++, shared by the BF16
// mappings, the quantized forms and their host emulation).
//
// RMSNorm(x) = x * g / rms(x), and a GEMV is linear, so W RMSNorm(x) = (W (g * x)) / rms(x). The GEMV that writes the
// residual x (o, down: y += W v) is the producer: for each finished row it also writes xg[n] = g[n] * x[n], and each
// block stores its sum of x[n]^2 into sums[block] (block 0 also stores the block count). No fence, no counter, no last
// block: the producer ends when its blocks do. The GEMV that reads the norm (q|k|v, gate|up, the head) is the
// consumer: it reads xg as its x, and each of its threads that stores a row first adds the producer's block sums in
// one fixed order (so every thread of every block gets the same bits) into s = 1 / sqrt(sum / n + eps) and multiplies
// its rows by s. So no RMSNorm kernel runs between them, and the norm's reduction is off the producer's tail: a
// consumer's threads add ~N / 256 floats from L2 while their weight loads are in flight.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace llm {

struct GemvEpilogue {
  // Consumer: y[n] = s * (W x)[n], s = 1 / sqrt(sum(sums[0, *count)) / norm_n + eps), the producer's block sums
  // (gemv_norm_scale: the one order). Null scale_sums: no scale.
  const float* scale_sums = nullptr;
  const unsigned* scale_count = nullptr;
  int norm_n = 0;
  float eps = 0.0f;
  // Producer (all three set, or xg null): xg[n] = norm_w[n] * y[n] for the final y (after accumulate); sums[b] = block
  // b's sum of y[n]^2 over its rows (kGemvEpiloguePartials blocks at most); *count = the launch's block count.
  const float* norm_w = nullptr;
  float* xg = nullptr;
  float* sums = nullptr;
  unsigned* count = nullptr;
  // An input hint, not part of the fold: x already in warp-dp4a's int8 form (quant_x_smem layout, quant_x_smem_bytes(K)
  // bytes, 16-byte aligned; written by the kernel before, e.g. quant_batch_swiglu_x) for the same x the launch gets.
  // warp-dp4a copies it into shared memory instead of quantizing x in every block; every other form ignores it (x
  // stays valid), so it never changes which mappings may run a launch (any() leaves it out).
  const void* x_q8 = nullptr;

  bool producer() const { return xg != nullptr; }
  bool consumer() const { return scale_sums != nullptr; }
  bool any() const { return consumer() || producer(); }
};

// Blocks one producing launch may have (its sums buffer holds this many floats).
constexpr int kGemvEpiloguePartials = 1 << 16;

// The consumer's scale from the producer's block sums, in the one order every thread uses (host and device): eight
// running sums over i % 8, then added pairwise; 1 / sqrt(mean + eps) as the CPU reference's RMSNorm, not rsqrt.
#if defined(__CUDACC__)
#define LLM_EPILOGUE_HD __host__ __device__ __forceinline__
#else
#define LLM_EPILOGUE_HD inline
#endif
template <typename Load>
LLM_EPILOGUE_HD float gemv_norm_scale(Load load, unsigned count, int norm_n, float eps) {
  float s[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  unsigned i = 0;
  for (; i + 8 <= count; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += load(i + unsigned(j));
  for (int j = 0; i < count; ++i, ++j) s[j] += load(i);
  const float t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  return 1.0f / sqrtf(t / float(norm_n) + eps);
}
#undef LLM_EPILOGUE_HD

}  // namespace llm
