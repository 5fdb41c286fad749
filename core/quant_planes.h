// The prepacked planes of a quantized [n, k] matrix as pointers and row pitches: the ONE description of that layout,
// held by the kernels' matrix (kernels/quant/gemv_quant_plan.h QuantGemvWeight) and kernel arguments
// (kernels/quant/gemv_quant_device.cuh QuantPackedArgs), and given as a view of the host arrays by models/quant.h's
// PackedQuant::planes(). Plain data, no CUDA, no ownership: who fills the pointers owns what they point at (host
// vectors, or one device allocation). What the codes and scales mean per GGML type: models/quant.h.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/dtype.h"  // LLM_HD

namespace llm {

// How the kernels see the codes: 4 bits (Q4_0, Q4_1, Q4_K) or 8 bits (Q8_0, Q5_0, Q5_1, Q5_K, Q6_K) per weight. Q5_K
// and Q6_K are Int8 to the kernels but stored at their own widths (a nibble plane and a high-bit plane, below).
enum class QuantCodeFamily : uint8_t { Int4, Int8 };

// High bits per weight of the split code planes: 1 (Q5_K), 2 (Q6_K), 0 for the types whose codes are whole bytes or
// nibbles. The split types are exactly the two-level Int8 ones (Q5_K with a min, Q6_K without).
LLM_HD constexpr int quant_split_hi_bits(bool int4, bool two_level, bool has_min) {
  return !int4 && two_level ? (has_min ? 1 : 2) : 0;
}

// Field order is the kernels' argument layout (QuantPackedArgs begins with it): keep it. No default member
// initializers, as kernel arguments never had them (device code that builds one field by field stays as it compiled);
// holders that need zeros value-initialize (QuantGemvWeight does).
struct QuantPlanes {
  // Codes: uint8 [n, ld_codes], rows 16-byte aligned, padding zero. Int4: group g of a row is bytes 16g .. 16g+15,
  // byte i = weight 32g+i (low nibble, 0..15) | weight 32g+16+i (high nibble) << 4. Int8: int8 code of weight j at
  // byte j (Q8_0 q; Q5_0 q-16; Q5_1 q (0..31)).
  // Split (Q5_K, Q6_K; quant_split_hi_bits): the int8 code the kernels use is v = q, Q5_K 0..31, Q6_K 0..63 (its
  // code_offset -32 applied as for Q4_0's -8). Per 16-weight chunk c (weights 16c + i, i = 0..15):
  //   codes, bytes 8c .. 8c+7: byte b (0..3) = nib(v_b) | nib(v_{b+4}) << 4, byte 4+b = nib(v_{8+b}) | nib(v_{12+b}) << 4
  //   code_hi, Q6_K, bytes 4c .. 4c+3: byte b = hi(v_b) | hi(v_{b+4}) << 2 | hi(v_{b+8}) << 4 | hi(v_{b+12}) << 6
  //   code_hi, Q5_K, bytes 2c .. 2c+1: bit i (little-endian) = hi(v_i)
  // with nib the low 4 bits and hi the bits above them, so word q (weights 4q .. 4q+3) of the int8 codes is one shift
  // and mask of each plane (quant_split_word): 6.56 (Q6_K) and 5.5 (Q5_K) bits per weight in all, as stored.
  const uint8_t* codes;        // [n, ld_codes]
  // One-level (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1): GGUF's fp16 d and m, bit for bit.
  const uint16_t* scales;      // fp16 bits [n, ld_groups]: s of group g of row r at [r * ld_groups + g]
  const uint16_t* mins;        // fp16 bits [n, ld_groups]: m (additive); only when has_min
  // Two-level without a min (Q6_K): s = f16(super_d[g / 16]) * float(sub_scales[g]).
  const int8_t* sub_scales;    // int8 [n, ld_sub]: Q6_K scales (-128..127)
  const uint16_t* super_d;     // fp16 bits [n, ld_super]
  // Two-level with a min (Q4_K, Q5_K): the super-block heads as GGUF stores them, 16 bytes per 256 weights (fp16 d,
  // fp16 dmin, 12 bytes of 6-bit sub-block scales and mins), so one 16-byte load gives a lane everything its group's
  // scale and min need (k_head_scale_min below); s = f16(d) * float(sc_j), m = -(f16(dmin) * float(m_j)), j = g % 8.
  const uint8_t* k_heads;      // [n, ld_heads]: head of super-block b of row r at bytes r * ld_heads + 16 b
  int64_t ld_codes;   // bytes per row of codes, multiple of 16, >= k/2 (Int4, split) or k (Int8)
  int64_t ld_groups;  // halves per row of scales/mins, multiple of 8, >= k / group
  int64_t ld_sub;     // bytes per row of sub_scales, multiple of 16, >= k / group
  int64_t ld_super;   // halves per row of super_d, multiple of 8, >= k / 256
  int64_t ld_heads;   // bytes per row of k_heads, multiple of 16, >= 16 * k / 256
  // Split codes' high bits (Q5_K, Q6_K; null otherwise): uint8 [n, ld_hi], rows 16-byte aligned, padding zero.
  const uint8_t* code_hi;
  int64_t ld_hi;      // bytes per row of code_hi, multiple of 16, >= k / 8 (Q5_K) or k / 4 (Q6_K)

  // The pointers cleared, the pitches kept (a description whose planes were freed).
  void clear_pointers() {
    codes = nullptr;
    scales = mins = super_d = nullptr;
    sub_scales = nullptr;
    k_heads = nullptr;
    code_hi = nullptr;
  }
};

// Word q (0..3) of a split chunk's int8 codes (weights 4q .. 4q+3, byte j = weight 4q+j; layout on QuantPlanes::codes)
// from its nibble words lo0 (bytes 0..3) and lo1 (bytes 4..7) and its high bits hi (Q6_K: the 4 bytes; Q5_K: the 2
// bytes in the low half). Q6_K: the 2 high bits shifted into bits 4-5 (codes 0..63, code_offset -32 applied by the dots
// as code_offset * sum x, not per weight); Q5_K: the 4 high bits spread to bit 4 of each byte by one multiply
// (t * 0x02040810 puts bit j of t at 8j + 4, no carries). The one
// decode of the split planes, for every kernel and the prefill dequantizer; models/quant.cpp's packed_code decodes
// them bit by bit on its own, as their judge.
template <int kHiBits>
LLM_HD uint32_t quant_split_word(uint32_t lo0, uint32_t lo1, uint32_t hi, int q) {
  const uint32_t lo = q < 2 ? lo0 : lo1;
  const uint32_t nib = ((q & 1) ? lo >> 4 : lo) & 0x0F0F0F0Fu;
  if (kHiBits == 2) return nib | (((hi >> (2 * q)) & 0x03030303u) << 4);
  return nib | ((((hi >> (4 * q)) & 0xFu) * 0x02040810u) & 0x10101010u);
}

// Sub-block j's (0..7) 6-bit scale and min from a Q4_K/Q5_K head's scale words h1, h2, h3 (bytes 4..15 of the head,
// little-endian), as ggml's get_scale_min_k4: the one decode of the packed planes' scales, for the packed reference
// (models/quant.cpp group_scale), the prefill dequantizer and every kernel (models/dequant.h keeps ggml's own port as
// the independent reference they are checked against). j < 4: sc = q[j] & 63, m = q[j+4] & 63; else sc = (q[j+4] & 15) |
// (q[j-4] >> 6) << 4, m = (q[j+4] >> 4) | (q[j] >> 6) << 4, with q the 12 bytes.
LLM_HD void k_head_scale_min(uint32_t h1, uint32_t h2, uint32_t h3, int j, uint32_t* sc, uint32_t* m) {
  const int sh = 8 * (j & 3);
  const uint32_t b0 = (h1 >> sh) & 0xffu, b1 = (h2 >> sh) & 0xffu, b2 = (h3 >> sh) & 0xffu;
  if (j < 4) {
    *sc = b0 & 63u;
    *m = b1 & 63u;
  } else {
    *sc = (b2 & 15u) | ((b0 >> 6) << 4);
    *m = (b2 >> 4) | ((b1 >> 6) << 4);
  }
}

// Group j (0..7) of the head at `head` (16 bytes, any alignment): fp16 bits of d and dmin, the 6-bit sc and m.
struct KHeadGroup {
  uint16_t d, dmin;
  uint32_t sc, m;
};
LLM_HD KHeadGroup k_head_group(const uint8_t* head, int j) {
  uint32_t w[4];
  memcpy(w, head, 16);
  KHeadGroup g{uint16_t(w[0] & 0xffffu), uint16_t(w[0] >> 16), 0u, 0u};
  k_head_scale_min(w[1], w[2], w[3], j, &g.sc, &g.m);
  return g;
}

}  // namespace llm
