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

// Weights j0 .. j0 + 7 of row r (j0 % 8 == 0) as FP32, from the prepacked planes (pointers readable by the caller:
// host arrays on the host, device arrays on the device).
LLM_HD void quant_plane_weights8(const QuantGemvWeight& w, int64_t r, int64_t j0, float out[8]) {
  const uint8_t* row = w.codes + r * w.ld_codes;
  const int64_t g = j0 / w.group;  // 8 consecutive weights never straddle a group (16 or 32 weights)
  float s, m = 0.0f;
  if (!w.two_level) {
    s = f16_to_f32(w.scales[r * w.ld_groups + g]);
    if (w.has_min) m = f16_to_f32(w.mins[r * w.ld_groups + g]);
  } else {
    const int64_t sup = r * w.ld_super + g / w.groups_per_super;
    s = mul_rn(f16_to_f32(w.super_d[sup]), float(w.sub_scales[r * w.ld_sub + g]));
    if (w.has_min) m = -mul_rn(f16_to_f32(w.super_dmin[sup]), float(w.sub_mins[r * w.ld_sub + g]));
  }
  for (int e = 0; e < 8; ++e) {
    const int64_t j = j0 + e;
    int code;
    if (w.family == QuantCodeFamily::Int4) {
      const int64_t i = j % 32;
      const uint8_t byte = row[16 * (j / 32) + (i % 16)];
      code = i < 16 ? (byte & 0xF) : (byte >> 4);
    } else {
      code = int(int8_t(row[j]));
    }
    const float v = mul_rn(float(code + w.code_offset), s);
    out[e] = w.has_min ? add_rn(v, m) : v;
  }
}

// The device launcher over a whole matrix: quant_dequantize_bf16 in kernels/quant/gemv_quant.h.

}  // namespace llm
