// "as-stored": GGUF's blocks read unchanged, per type: the block loads, one block's dot product (one helper per
// type, the arithmetic of models/quant.cpp's dequantizers) and a lane's walk over a row's blocks. __host__ __device__
// (the host emulation runs the same code). Included through kernels/quant/gemv_quant_device.cuh.
#pragma once
#include "kernels/quant/gemv_quant_decode.cuh"

namespace llm {

// ---- "as-stored": GGUF blocks unchanged ----------------------------------------------------------------------------

// Arguments of the "as-stored" kernel.
struct AsStoredArgs {
  const uint8_t* blocks;  // [n, row_bytes]
  int64_t row_bytes;
  int n;
  int units;              // blocks per row
  int splits, slice_units;
  const float* x;
  float* y;
  int accumulate;
  GemvEpilogue ep;        // the RMSNorm fold (kernels/gemv/gemv_epilogue.h)
};

QHD uint32_t quant_ld16(const uint8_t* p) {
  return quant_ldg(reinterpret_cast<const unsigned short*>(p));
}
// 4 bytes at a 2-byte aligned address: two 2-byte loads.
QHD uint32_t quant_ld32_a2(const uint8_t* p) { return quant_ld16(p) | (quant_ld16(p + 2) << 16); }
// 4 bytes at a 4-byte aligned address.
QHD uint32_t quant_ld32_a4(const uint8_t* p) {
  return quant_ldg(reinterpret_cast<const unsigned int*>(p));
}
// Bit t (0..3) of h to bit 4 of byte t: the fifth bit of four Q5 codes.
QHD uint32_t quant_spread4(uint32_t h) {
  return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25);
}
QHD uint32_t quant_byte_of(uint32_t w, int i) { return (w >> (8 * i)) & 0xffu; }

constexpr float kQuantU = -8388608.0f;  // bias of an unsigned code byte: value = code

template <int kType>
struct QuantBlockInfo;
template <> struct QuantBlockInfo<quant_type_id::kQ4_0> { static constexpr int bytes = 18, weights = 32; };
template <> struct QuantBlockInfo<quant_type_id::kQ4_1> { static constexpr int bytes = 20, weights = 32; };
template <> struct QuantBlockInfo<quant_type_id::kQ5_0> { static constexpr int bytes = 22, weights = 32; };
template <> struct QuantBlockInfo<quant_type_id::kQ5_1> { static constexpr int bytes = 24, weights = 32; };
template <> struct QuantBlockInfo<quant_type_id::kQ8_0> { static constexpr int bytes = 34, weights = 32; };
template <> struct QuantBlockInfo<quant_type_id::kQ4_K> { static constexpr int bytes = 144, weights = 256; };
template <> struct QuantBlockInfo<quant_type_id::kQ5_K> { static constexpr int bytes = 176, weights = 256; };
template <> struct QuantBlockInfo<quant_type_id::kQ6_K> { static constexpr int bytes = 210, weights = 256; };

// One block b (GGUF bytes) of each type with its x (xb = x + block * block_weights): sum_j w_j x_j, one helper per
// type, each reading the block's fields as ggml's dequantize_row_* lays them out.
template <bool kVecX>
QHD float quant_block_dot_q4_0(const uint8_t* __restrict__ b, const float* __restrict__ xb) {
  // fp16 d, qs[16]: (nibble - 8) * d
  const float d = quant_h2f(quant_ld16(b));
  float dot = 0.0f;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t v = quant_ld32_a2(b + 2 + 4 * q);
    dot = quant_dot4(v & 0x0F0F0F0Fu, quant_load_x4<kVecX>(xb, 4 * q), kQuantU - 8.0f, dot);
    dot = quant_dot4((v >> 4) & 0x0F0F0F0Fu, quant_load_x4<kVecX>(xb, 16 + 4 * q), kQuantU - 8.0f, dot);
  }
  return d * dot;
}

template <bool kVecX>
QHD float quant_block_dot_q4_1(const uint8_t* __restrict__ b, const float* __restrict__ xb) {
  // fp16 d, fp16 m, qs[16]: nibble * d + m
  const uint32_t dm = quant_ld32_a4(b);
  float dot = 0.0f, xsum = 0.0f;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t v = quant_ld32_a4(b + 4 + 4 * q);
    const float4 xl = quant_load_x4<kVecX>(xb, 4 * q), xh = quant_load_x4<kVecX>(xb, 16 + 4 * q);
    dot = quant_dot4(v & 0x0F0F0F0Fu, xl, kQuantU, dot);
    dot = quant_dot4((v >> 4) & 0x0F0F0F0Fu, xh, kQuantU, dot);
    xsum = quant_sum4(xh, quant_sum4(xl, xsum));
  }
  return quant_h2f(dm) * dot + quant_h2f(dm >> 16) * xsum;
}

template <bool kVecX>
QHD float quant_block_dot_q5_0(const uint8_t* __restrict__ b, const float* __restrict__ xb) {
  // fp16 d, qh[4], qs[16]: (q5 - 16) * d
  const float d = quant_h2f(quant_ld16(b));
  const uint32_t qh = quant_ld32_a2(b + 2);
  float dot = 0.0f;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t v = quant_ld32_a2(b + 6 + 4 * q);
    const uint32_t lo = (v & 0x0F0F0F0Fu) | quant_spread4((qh >> (4 * q)) & 0xFu);
    const uint32_t hi = ((v >> 4) & 0x0F0F0F0Fu) | quant_spread4((qh >> (16 + 4 * q)) & 0xFu);
    dot = quant_dot4(lo, quant_load_x4<kVecX>(xb, 4 * q), kQuantU - 16.0f, dot);
    dot = quant_dot4(hi, quant_load_x4<kVecX>(xb, 16 + 4 * q), kQuantU - 16.0f, dot);
  }
  return d * dot;
}

template <bool kVecX>
QHD float quant_block_dot_q5_1(const uint8_t* __restrict__ b, const float* __restrict__ xb) {
  // fp16 d, fp16 m, qh[4], qs[16]: q5 * d + m
  const uint32_t dm = quant_ld32_a4(b);
  const uint32_t qh = quant_ld32_a4(b + 4);
  float dot = 0.0f, xsum = 0.0f;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t v = quant_ld32_a4(b + 8 + 4 * q);
    const uint32_t lo = (v & 0x0F0F0F0Fu) | quant_spread4((qh >> (4 * q)) & 0xFu);
    const uint32_t hi = ((v >> 4) & 0x0F0F0F0Fu) | quant_spread4((qh >> (16 + 4 * q)) & 0xFu);
    const float4 xl = quant_load_x4<kVecX>(xb, 4 * q), xh = quant_load_x4<kVecX>(xb, 16 + 4 * q);
    dot = quant_dot4(lo, xl, kQuantU, dot);
    dot = quant_dot4(hi, xh, kQuantU, dot);
    xsum = quant_sum4(xh, quant_sum4(xl, xsum));
  }
  return quant_h2f(dm) * dot + quant_h2f(dm >> 16) * xsum;
}

template <bool kVecX>
QHD float quant_block_dot_q8_0(const uint8_t* __restrict__ b, const float* __restrict__ xb) {
  // fp16 d, int8 qs[32]: q * d
  const float d = quant_h2f(quant_ld16(b));
  float dot = 0.0f;
#pragma unroll
  for (int q = 0; q < 8; ++q)
    dot = quant_dot4(quant_ld32_a2(b + 2 + 4 * q) ^ 0x80808080u, quant_load_x4<kVecX>(xb, 4 * q), kQuantU - 128.0f, dot);
  return d * dot;
}

// kFive: Q5_K, whose qh[32] (after the scales) adds bit s of qh[l] as bit 4 of sub-block s's code l.
template <bool kVecX, bool kFive = false>
QHD float quant_block_dot_q4_k(const uint8_t* __restrict__ b, const float* __restrict__ xb) {
  // fp16 d, fp16 dmin, scales[12] (get_scale_min_k4), [Q5_K: qh[32]], qs[128]: sub-block 2c = low nibbles of
  // qs[32c .. 32c+31] (weights 64c .. 64c+31), 2c+1 = their high nibbles (64c+32 ..); w = (d * sc) * q - (dmin * m).
  constexpr int kQs = kFive ? 48 : 16;
  const uint32_t dm = quant_ld32_a4(b);
  const float d = quant_h2f(dm), dmin = quant_h2f(dm >> 16);
  const uint32_t sw[3] = {quant_ld32_a4(b + 4), quant_ld32_a4(b + 8), quant_ld32_a4(b + 12)};
  auto sb = [&](int i) { return quant_byte_of(sw[i / 4], i % 4); };  // scale byte i (0..11)
  float acc = 0.0f;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    float dlo = 0.0f, dhi = 0.0f, slo = 0.0f, shi = 0.0f;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const uint32_t v = quant_ld32_a4(b + kQs + 32 * c + 4 * t);
      const float4 xl = quant_load_x4<kVecX>(xb, 64 * c + 4 * t);
      const float4 xh = quant_load_x4<kVecX>(xb, 64 * c + 32 + 4 * t);
      uint32_t lo = v & 0x0F0F0F0Fu, hi = (v >> 4) & 0x0F0F0F0Fu;
      if constexpr (kFive) {
        const uint32_t h = quant_ld32_a4(b + 16 + 4 * t);
        lo |= ((h >> (2 * c)) & 0x01010101u) << 4;
        hi |= ((h >> (2 * c + 1)) & 0x01010101u) << 4;
      }
      dlo = quant_dot4(lo, xl, kQuantU, dlo);
      dhi = quant_dot4(hi, xh, kQuantU, dhi);
      slo = quant_sum4(xl, slo);
      shi = quant_sum4(xh, shi);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * c + h;
      uint32_t sc, m;
      if (j < 4) {
        sc = sb(j) & 63u;
        m = sb(j + 4) & 63u;
      } else {
        sc = (sb(j + 4) & 0xFu) | ((sb(j - 4) >> 6) << 4);
        m = (sb(j + 4) >> 4) | ((sb(j) >> 6) << 4);
      }
      const float s = quant_mul_rn(d, float(sc)), mm = -quant_mul_rn(dmin, float(m));
      acc = fmaf(s, h ? dhi : dlo, acc);
      acc = fmaf(mm, h ? shi : slo, acc);
    }
  }
  return acc;
}

template <bool kVecX>
QHD float quant_block_dot_q6_k(const uint8_t* __restrict__ b, const float* __restrict__ xb) {
  // ql[128], qh[64], int8 scales[16], fp16 d; order as dequantize_row_q6_K: half h, l in 0..31, the four weights
  // 128h + l + {0, 32, 64, 96} from ql[64h + l], ql[64h + 32 + l], qh[32h + l], scales 8h + l / 16 + {0, 2, 4, 6}.
  const float d = quant_h2f(quant_ld16(b + 208));
  uint32_t sw[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) sw[i] = quant_ld32_a2(b + 192 + 4 * i);
  float acc = 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int is = 0; is < 2; ++is) {
      float dt[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int l4 = 0; l4 < 4; ++l4) {
        const int l = 16 * is + 4 * l4;
        const uint32_t wa = quant_ld32_a2(b + 64 * h + l), wb = quant_ld32_a2(b + 64 * h + 32 + l);
        const uint32_t wh = quant_ld32_a2(b + 128 + 32 * h + l);
        const uint32_t q1 = (wa & 0x0F0F0F0Fu) | ((wh & 0x03030303u) << 4);
        const uint32_t q2 = (wb & 0x0F0F0F0Fu) | (((wh >> 2) & 0x03030303u) << 4);
        const uint32_t q3 = ((wa >> 4) & 0x0F0F0F0Fu) | (((wh >> 4) & 0x03030303u) << 4);
        const uint32_t q4 = ((wb >> 4) & 0x0F0F0F0Fu) | (((wh >> 6) & 0x03030303u) << 4);
        dt[0] = quant_dot4(q1, quant_load_x4<kVecX>(xb, 128 * h + l), kQuantU - 32.0f, dt[0]);
        dt[1] = quant_dot4(q2, quant_load_x4<kVecX>(xb, 128 * h + 32 + l), kQuantU - 32.0f, dt[1]);
        dt[2] = quant_dot4(q3, quant_load_x4<kVecX>(xb, 128 * h + 64 + l), kQuantU - 32.0f, dt[2]);
        dt[3] = quant_dot4(q4, quant_load_x4<kVecX>(xb, 128 * h + 96 + l), kQuantU - 32.0f, dt[3]);
      }
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int si = 8 * h + is + 2 * t;
        const float s = quant_mul_rn(d, float(int8_t(quant_byte_of(sw[si / 4], si % 4))));
        acc = fmaf(s, dt[t], acc);
      }
    }
  }
  return acc;
}

// sum_j w_j x_j over one block b (GGUF bytes) and its x (xb = x + block * block_weights).
template <int kType, bool kVecX>
QHD float quant_block_dot(const uint8_t* __restrict__ b, const float* __restrict__ xb) {
  using namespace quant_type_id;
  if constexpr (kType == kQ4_0) {
    return quant_block_dot_q4_0<kVecX>(b, xb);
  } else if constexpr (kType == kQ4_1) {
    return quant_block_dot_q4_1<kVecX>(b, xb);
  } else if constexpr (kType == kQ5_0) {
    return quant_block_dot_q5_0<kVecX>(b, xb);
  } else if constexpr (kType == kQ5_1) {
    return quant_block_dot_q5_1<kVecX>(b, xb);
  } else if constexpr (kType == kQ8_0) {
    return quant_block_dot_q8_0<kVecX>(b, xb);
  } else if constexpr (kType == kQ4_K) {
    return quant_block_dot_q4_k<kVecX>(b, xb);
  } else if constexpr (kType == kQ5_K) {
    return quant_block_dot_q4_k<kVecX, true>(b, xb);
  } else {
    static_assert(kType == kQ6_K, "unknown block type");
    return quant_block_dot_q6_k<kVecX>(b, xb);
  }
}

// "as-stored": lane `lane`'s partial sum of row `row` (< n) over blocks [b_begin, b_end): lane l takes blocks
// b_begin + l + 32 i.
template <int kType, bool kVecX>
QHD float quant_as_stored_lane(const AsStoredArgs& a, int64_t row, int b_begin, int b_end, int lane) {
  constexpr int kBytes = QuantBlockInfo<kType>::bytes, kWeights = QuantBlockInfo<kType>::weights;
  const uint8_t* rowp = a.blocks + row * a.row_bytes;
  float acc = 0.0f;
  for (int j = b_begin + lane; j < b_end; j += 32)
    acc += quant_block_dot<kType, kVecX>(rowp + int64_t(j) * kBytes, a.x + int64_t(j) * kWeights);
  return acc;
}

}  // namespace llm
