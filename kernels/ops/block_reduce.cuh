// Warp- and block-wide reductions shared by the norm, attention and sampling kernels (device code only).
#pragma once
#include <cmath>
#include <cstdint>

namespace llm {

constexpr unsigned kFullWarp = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullWarp, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, o));
  return v;
}

// Max over the block, returned to every thread (NaN never wins a comparison). blockDim.x a multiple of 32; red holds
// 32 floats. Starts with a barrier so that back-to-back calls may reuse `red`.
__device__ __forceinline__ float block_max(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < n_warps ? red[lane] : -INFINITY;
  return warp_max(v);
}

// Sum over the block, returned to every thread. blockDim.x must be a multiple of 32; red holds 32 floats.
// Starts with a barrier so that back-to-back calls may reuse `red`.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < n_warps ? red[lane] : 0.0f;
  return warp_sum(v);
}

// Exclusive prefix sum over the block in thread order; *total gets the block total (every thread).
// blockDim.x must be a multiple of 32; warp_tot holds 32 values. Starts with a barrier (reusable scratch).
__device__ __forceinline__ unsigned long long block_exclusive_scan(unsigned long long v, unsigned long long* warp_tot,
                                                                   unsigned long long* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  unsigned long long incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    unsigned long long n = __shfl_up_sync(kFullWarp, incl, o);
    if (lane >= o) incl += n;
  }
  __syncthreads();
  if (lane == 31) warp_tot[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    unsigned long long w = lane < n_warps ? warp_tot[lane] : 0ull;
    for (int o = 1; o < 32; o <<= 1) {
      unsigned long long n = __shfl_up_sync(kFullWarp, w, o);
      if (lane >= o) w += n;
    }
    warp_tot[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  *total = warp_tot[n_warps - 1];
  return (warp > 0 ? warp_tot[warp - 1] : 0ull) + incl - v;
}

}  // namespace llm
