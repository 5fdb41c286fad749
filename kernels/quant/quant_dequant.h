// The prepacked planes of a quantized matrix back to BF16, for prefill (issue 35: a quantized model keeps no BF16 copy;
// prefill's GEMMs read one matrix at a time dequantized into a reused scratch just before they run).
//
// quant_plane_weights8 is the arithmetic, host and device alike (LLM_HD), so tests/cpu checks it bit for bit against
// models/quant.h's packed_weight (= ggml's dequantize_row_*) with no GPU: w = float(code + code_offset) * s, plus m when
// has_min, each operation rounded once (no FMA), then rounded to BF16 as the host upload's read_rows_bf16 does.
#pragma once
#include <cstdint>

#include "core/dtype.h"  // LLM_HD, f16_to_f32, f32_to_bf16, mul_rn, add_rn
#include "kernels/quant/gemv_quant_plan.h"

namespace llm {

// s and m of group g of row r (m = 0 without a min), rounded once each as group_scale/group_min.
struct QuantPlaneScale {
  float s = 0.0f, m = 0.0f;
};
LLM_HD QuantPlaneScale quant_plane_scale(const QuantGemvWeight& w, int64_t r, int64_t g) {
  QuantPlaneScale sc;
  if (!w.two_level) {
    sc.s = f16_to_f32(w.scales[r * w.ld_groups + g]);
    if (w.has_min) sc.m = f16_to_f32(w.mins[r * w.ld_groups + g]);
  } else if (w.has_min) {  // Q4_K, Q5_K: the group's head
    const KHeadGroup h = k_head_group(w.k_heads + r * w.ld_heads + 16 * (g / 8), int(g % 8));
    sc.s = mul_rn(f16_to_f32(h.d), float(h.sc));
    sc.m = -mul_rn(f16_to_f32(h.dmin), float(h.m));
  } else {
    const int64_t sup = r * w.ld_super + g / w.groups_per_super;
    sc.s = mul_rn(f16_to_f32(w.super_d[sup]), float(w.sub_scales[r * w.ld_sub + g]));
  }
  return sc;
}

// One weight from its code: float(code + code_offset) * s (+ m), each operation rounded once.
LLM_HD float quant_plane_value(const QuantGemvWeight& w, int code, QuantPlaneScale sc) {
  const float v = mul_rn(float(code + w.code_offset), sc.s);
  return w.has_min ? add_rn(v, sc.m) : v;
}

// Weights per 16-byte chunk of codes: 32 (Int4) or 16 (Int8).
LLM_HD int quant_chunk_weights(const QuantGemvWeight& w) { return w.family == QuantCodeFamily::Int4 ? 32 : 16; }

// The weights of 16-byte chunk c of row r (bytes 16c .. 16c+15 of its codes, given as four little-endian words):
// out[0 .. 32) (kInt4, w's family Int4) or out[0 .. 16). A chunk never straddles a group (groups of 16 or 32 weights
// start on a chunk). Int4: byte i holds weight 32c+i (low nibble) and weight 32c+16+i (high nibble). Int8: byte i is
// weight 16c+i (Q5_K, Q6_K: the words quant_plane_chunk_words widens).
template <bool kInt4>
LLM_HD void quant_plane_chunk(const QuantGemvWeight& w, int64_t r, int64_t c, const uint32_t words[4], float* out) {
  constexpr int kPer = kInt4 ? 32 : 16;
  const QuantPlaneScale sc = quant_plane_scale(w, r, c * kPer / w.group);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int e = 0; e < kPer; ++e) {
    const int i = kInt4 ? e % 16 : e;
    const uint32_t byte = (words[i / 4] >> (8 * (i % 4))) & 0xFFu;
    const int code = kInt4 ? (e < 16 ? int(byte & 0xFu) : int(byte >> 4)) : int(int8_t(uint8_t(byte)));
    out[e] = quant_plane_value(w, code, sc);
  }
}

// The four code words of chunk c of row r as the dots take them (quant_plane_chunk's words): the 16 bytes as stored,
// or for Q5_K/Q6_K their nibbles and high bits widened to int8 codes (core/quant_planes.h quant_split_word). Plain
// reads of the caller's planes (read-only loads on the device).
LLM_HD void quant_plane_chunk_words(const QuantGemvWeight& w, int64_t r, int64_t c, uint32_t words[4]) {
  const int hb = quant_split_hi_bits(w.family == QuantCodeFamily::Int4, w.two_level, w.has_min);
  const uint8_t* lo = w.codes + r * w.ld_codes;
  if (hb == 0) {
#if defined(__CUDA_ARCH__)
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(lo) + c);
    words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
#else
    memcpy(words, lo + 16 * c, 16);
#endif
    return;
  }
  const uint8_t* hp = w.code_hi + r * w.ld_hi + 2 * hb * c;
  uint32_t l[2], hi = 0;
#if defined(__CUDA_ARCH__)
  const uint2 v = __ldg(reinterpret_cast<const uint2*>(lo + 8 * c));
  l[0] = v.x, l[1] = v.y;
  hi = hb == 2 ? __ldg(reinterpret_cast<const unsigned*>(hp)) : __ldg(reinterpret_cast<const unsigned short*>(hp));
#else
  memcpy(l, lo + 8 * c, 8);
  memcpy(&hi, hp, size_t(2 * hb));
#endif
  for (int q = 0; q < 4; ++q)
    words[q] = hb == 2 ? quant_split_word<2>(l[0], l[1], hi, q) : quant_split_word<1>(l[0], l[1], hi, q);
}

// Weights j0 .. j0 + 7 of row r (j0 % 8 == 0), from the prepacked planes (pointers readable by the caller: host
// arrays on the host, device arrays on the device): byte reads, the same arithmetic as quant_plane_chunk.
LLM_HD void quant_plane_weights8(const QuantGemvWeight& w, int64_t r, int64_t j0, float out[8]) {
  const uint8_t* row = w.codes + r * w.ld_codes;
  const QuantPlaneScale sc = quant_plane_scale(w, r, j0 / w.group);  // 8 weights never straddle a group
  for (int e = 0; e < 8; ++e) {
    const int64_t j = j0 + e;
    int code;
    if (w.family == QuantCodeFamily::Int4) {
      const int64_t i = j % 32;
      const uint8_t byte = row[16 * (j / 32) + (i % 16)];
      code = i < 16 ? (byte & 0xF) : (byte >> 4);
    } else if (quant_split_hi_bits(false, w.two_level, w.has_min) > 0) {  // Q5_K, Q6_K: from the widened chunk
      uint32_t words[4];
      quant_plane_chunk_words(w, r, j / 16, words);
      code = int(int8_t(uint8_t(words[(j % 16) / 4] >> (8 * (j % 4)))));
    } else {
      code = int(int8_t(row[j]));
    }
    out[e] = quant_plane_value(w, code, sc);
  }
}

// The device launcher over a whole matrix: quant_dequantize_bf16 in kernels/quant/gemv_quant.h.

}  // namespace llm
