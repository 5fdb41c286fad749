// The prepacked planes of a quantized [n, k] matrix as pointers and row pitches: the ONE description of that layout,
// held by the kernels' matrix (kernels/quant/gemv_quant_plan.h QuantGemvWeight) and kernel arguments
// (kernels/quant/gemv_quant_device.cuh QuantPackedArgs), and given as a view of the host arrays by models/quant.h's
// PackedQuant::planes(). Plain data, no CUDA, no ownership: who fills the pointers owns what they point at (host
// vectors, or one device allocation). What the codes and scales mean per GGML type: models/quant.h.
#pragma once
#include <cstdint>

namespace llm {

// How the codes are stored: 4 bits (Q4_0, Q4_1, Q4_K) or 8 bits (Q8_0, Q5_0, Q5_1, Q6_K) per weight.
enum class QuantCodeFamily : uint8_t { Int4, Int8 };

// Field order is the kernels' argument layout (QuantPackedArgs begins with it): keep it. No default member
// initializers, as kernel arguments never had them (device code that builds one field by field stays as it compiled);
// holders that need zeros value-initialize (QuantGemvWeight does).
struct QuantPlanes {
  // Codes: uint8 [n, ld_codes], rows 16-byte aligned, padding zero. Int4: group g of a row is bytes 16g .. 16g+15,
  // byte i = weight 32g+i (low nibble, 0..15) | weight 32g+16+i (high nibble) << 4. Int8: int8 code of weight j at
  // byte j (Q8_0 q; Q5_0 q-16; Q5_1 q (0..31); Q6_K q-32).
  const uint8_t* codes;        // [n, ld_codes]
  // One-level (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1): GGUF's fp16 d and m, bit for bit.
  const uint16_t* scales;      // fp16 bits [n, ld_groups]: s of group g of row r at [r * ld_groups + g]
  const uint16_t* mins;        // fp16 bits [n, ld_groups]: m (additive); only when has_min
  // Two-level (Q4_K, Q6_K): s = f16(super_d[g / groups_per_super]) * float(sub_scales[g]);
  //                         m = -(f16(super_dmin[g / groups_per_super]) * float(sub_mins[g])).
  const int8_t* sub_scales;    // int8 [n, ld_sub]: Q4_K sc (0..63), Q6_K scales (-128..127)
  const uint8_t* sub_mins;     // uint8 [n, ld_sub]: Q4_K m (0..63); null for Q6_K
  const uint16_t* super_d;     // fp16 bits [n, ld_super]
  const uint16_t* super_dmin;  // fp16 bits [n, ld_super]: Q4_K only
  int64_t ld_codes;   // bytes per row of codes, multiple of 16, >= k/2 (Int4) or k (Int8)
  int64_t ld_groups;  // halves per row of scales/mins, multiple of 8, >= k / group
  int64_t ld_sub;     // bytes per row of sub_scales/sub_mins, multiple of 16, >= k / group
  int64_t ld_super;   // halves per row of super_d/super_dmin, multiple of 8, >= k / 256

  // The pointers cleared, the pitches kept (a description whose planes were freed).
  void clear_pointers() {
    codes = nullptr;
    scales = mins = super_d = super_dmin = nullptr;
    sub_scales = nullptr;
    sub_mins = nullptr;
  }
};

}  // namespace llm
