// GGML quantized formats: dispatch, reference quantizers (ports of ggml-quants.c), the prepacked layout and the CPU
// reference GEMV over it. The layout is documented in quant.h.
#include "models/quant.h"

#include <algorithm>
#include <limits>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "models/dequant.h"

// Products and sums are rounded separately, as in ggml's reference and numpy: never fused into an FMA.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace llm {

namespace {

void write_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v & 0xff);
  p[1] = uint8_t(v >> 8);
}
int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// ggml's nearest_int: round to nearest (ties to even) through the 1.5 * 2^23 trick; |fval| <= 4194303.
int nearest_int(float fval) {
  const float val = fval + 12582912.f;
  int i;
  std::memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

// ggml's make_qkx2_quants, line for line (FP32 throughout).
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = uint8_t(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    const float w = weights[i];
    best_error += w * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = uint8_t(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        const float w = weights[i];
        cur_error += w * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: a group this small is all zero

// ggml's make_qx_quants with qw = NULL, line for line (FP32 throughout): symmetric codes l in [-nmax, nmax - 1]
// stored as l + nmax, the scale chosen among 19 candidates by weighted least squares (rmse_type 1: w = x^2); rmse_type
// 0: no search, -max / nmax (QuantSearch::kQuick).
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, int rmse_type) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  auto weight = [&](float v) {
    return rmse_type == 1 ? v * v : rmse_type == 2 ? 1.f : rmse_type == 3 ? std::fabs(v) : std::sqrt(std::fabs(v));
  };
  float iscale = -nmax / max;
  if (rmse_type == 0) {  // ggml's no-search branch: the scale from the largest magnitude alone
    for (int i = 0; i < n; ++i) {
      const int l = nearest_int(iscale * x[i]);
      L[i] = int8_t(nmax + std::max(-nmax, std::min(nmax - 1, l)));
    }
    return 1 / iscale;
  }
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = int8_t(l + nmax);
    const float w = weight(x[i]);
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = weight(x[i]);
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = int8_t(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

}  // namespace

const char* ggml_quant_name(GgmlQuantType t) {
  switch (t) {
    case GgmlQuantType::Q4_0: return "Q4_0";
    case GgmlQuantType::Q4_1: return "Q4_1";
    case GgmlQuantType::Q5_0: return "Q5_0";
    case GgmlQuantType::Q5_1: return "Q5_1";
    case GgmlQuantType::Q8_0: return "Q8_0";
    case GgmlQuantType::Q4_K: return "Q4_K";
    case GgmlQuantType::Q5_K: return "Q5_K";
    case GgmlQuantType::Q6_K: return "Q6_K";
  }
  return "?";
}

bool is_ggml_quant_type(uint32_t id) {
  switch (GgmlQuantType(id)) {
    case GgmlQuantType::Q4_0: case GgmlQuantType::Q4_1: case GgmlQuantType::Q5_0: case GgmlQuantType::Q5_1:
    case GgmlQuantType::Q8_0: case GgmlQuantType::Q4_K: case GgmlQuantType::Q5_K: case GgmlQuantType::Q6_K:
      return true;
  }
  return false;
}

int ggml_quant_block_weights(GgmlQuantType t) {
  return t == GgmlQuantType::Q4_K || t == GgmlQuantType::Q5_K || t == GgmlQuantType::Q6_K ? kQuantSuperBlock
                                                                                          : kQuantBlock;
}

size_t ggml_quant_block_bytes(GgmlQuantType t) {
  switch (t) {
    case GgmlQuantType::Q4_0: return kQ4_0Bytes;
    case GgmlQuantType::Q4_1: return kQ4_1Bytes;
    case GgmlQuantType::Q5_0: return kQ5_0Bytes;
    case GgmlQuantType::Q5_1: return kQ5_1Bytes;
    case GgmlQuantType::Q8_0: return kQ8_0Bytes;
    case GgmlQuantType::Q4_K: return kQ4_KBytes;
    case GgmlQuantType::Q5_K: return kQ5_KBytes;
    case GgmlQuantType::Q6_K: return kQ6_KBytes;
  }
  fail("unknown GGML quantized type id ", uint32_t(t));
}

void check_quant_row_length(GgmlQuantType t, int64_t k, const std::string& what) {
  if (!is_ggml_quant_type(uint32_t(t))) fail(what, ": GGML type id ", uint32_t(t), " is not a supported quantized type");
  const int block = ggml_quant_block_weights(t);
  if (k <= 0 || k % block != 0)
    fail(what, ": ", ggml_quant_name(t), " needs a row length that is a positive multiple of ", block, ", found ", k);
}

size_t ggml_quant_row_bytes(GgmlQuantType t, int64_t k) {
  check_quant_row_length(t, k);
  return size_t(k / ggml_quant_block_weights(t)) * ggml_quant_block_bytes(t);
}

void dequantize_blocks(GgmlQuantType t, const uint8_t* blocks, int64_t n_blocks, float* out) {
  switch (t) {
    case GgmlQuantType::Q4_0: return dequant_q4_0(blocks, n_blocks, out);
    case GgmlQuantType::Q4_1: return dequant_q4_1(blocks, n_blocks, out);
    case GgmlQuantType::Q5_0: return dequant_q5_0(blocks, n_blocks, out);
    case GgmlQuantType::Q5_1: return dequant_q5_1(blocks, n_blocks, out);
    case GgmlQuantType::Q8_0: return dequant_q8_0(blocks, n_blocks, out);
    case GgmlQuantType::Q4_K: return dequant_q4_k(blocks, n_blocks, out);
    case GgmlQuantType::Q5_K: return dequant_q5_k(blocks, n_blocks, out);
    case GgmlQuantType::Q6_K: return dequant_q6_k(blocks, n_blocks, out);
  }
  fail("dequantize: unknown GGML quantized type id ", uint32_t(t));
}

// ---------------------------------------------------------------------------------------------------------------------
// Quantizers.

void quantize_q8_0(const float* x, int64_t k, uint8_t* out) {
  check_quant_row_length(GgmlQuantType::Q8_0, k, "quantize_q8_0");
  for (int64_t b = 0; b < k / kQuantBlock; ++b, x += kQuantBlock, out += kQ8_0Bytes) {
    float amax = 0.0f;
    for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    write_u16(out, f32_to_f16(d));
    for (int j = 0; j < kQuantBlock; ++j) out[2 + j] = uint8_t(int8_t(std::roundf(x[j] * id)));
  }
}

// The value of largest magnitude in a block of 32, sign kept (the first one on ties), as ggml's Q4_0/Q5_0 reference
// quantizers pick it: their scale is max / -8 (-16), so that value maps exactly to code 0.
static float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQuantBlock; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void quantize_q4_0(const float* x, int64_t k, uint8_t* out) {
  check_quant_row_length(GgmlQuantType::Q4_0, k, "quantize_q4_0");
  for (int64_t b = 0; b < k / kQuantBlock; ++b, x += kQuantBlock, out += kQ4_0Bytes) {
    const float max = signed_absmax(x);
    const float d = max / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    write_u16(out, f32_to_f16(d));
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[kQuantBlock / 2 + j] * id;
      const uint8_t xi0 = uint8_t(std::min(15, int(int8_t(x0 + 8.5f))));
      const uint8_t xi1 = uint8_t(std::min(15, int(int8_t(x1 + 8.5f))));
      out[2 + j] = uint8_t(xi0 | (xi1 << 4));
    }
  }
}

void quantize_q5_0(const float* x, int64_t k, uint8_t* out) {
  check_quant_row_length(GgmlQuantType::Q5_0, k, "quantize_q5_0");
  for (int64_t b = 0; b < k / kQuantBlock; ++b, x += kQuantBlock, out += kQ5_0Bytes) {
    const float max = signed_absmax(x);
    const float d = max / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    write_u16(out, f32_to_f16(d));
    uint32_t qh = 0;
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[kQuantBlock / 2 + j] * id;
      const uint8_t xi0 = uint8_t(std::min(31, int(int8_t(x0 + 16.5f))));
      const uint8_t xi1 = uint8_t(std::min(31, int(int8_t(x1 + 16.5f))));
      out[6 + j] = uint8_t((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= uint32_t((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= uint32_t((xi1 & 0x10u) >> 4) << (j + kQuantBlock / 2);
    }
    for (int i = 0; i < 4; ++i) out[2 + i] = uint8_t(qh >> (8 * i));  // little-endian, as memcpy on ggml's hosts
  }
}

// min and max of one block of 32, as ggml's quantize_row_q4_1_ref / q5_1_ref find them.
static void block_min_max(const float* x, float* mn, float* mx) {
  float lo = std::numeric_limits<float>::max(), hi = -std::numeric_limits<float>::max();
  for (int j = 0; j < kQuantBlock; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  *mn = lo;
  *mx = hi;
}

void quantize_q4_1(const float* x, int64_t k, uint8_t* out) {
  check_quant_row_length(GgmlQuantType::Q4_1, k, "quantize_q4_1");
  for (int64_t b = 0; b < k / kQuantBlock; ++b, x += kQuantBlock, out += kQ4_1Bytes) {
    float mn, mx;
    block_min_max(x, &mn, &mx);
    const float d = (mx - mn) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    write_u16(out, f32_to_f16(d));
    write_u16(out + 2, f32_to_f16(mn));
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      const float x0 = (x[j] - mn) * id;
      const float x1 = (x[kQuantBlock / 2 + j] - mn) * id;
      const uint8_t xi0 = uint8_t(std::min(15, int(int8_t(x0 + 0.5f))));
      const uint8_t xi1 = uint8_t(std::min(15, int(int8_t(x1 + 0.5f))));
      out[4 + j] = uint8_t(xi0 | (xi1 << 4));
    }
  }
}

void quantize_q5_1(const float* x, int64_t k, uint8_t* out) {
  check_quant_row_length(GgmlQuantType::Q5_1, k, "quantize_q5_1");
  for (int64_t b = 0; b < k / kQuantBlock; ++b, x += kQuantBlock, out += kQ5_1Bytes) {
    float mn, mx;
    block_min_max(x, &mn, &mx);
    const float d = (mx - mn) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    write_u16(out, f32_to_f16(d));
    write_u16(out + 2, f32_to_f16(mn));
    uint32_t qh = 0;
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      const float x0 = (x[j] - mn) * id;
      const float x1 = (x[kQuantBlock / 2 + j] - mn) * id;
      const uint8_t xi0 = uint8_t(x0 + 0.5f);
      const uint8_t xi1 = uint8_t(x1 + 0.5f);
      out[8 + j] = uint8_t((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= uint32_t((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= uint32_t((xi1 & 0x10u) >> 4) << (j + kQuantBlock / 2);
    }
    for (int i = 0; i < 4; ++i) out[4 + i] = uint8_t(qh >> (8 * i));  // little-endian, as memcpy on ggml's hosts
  }
}

namespace {

// The search quantize_row_q4_K_ref and quantize_row_q5_K_ref share, for one 256-weight super-block x: per 32-weight
// sub-block make_qkx2_quants over nmax + 1 levels (rmin, nstep: Q4_K -1, 20; Q5_K -0.5, 15), the 6-bit scales and mins
// against fp16 d and dmin written to out[0..15] (d, dmin, scales[12]), then every weight's level (0..nmax) in L.
void k_quant_search(const float* x, int nmax, float rmin, int nstep, uint8_t* out, uint8_t* L, QuantSearch search) {
  if (search == QuantSearch::kQuick) nstep = 0;  // make_qkx2_quants's own no-search return: (max - min) / nmax
  uint8_t Laux[32];
  float weights[32];
  float mins[kQuantSuperBlock / 32];
  float scales[kQuantSuperBlock / 32];
  uint8_t* ysc = out + 4;
  float max_scale = 0;  // as we are deducting the min, scales are always positive
  float max_min = 0;
  for (int j = 0; j < kQuantSuperBlock / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(ysc, 0, 12);
  for (int j = 0; j < kQuantSuperBlock / 32; ++j) {
    uint8_t ls = uint8_t(nearest_int(inv_scale * scales[j]));
    uint8_t lm = uint8_t(nearest_int(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    if (j < 4) {
      ysc[j] = ls;
      ysc[j + 4] = lm;
    } else {
      ysc[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
      ysc[j - 4] |= uint8_t((ls >> 4) << 6);
      ysc[j - 0] |= uint8_t((lm >> 4) << 6);
    }
  }
  write_u16(out, f32_to_f16(max_scale / 63.f));
  write_u16(out + 2, f32_to_f16(max_min / 63.f));
  for (int j = 0; j < kQuantSuperBlock / 32; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, ysc, &sc, &m);
    const float d = read_f16_le(out) * sc;
    if (!d) continue;
    const float dm = read_f16_le(out + 2) * m;
    for (int ii = 0; ii < 32; ++ii) {
      int l = nearest_int((x[32 * j + ii] + dm) / d);
      l = std::max(0, std::min(nmax, l));
      L[32 * j + ii] = uint8_t(l);
    }
  }
}

}  // namespace

void quantize_q4_k(const float* x, int64_t k, uint8_t* out, QuantSearch search) {
  check_quant_row_length(GgmlQuantType::Q4_K, k, "quantize_q4_k");
  uint8_t L[kQuantSuperBlock];
  for (int64_t i = 0; i < k / kQuantSuperBlock; ++i, x += kQuantSuperBlock, out += kQ4_KBytes) {
    k_quant_search(x, 15, -1.f, 20, out, L, search);
    uint8_t* q = out + 16;
    for (int j = 0; j < kQuantSuperBlock; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
  }
}

// quantize_row_q5_K_ref: the search over 32 levels, then the low nibbles as Q4_K's and each level's fifth bit in qh
// (bit 2c for sub-block 2c, bit 2c + 1 for 2c + 1).
void quantize_q5_k(const float* x, int64_t k, uint8_t* out, QuantSearch search) {
  check_quant_row_length(GgmlQuantType::Q5_K, k, "quantize_q5_k");
  uint8_t L[kQuantSuperBlock];
  for (int64_t i = 0; i < k / kQuantSuperBlock; ++i, x += kQuantSuperBlock, out += kQ5_KBytes) {
    k_quant_search(x, 31, -0.5f, 15, out, L, search);
    uint8_t* qh = out + 16;
    uint8_t* ql = out + 48;
    std::memset(qh, 0, 32);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kQuantSuperBlock; n += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[n + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = uint8_t(l1 | (l2 << 4));
      }
      m1 = uint8_t(m1 << 2);
      m2 = uint8_t(m2 << 2);
    }
  }
}

void quantize_q6_k(const float* x, int64_t k, uint8_t* out, QuantSearch search) {
  check_quant_row_length(GgmlQuantType::Q6_K, k, "quantize_q6_k");
  int8_t L[kQuantSuperBlock];
  float scales[kQuantSuperBlock / 16];
  for (int64_t i = 0; i < k / kQuantSuperBlock; ++i, x += kQuantSuperBlock, out += kQ6_KBytes) {
    uint8_t* ql = out;
    uint8_t* qh = out + 128;
    int8_t* sc = reinterpret_cast<int8_t*>(out + 192);
    float max_scale = 0;
    float max_abs_scale = 0;
    for (int ib = 0; ib < kQuantSuperBlock / 16; ++ib) {
      const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, search == QuantSearch::kQuick ? 0 : 1);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {  // an all-zero super-block: every byte zero, d = +0
      std::memset(out, 0, kQ6_KBytes);
      continue;
    }
    const float iscale = -128.f / max_scale;
    write_u16(out + 208, f32_to_f16(1 / iscale));
    for (int ib = 0; ib < kQuantSuperBlock / 16; ++ib) sc[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < kQuantSuperBlock / 16; ++j) {
      const float d = read_f16_le(out + 208) * sc[j];
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = nearest_int(x[16 * j + ii] / d);
        l = std::max(-32, std::min(31, l));
        L[16 * j + ii] = int8_t(l + 32);
      }
    }
    for (int j = 0; j < kQuantSuperBlock; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = uint8_t(q1 | (q3 << 4));
        ql[l + 32] = uint8_t(q2 | (q4 << 4));
        qh[l] = uint8_t((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                        ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

std::vector<uint8_t> quantize_matrix(GgmlQuantType t, const float* x, int64_t n, int64_t k, QuantSearch search) {
  const size_t row = ggml_quant_row_bytes(t, k);
  std::vector<uint8_t> out(row * size_t(n));
  for (int64_t r = 0; r < n; ++r) {
    switch (t) {
      case GgmlQuantType::Q8_0: quantize_q8_0(x + r * k, k, out.data() + r * row); break;
      case GgmlQuantType::Q4_0: quantize_q4_0(x + r * k, k, out.data() + r * row); break;
      case GgmlQuantType::Q4_1: quantize_q4_1(x + r * k, k, out.data() + r * row); break;
      case GgmlQuantType::Q5_1: quantize_q5_1(x + r * k, k, out.data() + r * row); break;
      case GgmlQuantType::Q5_0: quantize_q5_0(x + r * k, k, out.data() + r * row); break;
      case GgmlQuantType::Q4_K: quantize_q4_k(x + r * k, k, out.data() + r * row, search); break;
      case GgmlQuantType::Q5_K: quantize_q5_k(x + r * k, k, out.data() + r * row, search); break;
      case GgmlQuantType::Q6_K: quantize_q6_k(x + r * k, k, out.data() + r * row, search); break;
      default:
        fail("quantize: ", ggml_quant_name(t), " has no quantizer here (expected Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K or "
             "Q6_K)");
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------------
// Prepacking.

namespace {

// 5-bit code j (0..31) of a Q5_0/Q5_1 block: `qh` the 4 high-bit bytes, `qs` the 16 nibble bytes.
int q5_code(const uint8_t* qh4, const uint8_t* qs, int j) {
  const uint32_t qh = uint32_t(qh4[0]) | uint32_t(qh4[1]) << 8 | uint32_t(qh4[2]) << 16 | uint32_t(qh4[3]) << 24;
  const int nib = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
  return nib | int(((qh >> j) & 1u) << 4);
}

}  // namespace

QuantPlanes PackedQuant::planes() const {
  auto ptr = [](const auto& v) { return v.empty() ? nullptr : v.data(); };
  QuantPlanes q{};
  q.codes = ptr(codes);
  q.scales = ptr(scales);
  q.mins = ptr(mins);
  q.sub_scales = ptr(sub_scales);
  q.super_d = ptr(super_d);
  q.k_heads = ptr(k_heads);
  q.ld_codes = ld_codes;
  q.ld_groups = ld_groups;
  q.ld_sub = ld_sub;
  q.ld_super = ld_super;
  q.ld_heads = ld_heads;
  q.code_hi = ptr(code_hi);
  q.ld_hi = ld_hi;
  return q;
}

PackedQuant pack_quant(const uint8_t* blocks, GgmlQuantType t, int64_t n, int64_t k, const std::string& what) {
  return pack_quant_parts({QuantRowsPart{blocks, n}}, t, k, what);
}

namespace {

// The metadata and pitches of the prepacked form of an [n, k] tensor of type t (planes left empty).
PackedQuant packed_layout(GgmlQuantType t, int64_t n, int64_t k) {
  PackedQuant p;
  p.type = t;
  p.n = n;
  p.k = k;
  const bool int4 = t == GgmlQuantType::Q4_0 || t == GgmlQuantType::Q4_1 || t == GgmlQuantType::Q4_K;
  p.family = int4 ? QuantFamily::Int4 : QuantFamily::Int8;
  p.group = t == GgmlQuantType::Q6_K ? 16 : 32;
  p.code_offset = t == GgmlQuantType::Q4_0 ? -8 : t == GgmlQuantType::Q6_K ? -32 : 0;
  p.has_min = t == GgmlQuantType::Q4_1 || t == GgmlQuantType::Q5_1 || t == GgmlQuantType::Q4_K ||
              t == GgmlQuantType::Q5_K;
  p.two_level = t == GgmlQuantType::Q4_K || t == GgmlQuantType::Q5_K || t == GgmlQuantType::Q6_K;
  p.n_groups = k / p.group;
  p.hi_bits = t == GgmlQuantType::Q6_K ? 2 : t == GgmlQuantType::Q5_K ? 1 : 0;
  p.ld_codes = int4 || p.hi_bits > 0 ? round_up(k / 2, 16) : round_up(k, 16);
  p.ld_hi = p.hi_bits > 0 ? round_up(k * p.hi_bits / 8, 16) : 0;
  if (p.two_level) {
    p.groups_per_super = kQuantSuperBlock / p.group;
    if (p.has_min) {  // Q4_K, Q5_K: the heads as stored
      p.ld_heads = round_up(16 * (k / kQuantSuperBlock), 16);
    } else {  // Q6_K
      p.ld_sub = round_up(p.n_groups, 16);
      p.ld_super = round_up(k / kQuantSuperBlock, 8);
    }
  } else {
    p.ld_groups = round_up(p.n_groups, 8);
  }
  return p;
}

// The bytes of each plane of layout p (absent planes 0).
PackedQuantBytes plane_bytes(const PackedQuant& p) {
  PackedQuantBytes b;
  b.codes = p.n * p.ld_codes;
  b.code_hi = p.n * p.ld_hi;
  if (p.two_level && p.has_min) {  // Q4_K, Q5_K: the heads as stored
    b.k_heads = p.n * p.ld_heads;
  } else if (p.two_level) {  // Q6_K
    b.sub_scales = p.n * p.ld_sub;
    b.super_d = p.n * p.ld_super * 2;
  } else {
    b.scales = p.n * p.ld_groups * 2;
    if (p.has_min) b.mins = b.scales;
  }
  return b;
}

}  // namespace

PackedQuantBytes packed_quant_bytes(GgmlQuantType t, int64_t n, int64_t k) {
  check_quant_row_length(t, k, "packed_quant_bytes");
  return plane_bytes(packed_layout(t, n, k));
}

PackedQuant pack_quant_parts(const std::vector<QuantRowsPart>& parts, GgmlQuantType t, int64_t k,
                             const std::string& what) {
  check_quant_row_length(t, k, what);
  int64_t n = 0;
  for (const QuantRowsPart& part : parts) {
    if (part.rows < 0) fail(what, ": negative row count ", part.rows);
    if (part.rows > 0 && !part.blocks) fail(what, ": a part of ", part.rows, " rows without data");
    n += part.rows;
  }
  PackedQuant p = packed_layout(t, n, k);
  // The planes are sized here (plane_bytes: what the memory plan counts) and zeroed row by row by the threads that
  // pack the rows (pack_rows): a large matrix's pages are first touched in parallel, not zero-filled by one thread
  // (PackedPlane leaves them uninitialised).
  const PackedQuantBytes b = plane_bytes(p);
  p.codes.resize(size_t(b.codes));
  p.code_hi.resize(size_t(b.code_hi));
  p.k_heads.resize(size_t(b.k_heads));
  p.sub_scales.resize(size_t(b.sub_scales));
  p.super_d.resize(size_t(b.super_d) / sizeof(uint16_t));
  p.scales.resize(size_t(b.scales) / sizeof(uint16_t));
  p.mins.resize(size_t(b.mins) / sizeof(uint16_t));
  // Row r of every plane zeroed (its padding stays zero; the packing below writes the rest).
  auto zero_row = [&p](int64_t r) {
    auto zero = [r](auto& v, int64_t ld) {
      if (!v.empty()) std::memset(v.data() + r * ld, 0, size_t(ld) * sizeof(v[0]));
    };
    zero(p.codes, p.ld_codes);
    zero(p.code_hi, p.ld_hi);
    zero(p.k_heads, p.ld_heads);
    zero(p.sub_scales, p.ld_sub);
    zero(p.super_d, p.ld_super);
    zero(p.scales, p.ld_groups);
    zero(p.mins, p.ld_groups);
  };

  const size_t row_bytes = ggml_quant_row_bytes(t, k);
  const size_t bb = ggml_quant_block_bytes(t);
  auto row_blocks = [&](int64_t r) {  // row r of the fused matrix: in the part that holds it
    for (const QuantRowsPart& part : parts) {
      if (r < part.rows) return part.blocks + size_t(r) * row_bytes;
      r -= part.rows;
    }
    return static_cast<const uint8_t*>(nullptr);  // not reached: r < n
  };
  // Split codes (Q5_K, Q6_K): the codes v[0..15] (Q5_K 0..31, Q6_K 0..63) of chunk c of row r into the nibble and
  // high-bit planes, in core/quant_planes.h's order (QuantPlanes::codes).
  auto put_split = [&p](int64_t r, int64_t c, const uint8_t* v) {
    uint32_t w[4];  // weights 4q .. 4q+3 in word q, byte j = weight 4q+j
    std::memcpy(w, v, 16);
    const uint32_t lo[2] = {(w[0] & 0x0F0F0F0Fu) | (w[1] & 0x0F0F0F0Fu) << 4, (w[2] & 0x0F0F0F0Fu) | (w[3] & 0x0F0F0F0Fu) << 4};
    std::memcpy(p.codes.data() + r * p.ld_codes + 8 * c, lo, 8);
    uint8_t* hi = p.code_hi.data() + r * p.ld_hi;
    if (p.hi_bits == 2) {  // byte j: field q (bits 2q, 2q+1) = weight 4q+j's bits 4-5
      uint32_t h = 0;
      for (int q = 0; q < 4; ++q) h |= ((w[q] >> 4) & 0x03030303u) << (2 * q);
      std::memcpy(hi + 4 * c, &h, 4);
    } else {  // bit 4q+j = weight 4q+j's bit 4: the four bytes' bits gathered by one multiply (no carries)
      uint32_t h = 0;
      for (int q = 0; q < 4; ++q) h |= ((((w[q] >> 4) & 0x01010101u) * 0x01020408u) >> 24 & 0xFu) << (4 * q);
      const uint8_t h2[2] = {uint8_t(h & 0xFF), uint8_t(h >> 8)};
      std::memcpy(hi + 2 * c, h2, 2);
    }
  };
  auto pack_rows = [&](int64_t r_begin, int64_t r_end) {
  for (int64_t r = r_begin; r < r_end; ++r) {
    zero_row(r);
    const uint8_t* src = row_blocks(r);
    uint8_t* codes = p.codes.data() + r * p.ld_codes;
    switch (t) {
      case GgmlQuantType::Q4_0:
      case GgmlQuantType::Q4_1: {
        const size_t qs_at = t == GgmlQuantType::Q4_0 ? 2 : 4;
        for (int64_t g = 0; g < p.n_groups; ++g) {
          const uint8_t* b = src + g * bb;
          p.scales[r * p.ld_groups + g] = read_u16_le(b);
          if (p.has_min) p.mins[r * p.ld_groups + g] = read_u16_le(b + 2);
          std::memcpy(codes + 16 * g, b + qs_at, 16);  // already byte i = w[i] | w[i + 16] << 4
        }
        break;
      }
      case GgmlQuantType::Q4_K: {
        for (int64_t sb = 0; sb < k / kQuantSuperBlock; ++sb) {
          const uint8_t* b = src + sb * bb;
          std::memcpy(p.k_heads.data() + r * p.ld_heads + 16 * sb, b, 16);  // d, dmin, scales[12]
          for (int s = 0; s < 8; ++s) {
            const int64_t g = sb * 8 + s;
            const uint8_t* q = b + 16 + 32 * (s / 2);  // sub-block s: low (even s) or high (odd s) nibbles of q[0..31]
            const int shift = (s & 1) ? 4 : 0;
            for (int i = 0; i < 16; ++i)
              codes[16 * g + i] = uint8_t(((q[i] >> shift) & 0xF) | (((q[i + 16] >> shift) & 0xF) << 4));
          }
        }
        break;
      }
      case GgmlQuantType::Q5_K: {  // codes 0..31, split: 4 + 1 bits per weight
        for (int64_t sb = 0; sb < k / kQuantSuperBlock; ++sb) {
          const uint8_t* b = src + sb * bb;
          std::memcpy(p.k_heads.data() + r * p.ld_heads + 16 * sb, b, 16);  // d, dmin, scales[12]
          const uint8_t* qh = b + 16;
          for (int s = 0; s < 8; ++s) {
            const int64_t g = sb * 8 + s;
            const uint8_t* q = b + 48 + 32 * (s / 2);
            const int shift = (s & 1) ? 4 : 0;
            uint8_t v[32];
            for (int l = 0; l < 32; ++l) v[l] = uint8_t(((q[l] >> shift) & 0xF) | (((qh[l] >> s) & 1) << 4));
            put_split(r, 2 * g, v);
            put_split(r, 2 * g + 1, v + 16);
          }
        }
        break;
      }
      case GgmlQuantType::Q8_0: {
        for (int64_t g = 0; g < p.n_groups; ++g) {
          const uint8_t* b = src + g * bb;
          p.scales[r * p.ld_groups + g] = read_u16_le(b);
          std::memcpy(codes + 32 * g, b + 2, 32);
        }
        break;
      }
      case GgmlQuantType::Q5_0:
      case GgmlQuantType::Q5_1: {
        const bool q51 = t == GgmlQuantType::Q5_1;
        for (int64_t g = 0; g < p.n_groups; ++g) {
          const uint8_t* b = src + g * bb;
          p.scales[r * p.ld_groups + g] = read_u16_le(b);
          if (q51) p.mins[r * p.ld_groups + g] = read_u16_le(b + 2);
          const uint8_t* qh = b + (q51 ? 4 : 2);
          for (int j = 0; j < 32; ++j) {
            const int q = q5_code(qh, qh + 4, j);
            codes[32 * g + j] = uint8_t(int8_t(q51 ? q : q - 16));
          }
        }
        break;
      }
      case GgmlQuantType::Q6_K: {
        for (int64_t sb = 0; sb < k / kQuantSuperBlock; ++sb) {
          const uint8_t* b = src + sb * bb;
          p.super_d[r * p.ld_super + sb] = read_u16_le(b + 208);
          for (int s = 0; s < 16; ++s) p.sub_scales[r * p.ld_sub + sb * 16 + s] = int8_t(b[192 + s]);
          // The 6-bit code (0..63) of weight 128 h + 32 m + l: nibble of ql[l] (m = 0, 2) or ql[l + 32] (m = 1, 3),
          // low (m < 2) or high, and bits 2m, 2m + 1 of qh[l]; four weights per l, in dequantize_row_q6_K's order.
          uint8_t v[kQuantSuperBlock];
          for (int h = 0; h < 2; ++h) {
            const uint8_t* ql = b + 64 * h;
            const uint8_t* qh = b + 128 + 32 * h;
            uint8_t* out = v + 128 * h;
            for (int l = 0; l < 32; ++l) {
              out[l] = uint8_t((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
              out[l + 32] = uint8_t((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
              out[l + 64] = uint8_t((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
              out[l + 96] = uint8_t((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
            }
          }
          for (int c = 0; c < kQuantSuperBlock / 16; ++c) put_split(r, sb * (kQuantSuperBlock / 16) + c, v + 16 * c);
        }
        break;
      }
    }
  }
  };
  // Rows are independent: a large matrix is packed by several threads, each row by one (the same bytes as one thread;
  // 8B Q4_0 packed at 0.78 GB/s on one thread, the slow part of loading a quantized model).
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const int64_t threads = n * k < (int64_t(1) << 22) ? 1 : std::min<int64_t>({int64_t(hw), n, int64_t(32)});
  if (threads <= 1) {
    pack_rows(0, n);
  } else {
    std::vector<std::thread> pool;
    for (int64_t i = 0; i < threads; ++i) pool.emplace_back(pack_rows, n * i / threads, n * (i + 1) / threads);
    for (std::thread& th : pool) th.join();
  }
  return p;
}

int packed_code(const PackedQuant& p, int64_t r, int64_t j) {
  const uint8_t* row = p.codes.data() + r * p.ld_codes;
  if (p.family == QuantFamily::Int4) {
    const int64_t g = j / 32, i = j % 32;
    const uint8_t byte = row[16 * g + (i % 16)];
    return i < 16 ? (byte & 0xF) : (byte >> 4);
  }
  if (p.hi_bits > 0) {  // split: nibble and high bits where put_split wrote them
    const int64_t c = j / 16;
    const int i = int(j % 16);
    const int nib = (row[8 * c + (i / 8) * 4 + (i % 4)] >> (((i / 4) & 1) * 4)) & 0xF;
    const uint8_t* hi = p.code_hi.data() + r * p.ld_hi;
    if (p.hi_bits == 2) return nib | (((hi[4 * c + (i % 4)] >> (2 * (i / 4))) & 3) << 4);  // q, 0..63
    return nib | (((hi[2 * c + i / 8] >> (i % 8)) & 1) << 4);
  }
  return int(int8_t(row[j]));
}

// Group g's head of a Q4_K/Q5_K row (core/quant_planes.h k_head_group).
static KHeadGroup k_head_of(const PackedQuant& p, int64_t r, int64_t g) {
  return k_head_group(p.k_heads.data() + r * p.ld_heads + 16 * (g / 8), int(g % 8));
}

float group_scale(const PackedQuant& p, int64_t r, int64_t g) {
  if (!p.two_level) return f16_to_f32(p.scales[r * p.ld_groups + g]);
  if (p.has_min) {
    const KHeadGroup h = k_head_of(p, r, g);
    return f16_to_f32(h.d) * float(h.sc);
  }
  const float d = f16_to_f32(p.super_d[r * p.ld_super + g / p.groups_per_super]);
  return d * float(p.sub_scales[r * p.ld_sub + g]);
}

float group_min(const PackedQuant& p, int64_t r, int64_t g) {
  if (!p.has_min) return 0.0f;
  if (!p.two_level) return f16_to_f32(p.mins[r * p.ld_groups + g]);
  const KHeadGroup h = k_head_of(p, r, g);
  return -(f16_to_f32(h.dmin) * float(h.m));
}

float packed_weight(const PackedQuant& p, int64_t r, int64_t j) {
  const int64_t g = j / p.group;
  const float v = float(packed_code(p, r, j) + p.code_offset) * group_scale(p, r, g);
  return p.has_min ? v + group_min(p, r, g) : v;
}

namespace {

void unpack_row(const PackedQuant& p, int64_t r, float* out) {
  for (int64_t g = 0; g < p.n_groups; ++g) {
    const float s = group_scale(p, r, g), m = group_min(p, r, g);
    for (int64_t j = g * p.group; j < (g + 1) * p.group; ++j) {
      const float v = float(packed_code(p, r, j) + p.code_offset) * s;
      out[j] = p.has_min ? v + m : v;
    }
  }
}

}  // namespace

std::vector<float> unpack_quant(const PackedQuant& p) {
  std::vector<float> out(size_t(p.n * p.k));
  for (int64_t r = 0; r < p.n; ++r) unpack_row(p, r, out.data() + r * p.k);
  return out;
}

int64_t packed_bytes_read(const PackedQuant& p) {
  const int64_t codes = p.family == QuantFamily::Int4 ? p.k / 2 : p.hi_bits > 0 ? p.k / 2 + p.k * p.hi_bits / 8 : p.k;
  int64_t per_row = codes;
  if (p.two_level) {
    const int64_t supers = p.k / kQuantSuperBlock;
    per_row += p.has_min ? supers * 16 : p.n_groups + supers * 2;  // heads; or Q6_K's sub-scales and d
  } else {
    per_row += p.n_groups * 2 * (p.has_min ? 2 : 1);
  }
  return per_row * p.n;
}

int64_t packed_bytes_allocated(const PackedQuant& p) {
  return int64_t(p.codes.size() + p.code_hi.size() + 2 * (p.scales.size() + p.mins.size() + p.super_d.size()) + p.sub_scales.size() +
                 p.k_heads.size());
}

std::vector<double> packed_gemv_ref(const PackedQuant& p, const float* x) {
  std::vector<double> y(size_t(p.n), 0.0);
  std::vector<float> w(size_t(p.k));
  for (int64_t r = 0; r < p.n; ++r) {
    unpack_row(p, r, w.data());
    double acc = 0.0;
    for (int64_t j = 0; j < p.k; ++j) acc += double(w[j]) * double(x[j]);
    y[size_t(r)] = acc;
  }
  return y;
}

}  // namespace llm
