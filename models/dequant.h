// Block dequantizers of the GGML quantized formats (32 weights a block) to FP32: pure functions over raw bytes.
#pragma once
#include <cstddef>
#include <cstdint>

namespace llm {

constexpr int kQuantBlock = 32;     // weights per block, for every format here
constexpr size_t kQ8_0Bytes = 34;  // fp16 d, int8 q[32]:           x[j] = d * q[j]
constexpr size_t kQ4_0Bytes = 18;  // fp16 d, uint8 qs[16]:         x[j] = (lo(qs[j]) - 8) * d, x[j+16] = (hi - 8) * d
constexpr size_t kQ4_1Bytes = 20;  // fp16 d, fp16 m, uint8 qs[16]: x[j] = lo(qs[j]) * d + m, x[j+16] = hi * d + m

// Each decodes `n_blocks` consecutive blocks from `src` into n_blocks * 32 floats at `out`.
void dequant_q8_0(const uint8_t* src, int64_t n_blocks, float* out);
void dequant_q4_0(const uint8_t* src, int64_t n_blocks, float* out);
void dequant_q4_1(const uint8_t* src, int64_t n_blocks, float* out);

}  // namespace llm
