// Block dequantizers of the GGML quantized formats to FP32: pure functions over raw bytes, computed in FP32 exactly as
// ggml's reference dequantize_row_* (ggml-quants.c) and the gguf Python package's gguf.quants.dequantize do, so the
// results are equal bit for bit (tests/cpu/quant_test.cpp). Layouts from ggml's ggml-common.h, little-endian.
#pragma once
#include <cstddef>
#include <cstdint>

namespace llm {

// The little-endian 16-bit words of a GGML block: raw bits, and fp16 read as FP32 (exact).
inline uint16_t read_u16_le(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
float read_f16_le(const uint8_t* p);

constexpr int kQuantBlock = 32;     // weights per block of the legacy formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)
constexpr int kQuantSuperBlock = 256;  // QK_K: weights per super-block of the K-quants (Q4_K, Q6_K)
constexpr size_t kQ8_0Bytes = 34;  // fp16 d, int8 q[32]:           x[j] = d * q[j]
constexpr size_t kQ4_0Bytes = 18;  // fp16 d, uint8 qs[16]:         x[j] = (lo(qs[j]) - 8) * d, x[j+16] = (hi - 8) * d
constexpr size_t kQ4_1Bytes = 20;  // fp16 d, fp16 m, uint8 qs[16]: x[j] = lo(qs[j]) * d + m, x[j+16] = hi * d + m

// qh: 32 fifth bits, bit j (little-endian uint32) belongs to weight j; the low nibbles as in Q4_0 (qs[j] holds weights
// j and j+16).
constexpr size_t kQ5_0Bytes = 22;  // fp16 d, uint8 qh[4], uint8 qs[16]:        x[j] = (q[j] - 16) * d, q = nibble | bit << 4
constexpr size_t kQ5_1Bytes = 24;  // fp16 d, fp16 m, uint8 qh[4], qs[16]:     x[j] = q[j] * d + m
// Q4_K (256 weights = 8 sub-blocks of 32): fp16 d, fp16 dmin, uint8 scales[12] (8 6-bit scales sc and 8 6-bit mins m,
// packed as ggml's get_scale_min_k4), uint8 qs[128]. Sub-block 2c takes the low nibbles of qs[32c .. 32c+31], sub-block
// 2c+1 their high nibbles: x = (d * sc[s]) * q - (dmin * m[s]).
constexpr size_t kQ4_KBytes = 144;
// Q5_K (256 weights = 8 sub-blocks of 32): fp16 d, fp16 dmin, uint8 scales[12] (as Q4_K), uint8 qh[32] (fifth bits),
// uint8 qs[128] (low nibbles as Q4_K's): weight l of sub-block s has code (nibble of qs[32 (s / 2) + l]) | bit s of
// qh[l] << 4, x = (d * sc[s]) * q - (dmin * m[s]).
constexpr size_t kQ5_KBytes = 176;
// Q6_K (256 weights = 16 sub-blocks of 16): uint8 ql[128] (low 4 bits), uint8 qh[64] (high 2 bits), int8 scales[16],
// fp16 d (last): x = (d * scales[s]) * (q - 32), q 6-bit. Element order as ggml's dequantize_row_q6_K (see dequant.cpp).
constexpr size_t kQ6_KBytes = 210;

// get_scale_min_k4: 6-bit scale `sc` and min `m` of sub-block j (0..7) of a Q4_K/Q5_K block's 12 scale bytes.
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

// Each decodes `n_blocks` consecutive blocks from `src` into n_blocks * 32 floats at `out`.
void dequant_q8_0(const uint8_t* src, int64_t n_blocks, float* out);
void dequant_q4_0(const uint8_t* src, int64_t n_blocks, float* out);
void dequant_q4_1(const uint8_t* src, int64_t n_blocks, float* out);
void dequant_q5_0(const uint8_t* src, int64_t n_blocks, float* out);
void dequant_q5_1(const uint8_t* src, int64_t n_blocks, float* out);
// These three decode `n_blocks` 256-weight super-blocks into n_blocks * 256 floats.
void dequant_q4_k(const uint8_t* src, int64_t n_blocks, float* out);
void dequant_q5_k(const uint8_t* src, int64_t n_blocks, float* out);
void dequant_q6_k(const uint8_t* src, int64_t n_blocks, float* out);

}  // namespace llm
