// RoPE's rotation of one interleaved pair, device code only: shared by kernels/ops/rope.cu (rope, rope_kv_store) and
// kernels/attention/kv_fp8.cu (rope_kv_store_fp8) so that every kernel that rotates q or k gives the same bits.
// Numerics: angle = float(pos) * inv_freq in FP32 (one rounding), then the precise sincosf (no fast math).
#pragma once
#include <cuda_runtime.h>

namespace llm {

// The pair (x0, x1) rotated by pos * inv_freq. The roundings are spelled out (one product rounded, then one fused
// multiply-add) so that every kernel this is inlined into gets the same bits whatever the compiler would contract:
// the fused decode attention (attention_decode_rope) is bit for bit rope_kv_store + attention_decode only so.
__device__ __forceinline__ float2 rotate_pair(float x0, float x1, int pos, float inv_freq) {
  const float a = __fmul_rn(float(pos), inv_freq);
  float s, c;
  sincosf(a, &s, &c);
  return make_float2(__fmaf_rn(x0, c, -__fmul_rn(x1, s)), __fmaf_rn(x0, s, __fmul_rn(x1, c)));
}

}  // namespace llm
