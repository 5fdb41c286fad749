// The persistent decode kernel's staging of a GEMV's input vector in shared memory: RMSNorm of x (the q|k|v, gate|up
// and head stages), a plain copy (the o and down stages read att and hb), and x's int8 form for the "warp-dp4a" lane
// code; each writes xs in the order the stage's lane code reads it (XLayout). These are the kernel's norms: the
// rmsnorm kernel's expression, fused with the GEMV that reads its output. Included by persistent_decode.cu only (one
// translation unit).
#pragma once
#include <cstdint>

#include "core/dtype.h"                         // bf16_to_f32
#include "kernels/ops/block_reduce.cuh"         // block_sum
#include "kernels/persistent/persistent_sync.cuh"  // kThreads, kWarps, Shared
#include "kernels/quant/gemv_quant_device.cuh"  // QuantXq8, quant_x_q8_lanes

namespace llm {
namespace {

// Where x[k] sits in the staged vector: BF16 reads it in order; a quantized stage reads it as the quantized "warp"
// mapping's QuantXShared, float4 word j of chunk c at float4 index j * chunks + c (lanes on consecutive chunks read
// consecutive 16 bytes).
struct XLayout {
  int shift = 0, chunks = 0;  // weights per chunk = 1 << shift (0: in order)
  __device__ __forceinline__ int at(int k) const {
    if (shift == 0) return k;
    return ((((k & ((1 << shift) - 1)) >> 2) * chunks + (k >> shift)) << 2) + (k & 3);
  }
  __device__ __forceinline__ int src4(int j) const {  // the float4 of x (elements 4i .. 4i + 3) at float4 index j
    if (shift == 0) return j;
    const int w4 = j / chunks;  // word of the chunk
    return (j - w4 * chunks) * (1 << (shift - 2)) + w4;
  }
  __device__ __forceinline__ int dst4(int i) const {  // where float4 i of x goes: src4's inverse
    if (shift == 0) return i;
    return (i & ((1 << (shift - 2)) - 1)) * chunks + (i >> (shift - 2));
  }
};

// A staged input's load: written in this kernel, so through L2 (ld.global.cg), or from this block's own shared memory
// (the cluster form's mirrors).
template <class T>
__device__ __forceinline__ T ld_stage(const T* p) {
  return __isShared(p) ? *p : __ldcg(p);
}

// x8 = xs (K values in order, K a multiple of 32) quantized per block of 32 as the "warp-dp4a" mapping does
// (quant_x_q8_lanes: bit for bit quant_x_q8_block): 8 lanes per block, a float4 each. Ends with a block barrier.
__device__ void stage_q8(const float* xs, int K, const QuantXq8& x8) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sub = lane & 7, nb = K >> 5;
  int8_t* q = const_cast<int8_t*>(x8.q);
  float* xd = const_cast<float*>(x8.d);
  int* s16 = const_cast<int*>(x8.s16);
  for (int base = warp * 4; base < nb; base += kWarps * 4) {  // warp-uniform
    const int b = base + (lane >> 3);
    const float4 v = b < nb ? reinterpret_cast<const float4*>(xs)[b * 8 + sub] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    quant_x_q8_lanes(v, b, b < nb, sub, q, xd, s16);
  }
  __syncthreads();
}


// xs[lay.at(k)] = src[k] for k < n (written in this kernel: read through L2; 16-byte loads, four in flight per thread
// when n is a multiple of 4, taken in the order of x so that a warp's loads are contiguous, stored where the layout
// puts them), zeros up to the 8-element chunk. Returns this thread's sum of squares of what it copied.
__device__ float load_vector(const float* src, int n, float* xs, XLayout lay) {
  float ss = 0.0f;
  if ((n & 3) == 0) {
    const int n4 = n >> 2;
    const float4* s4 = reinterpret_cast<const float4*>(src);
    float4* d4 = reinterpret_cast<float4*>(xs);
    for (int i = threadIdx.x; i < n4; i += 4 * kThreads) {
      float4 v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (i + j * kThreads < n4) v[j] = ld_stage(s4 + i + j * kThreads);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (i + j * kThreads < n4) {
          d4[lay.dst4(i + j * kThreads)] = v[j];
          ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
        }
    }
  } else {
    for (int k = threadIdx.x; k < n; k += kThreads) {
      const float v = ld_stage(src + k);
      xs[lay.at(k)] = v;
      ss += v * v;
    }
  }
  for (int k = n + threadIdx.x; k < ((n + 7) & ~7); k += kThreads) xs[lay.at(k)] = 0.0f;
  return ss;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// The norm's weights into gs in the order of xs (gs[lay.at(k)] = w[k]), issued before the stage's wait: they never
// change, so their load hides behind the wait instead of following the norm's reduction. cp.async (16 bytes, no
// registers held) where dim % 4 == 0, else plain stores; stage_norm waits for them.
__device__ void stage_norm_weights(const float* w, int dim, float* gs, XLayout lay) {
  if ((dim & 3) == 0) {
    for (int j = threadIdx.x; j < (dim >> 2); j += kThreads) cp_async16(gs + 4 * j, w + 4 * lay.src4(j));
  } else {
    for (int k = threadIdx.x; k < dim; k += kThreads) gs[lay.at(k)] = __ldg(w + k);
  }
}

// v * inv_rms * g per element (the rmsnorm kernel's expression).
__device__ __forceinline__ float4 norm4(float4 v, float inv, const float4& g) {
  v.x = v.x * inv * g.x;
  v.y = v.y * inv * g.y;
  v.z = v.z * inv * g.z;
  v.w = v.w * inv * g.w;
  return v;
}

// xs[lay.at(k)] = src[k] * inv_rms * w[k] (the rmsnorm kernel's expression), the weights already on their way to gs
// (stage_norm_weights), zeros past dim up to the 8-element chunk. src is FP32 x or, for the first layer, the BF16
// embedding row.
__device__ void stage_norm(const float* src, const uint16_t* src_bf16, const float* gs, int dim, float eps,
                           float* xs, XLayout lay, Shared& sh, const QuantXq8* q8) {
  float ss = 0.0f;
  if (src_bf16) {
    for (int k = threadIdx.x; k < dim; k += kThreads) {
      const float v = bf16_to_f32(src_bf16[k]);
      xs[lay.at(k)] = v;
      ss += v * v;
    }
    for (int k = dim + threadIdx.x; k < ((dim + 7) & ~7); k += kThreads) xs[lay.at(k)] = 0.0f;
  } else {
    ss = load_vector(src, dim, xs, lay);
  }
  cp_async_wait_all();  // this thread's weights; block_sum's barriers publish everyone's
  ss = block_sum(ss, sh.red);
  const float inv = 1.0f / sqrtf(ss / float(dim) + eps);
  if (q8 && (dim & 31) == 0) {  // the same float4s, 8 lanes per block of 32, quantized on the way (stage_q8's work)
    float4* x4 = reinterpret_cast<float4*>(xs);
    const float4* g4 = reinterpret_cast<const float4*>(gs);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sub = lane & 7, nb = dim >> 5;
    for (int base = warp * 4; base < nb; base += kWarps * 4) {  // warp-uniform
      const int b = base + (lane >> 3), j = b * 8 + sub;
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (b < nb) x4[j] = v = norm4(x4[j], inv, g4[j]);
      quant_x_q8_lanes(v, b, b < nb, sub, const_cast<int8_t*>(q8->q), const_cast<float*>(q8->d),
                       const_cast<int*>(q8->s16));
    }
  } else if ((dim & 3) == 0) {  // float4 by float4 in the order of xs
    float4* x4 = reinterpret_cast<float4*>(xs);
    const float4* g4 = reinterpret_cast<const float4*>(gs);
    for (int j = threadIdx.x; j < (dim >> 2); j += kThreads) x4[j] = norm4(x4[j], inv, g4[j]);
  } else {
    for (int k = threadIdx.x; k < dim; k += kThreads) xs[lay.at(k)] = xs[lay.at(k)] * inv * gs[lay.at(k)];
  }
  __syncthreads();
  if (q8 && (dim & 31) != 0) stage_q8(xs, dim, *q8);  // (not reached: quantized K is a multiple of 32)
}

// xs = src (n values, written in this kernel), and with q8, x's int8 form too (stage_q8's work, on the way where n is a
// multiple of 32 and each warp takes at most two rounds of blocks: their loads are issued together).
__device__ void stage_copy(const float* src, int n, float* xs, XLayout lay, const QuantXq8* q8) {
  const int nb = n >> 5;
  if (q8 && (n & 31) == 0 && nb <= 2 * kWarps * 4 && (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
    const float4* s4 = reinterpret_cast<const float4*>(src);
    float4* x4 = reinterpret_cast<float4*>(xs);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sub = lane & 7;
    const int b0 = warp * 4 + (lane >> 3), b1 = b0 + kWarps * 4;  // this lane's blocks in the two rounds
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float4 v0 = b0 < nb ? ld_stage(s4 + b0 * 8 + sub) : zero, v1 = b1 < nb ? ld_stage(s4 + b1 * 8 + sub) : zero;
    int8_t* q = const_cast<int8_t*>(q8->q);
    float* xd = const_cast<float*>(q8->d);
    int* s16 = const_cast<int*>(q8->s16);
    if (warp * 4 < nb) {  // warp-uniform
      if (b0 < nb) x4[b0 * 8 + sub] = v0;
      quant_x_q8_lanes(v0, b0, b0 < nb, sub, q, xd, s16);
    }
    if (warp * 4 + kWarps * 4 < nb) {
      if (b1 < nb) x4[b1 * 8 + sub] = v1;
      quant_x_q8_lanes(v1, b1, b1 < nb, sub, q, xd, s16);
    }
    __syncthreads();
    return;
  }
  load_vector(src, n, xs, lay);
  __syncthreads();
  if (q8) stage_q8(xs, n, *q8);
}

}  // namespace
}  // namespace llm
