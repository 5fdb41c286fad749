// Device helpers shared by the lanes-along-K GEMV kernels (kernels/gemv/gemv_warp.cu, gemv_warp_r2.cu,
// gemv_batched.cu): the 16-byte streaming weight load, BF16 pairs to FP32 FMAs, x chunks, the warp reduction.
#pragma once
#include <cstdint>

#include "kernels/ops/block_reduce.cuh"  // warp_sum

namespace llm {

// volatile only to keep the first group of weight loads ahead of pdl_wait() (the weights never change, so issuing
// them before the previous kernel has finished is safe).
__device__ __forceinline__ uint4 load_weights_streaming(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Two BF16 in one word: the lower address is the low half (little-endian); BF16 -> FP32 is a 16-bit shift.
__device__ __forceinline__ float fma_bf16x2(uint32_t w2, float x0, float x1, float acc) {
  acc = fmaf(__uint_as_float(w2 << 16), x0, acc);
  return fmaf(__uint_as_float(w2 & 0xffff0000u), x1, acc);
}

// x[k .. k+7], zeros past K. kVecX: x is 16-byte aligned, so full chunks are two float4 loads.
template <bool kVecX>
__device__ __forceinline__ void load_x8(const float* __restrict__ x, int k, int K, float (&xv)[8]) {
  if (kVecX && k + 8 <= K) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(x + k));
    const float4 b = __ldg(reinterpret_cast<const float4*>(x + k) + 1);
    xv[0] = a.x; xv[1] = a.y; xv[2] = a.z; xv[3] = a.w;
    xv[4] = b.x; xv[5] = b.y; xv[6] = b.z; xv[7] = b.w;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) xv[i] = k + i < K ? __ldg(x + k + i) : 0.0f;
  }
}

__device__ __forceinline__ float dot8(uint4 w, const float (&xv)[8], float acc) {
  acc = fma_bf16x2(w.x, xv[0], xv[1], acc);
  acc = fma_bf16x2(w.y, xv[2], xv[3], acc);
  acc = fma_bf16x2(w.z, xv[4], xv[5], acc);
  return fma_bf16x2(w.w, xv[6], xv[7], acc);
}

// One lane's part of one row's dot over the 16-byte chunks [c_begin, c_end) of w (lane l takes chunks c_begin + l +
// 32 i): U weight loads issued before the first FMA, after_loads() between them and the FMAs, x's chunk c (its 8
// values) from load_x(c, xv); chunks past c_end are neither loaded nor used. The per-row loop of the "warp" mapping:
// gemv_warp.cu's kernel runs the same loop (after_loads: its first pdl_wait; x through load_x8), the persistent
// kernel's "warp" tasks (kernels/persistent/persistent_gemv.cuh) call it with x staged in shared memory.
template <int U, class LoadX, class AfterLoads>
__device__ __forceinline__ float warp_row_dot(const uint4* w, int c_begin, int c_end, int lane, LoadX&& load_x,
                                              AfterLoads&& after_loads) {
  float acc = 0.0f;
  for (int c = c_begin + lane; c < c_end; c += 32 * U) {
    uint4 r[U];
#pragma unroll
    for (int i = 0; i < U; ++i)
      if (c + 32 * i < c_end) r[i] = load_weights_streaming(w + c + 32 * i);
    after_loads();
#pragma unroll
    for (int i = 0; i < U; ++i)
      if (c + 32 * i < c_end) {
        float xv[8];
        load_x(c + 32 * i, xv);
        acc = dot8(r[i], xv, acc);
      }
  }
  return acc;
}

// Each acc[i] summed over the warp and cleared; lane i < R returns row i's sum (the other lanes 0): the end of a row
// group in the lanes-along-K kernels.
template <int R>
__device__ __forceinline__ float warp_sum_rows(float (&acc)[R], int lane) {
  float mine = 0.0f;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const float s = warp_sum(acc[i]);
    if (lane == i) mine = s;
    acc[i] = 0.0f;
  }
  return mine;
}

}  // namespace llm
