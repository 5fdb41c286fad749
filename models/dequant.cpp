// GGML block dequantizers (layouts in dequant.h), computed in FP32 as llama.cpp's reference does.
#include "models/dequant.h"

#include "core/dtype.h"

namespace llm {

namespace {

float read_f16(const uint8_t* p) { return f16_to_f32(uint16_t(p[0] | (p[1] << 8))); }

}  // namespace

void dequant_q8_0(const uint8_t* src, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQ8_0Bytes, out += kQuantBlock) {
    const float d = read_f16(src);
    for (int j = 0; j < kQuantBlock; ++j) out[j] = d * float(int8_t(src[2 + j]));
  }
}

void dequant_q4_0(const uint8_t* src, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQ4_0Bytes, out += kQuantBlock) {
    const float d = read_f16(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      out[j] = float(int(qs[j] & 0x0f) - 8) * d;
      out[j + kQuantBlock / 2] = float(int(qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const uint8_t* src, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQ4_1Bytes, out += kQuantBlock) {
    const float d = read_f16(src), m = read_f16(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      out[j] = float(qs[j] & 0x0f) * d + m;
      out[j + kQuantBlock / 2] = float(qs[j] >> 4) * d + m;
    }
  }
}

}  // namespace llm
