// GGML block dequantizers (layouts in dequant.h), computed in FP32 as llama.cpp's reference does.
#include "models/dequant.h"

#include "core/dtype.h"

// Products and sums are rounded separately, as in ggml's reference and numpy: never fused into an FMA.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace llm {

float read_f16_le(const uint8_t* p) { return f16_to_f32(read_u16_le(p)); }


void dequant_q8_0(const uint8_t* src, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQ8_0Bytes, out += kQuantBlock) {
    const float d = read_f16_le(src);
    for (int j = 0; j < kQuantBlock; ++j) out[j] = d * float(int8_t(src[2 + j]));
  }
}

void dequant_q4_0(const uint8_t* src, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQ4_0Bytes, out += kQuantBlock) {
    const float d = read_f16_le(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      out[j] = float(int(qs[j] & 0x0f) - 8) * d;
      out[j + kQuantBlock / 2] = float(int(qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const uint8_t* src, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQ4_1Bytes, out += kQuantBlock) {
    const float d = read_f16_le(src), m = read_f16_le(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      out[j] = float(qs[j] & 0x0f) * d + m;
      out[j + kQuantBlock / 2] = float(qs[j] >> 4) * d + m;
    }
  }
}

void dequant_q5_0(const uint8_t* src, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQ5_0Bytes, out += kQuantBlock) {
    const float d = read_f16_le(src);
    const uint32_t qh = uint32_t(src[2]) | uint32_t(src[3]) << 8 | uint32_t(src[4]) << 16 | uint32_t(src[5]) << 24;
    const uint8_t* qs = src + 6;
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      const int x0 = int((qs[j] & 0x0f) | (((qh >> j) & 1u) << 4)) - 16;
      const int x1 = int((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
      out[j] = float(x0) * d;
      out[j + kQuantBlock / 2] = float(x1) * d;
    }
  }
}

void dequant_q5_1(const uint8_t* src, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQ5_1Bytes, out += kQuantBlock) {
    const float d = read_f16_le(src), m = read_f16_le(src + 2);
    const uint32_t qh = uint32_t(src[4]) | uint32_t(src[5]) << 8 | uint32_t(src[6]) << 16 | uint32_t(src[7]) << 24;
    const uint8_t* qs = src + 8;
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      const int x0 = int((qs[j] & 0x0f) | (((qh >> j) & 1u) << 4));
      const int x1 = int((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
      out[j] = float(x0) * d + m;
      out[j + kQuantBlock / 2] = float(x1) * d + m;
    }
  }
}

void dequant_q4_k(const uint8_t* src, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQ4_KBytes) {
    const float d = read_f16_le(src), dmin = read_f16_le(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* q = src + 16;
    for (int c = 0; c < 4; ++c, q += 32) {  // 64 weights: low nibbles (sub-block 2c), then high nibbles (2c + 1)
      uint8_t sc, m;
      get_scale_min_k4(2 * c, scales, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      get_scale_min_k4(2 * c + 1, scales, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *out++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *out++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

// ggml's dequantize_row_q5_K: sub-blocks in pairs, the low nibbles of qs[32c ..] (with fifth bit 2c of qh) then the
// high nibbles (bit 2c + 1).
void dequant_q5_k(const uint8_t* src, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQ5_KBytes) {
    const float d = read_f16_le(src), dmin = read_f16_le(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* q = src + 48;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      get_scale_min_k4(2 * c, scales, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      get_scale_min_k4(2 * c + 1, scales, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      const uint8_t u1 = uint8_t(1u << (2 * c)), u2 = uint8_t(2u << (2 * c));
      for (int l = 0; l < 32; ++l) *out++ = d1 * float((q[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *out++ = d2 * float((q[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
  }
}

void dequant_q6_k(const uint8_t* src, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQ6_KBytes, out += kQuantSuperBlock) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
    const float d = read_f16_le(src + 208);
    float* y = out;
    for (int n = 0; n < kQuantSuperBlock; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * float(sc[is + 0]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
    }
  }
}

}  // namespace llm
