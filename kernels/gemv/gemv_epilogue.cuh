// The device side of GemvEpilogue (kernels/gemv/gemv_epilogue.h): every GEMV kernel's final writer stores a row
// through gemv_store_row (with a GemvScale of its own, computed at its first stored row) and, when a producer, ends
// with gemv_epilogue_finish (block-uniform).
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/gemv/gemv_epilogue.h"
#include "kernels/ops/block_reduce.cuh"  // block_sum

namespace llm {

#if defined(__CUDACC__)
// A thread's consumer scale, computed at its first stored row (after the kernel's wait for its producer): the
// producer's block sums read through L2 (written by the grid before) in gemv_norm_scale's order.
struct GemvScale {
  float v = 0.0f;
  bool ready = false;
  __device__ __forceinline__ float get(const GemvEpilogue& ep) {
    if (!ready) {
      const float* sums = ep.scale_sums;
      v = gemv_norm_scale([sums](unsigned i) { return __ldcg(sums + i); }, __ldcg(ep.scale_count), ep.norm_n, ep.eps);
      ready = true;
    }
    return v;
  }
};

// y[row] = dot (times the consumer scale), or y[row] += that when accumulate; a producer also writes xg[row] and adds
// the final value's square to *ss (this thread's running sum of its rows).
__device__ __forceinline__ void gemv_store_row(const GemvEpilogue& ep, float* y, int64_t row, float dot,
                                               int accumulate, float* ss, GemvScale* scale) {
  if (ep.scale_sums) dot *= scale->get(ep);
  const float out = accumulate ? y[row] + dot : dot;
  y[row] = out;
  if (ep.xg) {
    ep.xg[row] = ep.norm_w[row] * out;
    *ss = fmaf(out, out, *ss);
  }
}

// A producer's end, called once by every thread of every block (block-uniform: blockDim.x a multiple of 32): the
// block's sum of squares into sums[blockIdx.x], and block 0 stores the block count. No-op unless ep is a producer.
// The consumer reads them after this grid has completed (stream order or its griddepcontrol.wait): no fence needed.
__device__ __forceinline__ void gemv_epilogue_finish(const GemvEpilogue& ep, float ss) {
  if (!ep.xg) return;
  __shared__ float red[32];
  ss = block_sum(ss, red);
  if (threadIdx.x == 0) {
    ep.sums[blockIdx.x] = ss;
    if (blockIdx.x == 0) *ep.count = gridDim.x;
  }
}
#endif

}  // namespace llm
