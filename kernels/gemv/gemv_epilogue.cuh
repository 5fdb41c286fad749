// The device side of GemvEpilogue (kernels/gemv/gemv_epilogue.h): every GEMV kernel's final writer stores a row
// through gemv_store_row and, when a producer, ends with gemv_epilogue_finish (block-uniform).
#pragma once
#include <cstdint>

#include "kernels/gemv/gemv_epilogue.h"
#include "kernels/ops/block_reduce.cuh"  // block_sum

namespace llm {

#if defined(__CUDACC__)
// y[row] = dot (times *ep.scale), or y[row] += that when accumulate; a producer also writes xg[row] and adds the
// final value's square to *ss (this thread's running sum of its rows).
__device__ __forceinline__ void gemv_store_row(const GemvEpilogue& ep, float* y, int64_t row, float dot,
                                               int accumulate, float* ss) {
  if (ep.scale) dot *= __ldcg(ep.scale);  // written by the producer grid: read through L2
  const float out = accumulate ? y[row] + dot : dot;
  y[row] = out;
  if (ep.xg) {
    ep.xg[row] = ep.norm_w[row] * out;
    *ss = fmaf(out, out, *ss);
  }
}

// A producer's end, called once by every thread of every block (block-uniform: blockDim.x a multiple of 32): the
// block's sum of squares into partials[block]; the last block to arrive adds the partials in block order and
// writes *inv, then re-arms the counter for the next launch. No-op unless ep is a producer. n: rows of the output.
// block / blocks: this block's index among the launch's blocks of its token (blockIdx.x / gridDim.x but under a token
// axis laid along x: the kernel's own count).
__device__ __forceinline__ void gemv_epilogue_finish(const GemvEpilogue& ep, float ss, int64_t n, unsigned block,
                                                     unsigned blocks) {
  if (!ep.xg) return;
  __shared__ float red[32];
  __shared__ bool last;
  ss = block_sum(ss, red);
  if (!ep.inv) {  // the consumer adds the partials (GemvEpilogue::scale_sums): read after this grid completes
    if (threadIdx.x == 0) {
      ep.partials[block] = ss;
      if (block == 0) *ep.count = blocks;
    }
    return;
  }
  if (threadIdx.x == 0) {
    __stcg(ep.partials + block, ss);
    __threadfence();  // this block's partial is visible before its arrival is counted
    last = atomicAdd(ep.arrivals, 1u) == blocks - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // every other block's partial is visible (they fenced before arriving)
  float t = 0.0f;
  for (unsigned i = threadIdx.x; i < blocks; i += blockDim.x) t += __ldcg(ep.partials + i);
  t = block_sum(t, red);
  if (threadIdx.x == 0) {
    // Same expression as the CPU reference's RMSNorm: 1 / sqrt(mean + eps), not rsqrtf.
    *ep.inv = 1.0f / sqrtf(t / float(n) + ep.eps);
    *ep.arrivals = 0u;
  }
}
__device__ __forceinline__ void gemv_epilogue_finish(const GemvEpilogue& ep, float ss, int64_t n) {
  gemv_epilogue_finish(ep, ss, n, blockIdx.x, gridDim.x);
}

// A consumer's s from its producer's block sums (GemvEpilogue::scale_sums), called by all 32 lanes of a warp at a
// converged point after the kernel's wait: each lane loads up to 8 sums per round at once (one L2 round trip for up
// to 256 blocks), adds them, then a xor butterfly, after which every lane holds the same bits (each step adds the
// same two values in either order); every warp adds the same values in the same order.
__device__ __forceinline__ float gemv_norm_scale_warp(const GemvEpilogue& ep, int lane) {
  const unsigned count = __ldcg(ep.scale_count);
  float t = 0.0f;
  for (unsigned base = 0; base < count; base += 32u * 8u) {
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const unsigned i = base + unsigned(j) * 32u + unsigned(lane);
      v[j] = i < count ? __ldcg(ep.scale_sums + i) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) t += v[j];
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return 1.0f / sqrtf(t / float(ep.norm_n) + ep.eps);  // as the CPU reference's RMSNorm, not rsqrtf
}
#endif

}  // namespace llm
