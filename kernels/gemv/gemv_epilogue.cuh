// The device side of GemvEpilogue (kernels/gemv/gemv_epilogue.h): every GEMV kernel computes its block's scale with
// gemv_epilogue_scale (block-uniform, after pdl_wait) and stores each finished row through gemv_store_row.
#pragma once
#include <cstdint>

#include "kernels/gemv/gemv_epilogue.h"
#include "kernels/ops/block_reduce.cuh"  // block_sum

namespace llm {

#if defined(__CUDACC__)
// A consumer's row scale 1 / sqrt(mean(norm_x^2) + eps), the same for every block (same order of sums), or 1 when not
// a consumer. Block-uniform: every thread of the block calls it (it has barriers), after pdl_wait (norm_x is the
// predecessor's output). Same expression as the CPU reference's RMSNorm: 1 / sqrt(mean + eps), not rsqrtf.
__device__ __forceinline__ float gemv_epilogue_scale(const GemvEpilogue& ep) {
  if (!ep.norm_x) return 1.0f;
  __shared__ float red[32];
  float t = 0.0f;
#pragma unroll 4
  for (int i = threadIdx.x; i < ep.norm_n; i += blockDim.x) {
    const float v = ep.norm_x[i];
    t = fmaf(v, v, t);
  }
  t = block_sum(t, red);
  return 1.0f / sqrtf(t / float(ep.norm_n) + ep.eps);
}

// y[row] = scale * dot, or y[row] += that when accumulate; a producer also writes xg[row] = norm_w[row] * y[row].
__device__ __forceinline__ void gemv_store_row(const GemvEpilogue& ep, float* y, int64_t row, float dot,
                                               int accumulate, float scale) {
  const float out = accumulate ? y[row] + scale * dot : scale * dot;
  y[row] = out;
  if (ep.xg) ep.xg[row] = ep.norm_w[row] * out;
}
#endif

}  // namespace llm
