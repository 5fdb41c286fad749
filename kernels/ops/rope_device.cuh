// RoPE's rotation of one interleaved pair, device code only: shared by kernels/ops/rope.cu (rope, rope_kv_store) and
// kernels/attention/kv_fp8.cu (rope_kv_store_fp8) so that every kernel that rotates q or k gives the same bits.
// Numerics: angle = float(pos) * inv_freq in FP32 (one rounding), then the precise sincosf (no fast math).
#pragma once
#include <cuda_runtime.h>

namespace llm {

// The pair (x0, x1) rotated by pos * inv_freq.
__device__ __forceinline__ float2 rotate_pair(float x0, float x1, int pos, float inv_freq) {
  const float a = float(pos) * inv_freq;
  float s, c;
  sincosf(a, &s, &c);
  return make_float2(x0 * c - x1 * s, x0 * s + x1 * c);
}

}  // namespace llm
