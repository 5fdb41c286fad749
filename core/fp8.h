// FP8 E4M3 (OCP 8-bit floating point, "E4M3FN"): 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; no
// infinities, NaN = S.1111.111 (0x7F, 0xFF), largest finite +-448 (S.1111.110), smallest subnormal 2^-9, smallest
// normal 2^-6. The KV cache's FP8 form (engine/kv_cache.h) stores K and V as these codes with one FP32 scale per
// block; the scale rule lives here too, so the CPU reference and the CUDA kernels share one definition.
// Host-only and device-callable, integer arithmetic only (no dependence on FTZ or the rounding mode).
#pragma once
#include <cstdint>

#include "core/dtype.h"  // LLM_HD, bits_to_f32, f32_to_bits

namespace llm {

constexpr float kFp8E4M3Max = 448.0f;  // largest finite value (code 0x7E)

// The value of an E4M3 code: (-1)^s * 2^(e-7) * (1 + m/8) for e > 0, (-1)^s * 2^-6 * (m/8) for e = 0; NaN for 0x7F
// and 0xFF (a quiet FP32 NaN with the code's sign).
LLM_HD float fp8_e4m3_to_f32(uint8_t c) {
  const uint32_t sign = uint32_t(c & 0x80u) << 24;
  const uint32_t e = (c >> 3) & 0xFu, m = c & 0x7u;
  if (e == 0xFu && m == 0x7u) return bits_to_f32(sign | 0x7fc00000u);
  if (e == 0) {
    // m * 2^-9 as an FP32 normal: m = 1 -> 2^-9, 2..3 -> 2^-8 * (1 + ...), 4..7 -> 2^-7 * (1 + ...).
    if (m == 0) return bits_to_f32(sign);
    const uint32_t top = m >= 4 ? 2u : m >= 2 ? 1u : 0u;  // position of m's leading bit
    return bits_to_f32(sign | ((118u + top) << 23) | (((m << (3 - top)) & 0x7u) << 20));
  }
  return bits_to_f32(sign | ((e + 120u) << 23) | (m << 20));
}

// Nearest E4M3 code, ties to even; saturating: anything of magnitude 448 or more (infinities included) becomes
// +-448; every NaN becomes the one canonical NaN code 0x7F. The sign of zero and of a value that rounds to zero is
// kept (-0.0 -> 0x80). This is CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) on every one of the 2^32
// FP32 inputs (its host path, checked once against CUDA 13.0's cuda_fp8.hpp), so CPU and GPU caches can agree to the
// byte.
LLM_HD uint8_t f32_to_fp8_e4m3(float f) {
  const uint32_t u = f32_to_bits(f);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7Fu;                   // NaN, whatever its sign
  if (a >= 0x43e00000u) return uint8_t(sign | 0x7Eu);  // >= 448 (and Inf): saturate
  if (a >= 0x3c800000u) {                              // >= 2^-6: normal
    // Exponent field e = E - 127 + 7 in 1..8+7; keep 3 mantissa bits, round the 20 dropped ones to nearest even.
    // A mantissa that rounds up past 7 carries into the exponent, which is the right code.
    uint32_t code = (((a >> 23) - 120u) << 3) | ((a >> 20) & 0x7u);
    const uint32_t rest = a & 0xFFFFFu;
    if (rest > 0x80000u || (rest == 0x80000u && (code & 1u))) ++code;
    return uint8_t(sign | code);  // < 448 cannot round past 0x7E
  }
  // Below 2^-6: a multiple of 2^-9 (code = that multiple, 0..8; 8 is the smallest normal, 0x08). |x| = M * 2^(E-150)
  // with M the 24-bit significand (E = 0: subnormal FP32, M without the implicit bit and exponent as E = 1).
  const uint32_t E = a >> 23;
  const uint32_t M = (a & 0x7FFFFFu) | (E ? 0x800000u : 0u);
  const uint32_t shift = 141u - (E ? E : 1u);  // |x| / 2^-9 = M / 2^shift; shift >= 21 here
  if (shift >= 32) return sign;                // M < 2^24 <= half of 2^shift: rounds to zero
  uint32_t q = M >> shift;
  const uint32_t rem = M & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return uint8_t(sign | q);
}

// ---- blocks with one FP32 scale (the KV cache's FP8 form) ----
// A block's scale maps its largest magnitude to the largest code: scale = amax / 448, code = e4m3(x / scale),
// value = e4m3_value(code) * scale. amax 0 gives scale 0 and every code is the value itself (+-0, or NaN for NaN);
// NaN elements do not count in amax (comparisons with NaN are false) and stay NaN; an infinite element makes the
// scale infinite and every finite element of the block NaN after decoding (0 * Inf), so the logits check reports it.
// Error of one element x (scale s = amax/448 a normal FP32 number, one rounding each for s, x/s and code * s):
//   |decoded - x| <= 2^-4 * |x| + 2^-10 * s          (E4M3 keeps 3 mantissa bits; below 2^-6 * s the step is 2^-9 * s)
// times (1 + 2^-20) for the three FP32 roundings.

// amax of n values: the largest |x|, NaN ignored.
LLM_HD float fp8_block_amax(const float* x, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float a = bits_to_f32(f32_to_bits(x[i]) & 0x7fffffffu);
    if (a > m) m = a;
  }
  return m;
}

LLM_HD float fp8_block_scale(float amax) { return amax / kFp8E4M3Max; }

LLM_HD uint8_t fp8_quantize(float x, float scale) { return f32_to_fp8_e4m3(scale != 0.0f ? x / scale : x); }

LLM_HD float fp8_dequantize(uint8_t code, float scale) { return fp8_e4m3_to_f32(code) * scale; }

}  // namespace llm
