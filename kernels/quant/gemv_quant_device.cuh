// Helpers shared by the quantized GEMV kernels (kernels/gemv_quant_*.cu): kernel arguments, scale loads and decoding
// (bit for bit as models/quant.cpp's group_scale/group_min), code -> float conversion, the per-chunk dot, and the
// per-lane bodies of the kernels. Everything a lane computes is __host__ __device__ (QHD): on the host the loads are
// plain reads, so tests/gpu/gemv_quant_test.cu runs the very same lane code on the CPU (no device needed) and checks
// it against the FP64 reference; only the warp reduction and the launch itself are device-only.
#pragma once
#include <cstdint>
#include <cstring>

#include <cuda_fp16.h>

#include "core/dtype.h"             // bits_to_f32; f16_to_f32 (host path)
#include "kernels/gemv/gemv_device.cuh"  // load_weights_streaming, warp_sum
#include "kernels/quant/gemv_quant_plan.h"
#include "kernels/ops/pdl.cuh"

#define QHD __host__ __device__ __forceinline__

namespace llm {

// ---- host/device shims --------------------------------------------------------------------------------------------

template <typename T>
QHD T quant_ldg(const T* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

QHD uint32_t quant_prmt(uint32_t x, uint32_t y, uint32_t sel) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, sel);
#else
  const uint64_t pool = uint64_t(x) | (uint64_t(y) << 32);
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= uint32_t((pool >> (8 * ((sel >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return r;
#endif
}

// a * b rounded once, never contracted into an FMA.
QHD float quant_mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  volatile float p = a * b;
  return p;
#endif
}

// 16 code bytes: the streaming 16-byte load on the device (volatile asm: stays ahead of griddepcontrol.wait).
QHD uint4 quant_load_codes(const uint4* p) {
#if defined(__CUDA_ARCH__)
  return load_weights_streaming(p);
#else
  uint4 v;
  std::memcpy(&v, p, 16);
  return v;
#endif
}

// c + sum of the four signed byte products of a and b.
QHD int quant_dp4a(uint32_t a, uint32_t b, int c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(int(a), int(b), c);
#else
  for (int i = 0; i < 4; ++i) c += int(int8_t(uint8_t(a >> (8 * i)))) * int(int8_t(uint8_t(b >> (8 * i))));
  return c;
#endif
}

// c + sum of the four products of a's unsigned bytes and b's signed bytes (dp4a.u32.s32).
QHD int quant_dp4a_us(uint32_t a, uint32_t b, int c) {
#if defined(__CUDA_ARCH__)
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  for (int i = 0; i < 4; ++i) c += int(uint8_t(a >> (8 * i))) * int(int8_t(uint8_t(b >> (8 * i))));
  return c;
#endif
}

QHD void quant_pdl_wait() {
#if defined(__CUDA_ARCH__)
  pdl_wait();
#endif
}

// Arguments of the prepacked-plane kernels (warp, thread). Shapes as QuantGemvWeight.
struct QuantPackedArgs {
  const uint8_t* codes;          // [n, ld_codes]
  const uint16_t* scales;        // fp16 [n, ld_groups] (one-level)
  const uint16_t* mins;          // fp16 [n, ld_groups] (one-level, has_min)
  const int8_t* sub_scales;      // int8 [n, ld_sub] (two-level)
  const uint8_t* sub_mins;       // uint8 [n, ld_sub] (two-level, has_min)
  const uint16_t* super_d;       // fp16 [n, ld_super] (two-level)
  const uint16_t* super_dmin;    // fp16 [n, ld_super] (two-level, has_min)
  int64_t ld_codes, ld_groups, ld_sub, ld_super;
  int n;                         // rows
  int chunks;                    // 16-byte code chunks per row: k / 32 (Int4) or k / 16 (Int8)
  int group_shift;               // group of chunk c = c >> group_shift: 0 (Int4; Q6_K), 1 (Int8 with groups of 32)
  int super_shift;               // super-block of group g = g >> super_shift: 3 (Q4_K), 4 (Q6_K); 0 one-level
  int splits, slice_units;       // warp: warps per row group and chunks per K slice
  int64_t groups, lanes;         // warp: row groups of R rows; warp lanes, lane j owns groups [j*groups/lanes, ...)
  float bias;                    // code -> value: float(2^23 + byte) + bias = code + code_offset (exact)
  int code_offset;               // -8 for Q4_0, else 0 (warp-dp4a)
  const float* x;                // [k]
  float* y;                      // [n]
  int accumulate;
  // warp-dp4a, host emulation only: x quantized per block of 32 (quant_x_q8_block) into host arrays. (The device
  // kernel quantizes x into each block's shared memory.)
  const int8_t* xq;              // [k] int8 q, 16-byte aligned
  const float* xd;               // [k / 32] d: x ~= d * q
  const int* xs16;               // [k / 16] sum of q over each 16 values
};

// fp16 bits -> FP32, exact (subnormals, inf and NaN kept), as core/dtype.h's f16_to_f32.
QHD float quant_h2f(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xffffu)));
#else
  return f16_to_f32(uint16_t(bits & 0xffffu));
#endif
}

// The raw scale words of chunk c of row r, loaded with the codes so both are in flight together:
//   one-level: .x = fp16 s, .y = fp16 m;  two-level: .x = sub_scale byte | fp16 d << 16, .y = sub_min | fp16 dmin << 16.
template <bool kTwoLevel, bool kHasMin>
QHD uint2 quant_load_scale_raw(const QuantPackedArgs& a, int64_t r, int c) {
  const int g = c >> a.group_shift;
  uint2 raw = make_uint2(0u, 0u);
  if (!kTwoLevel) {
    raw.x = quant_ldg(a.scales + r * a.ld_groups + g);
    if (kHasMin) raw.y = quant_ldg(a.mins + r * a.ld_groups + g);
  } else {
    const int64_t sub = r * a.ld_sub + g, sup = r * a.ld_super + (g >> a.super_shift);
    raw.x = uint32_t(quant_ldg(reinterpret_cast<const unsigned char*>(a.sub_scales) + sub)) |
            (uint32_t(quant_ldg(a.super_d + sup)) << 16);
    if (kHasMin)
      raw.y = uint32_t(quant_ldg(a.sub_mins + sub)) | (uint32_t(quant_ldg(a.super_dmin + sup)) << 16);
  }
  return raw;
}

// s of a group, exactly as group_scale(): fp16 d (one-level), or f16(d) * float(int8 sub_scale) rounded once.
template <bool kTwoLevel>
QHD float quant_scale(uint2 raw) {
  if (!kTwoLevel) return quant_h2f(raw.x);
  return quant_mul_rn(quant_h2f(raw.x >> 16), float(int8_t(raw.x & 0xffu)));
}
// m of a group, exactly as group_min(): fp16 m (one-level), or -(f16(dmin) * float(uint8 sub_min)).
template <bool kTwoLevel>
QHD float quant_min(uint2 raw) {
  if (!kTwoLevel) return quant_h2f(raw.y);
  return -quant_mul_rn(quant_h2f(raw.y >> 16), float(raw.y & 0xffu));
}

// Byte j (0..3) of v as a float, plus bias: one PRMT places the byte in the mantissa of 2^23 (0x4B0000XX = 2^23 + XX),
// one FADD removes 2^23 (and applies the code offset). Exact: every value is an integer below 2^24.
template <int j>
QHD float quant_byte_f(uint32_t v, float bias) {
  return bits_to_f32(quant_prmt(v, 0x4B000000u, 0x7540u | j)) + bias;
}

QHD uint32_t quant_word(const uint4& v, int q) {
  return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

// x[i .. i+3] (i % 4 == 0). kVecX: x is 16-byte aligned, one float4 load.
template <bool kVecX>
QHD float4 quant_load_x4(const float* __restrict__ x, int64_t i) {
  if (kVecX) return quant_ldg(reinterpret_cast<const float4*>(x + i));
  return make_float4(quant_ldg(x + i), quant_ldg(x + i + 1), quant_ldg(x + i + 2), quant_ldg(x + i + 3));
}

// dot += sum_j value(byte j of w) * x_j over the 4 bytes of w.
QHD float quant_dot4(uint32_t w, const float4& xv, float bias, float dot) {
  dot = fmaf(quant_byte_f<0>(w, bias), xv.x, dot);
  dot = fmaf(quant_byte_f<1>(w, bias), xv.y, dot);
  dot = fmaf(quant_byte_f<2>(w, bias), xv.z, dot);
  return fmaf(quant_byte_f<3>(w, bias), xv.w, dot);
}

QHD float quant_sum4(const float4& v, float s) { return s + v.x + v.y + v.z + v.w; }

// Where a chunk's x comes from. Word j (0..7 for Int4, 0..3 for Int8) of chunk c is x[W * c + 4 * j .. + 3] with W =
// 32 (Int4) or 16 (Int8) weights per chunk: for Int4, words 0..3 pair with the low nibbles of code words 0..3 and
// words 4..7 with their high nibbles.
// QuantXGlobal: x itself (kVecX: 16-byte aligned, one float4 load). Lanes on consecutive chunks read 4 * W bytes apart
// (128 B for Int4): 32 sectors per request, served by L1 one sector at a time.
template <bool kVecX, int W>
struct QuantXGlobal {
  const float* __restrict__ x;
  QHD float4 word(int c, int j) const { return quant_load_x4<kVecX>(x, int64_t(c) * W + 4 * j); }
};
// QuantXShared: x transposed into shared memory as float4 [W / 4][chunks] (quant_gemv_warp_kernel stages it), so lanes
// on consecutive chunks read consecutive 16 bytes: conflict-free.
struct QuantXShared {
  const float4* p;
  int chunks;
  QHD float4 word(int c, int j) const { return p[j * chunks + c]; }
};

// One 16-byte chunk c for R rows sharing its x: acc[i] += s_i * sum_j code_ij x_j (+ m_i * sum_j x_j).
//   Int4: chunk c = group c, weights 32c .. 32c+31; byte b's low nibble pairs with x[32c+b], its high nibble with
//         x[32c+16+b]. Int8: weights 16c .. 16c+15, byte b with x[16c+b] (int8, biased by XOR 0x80 to 0..255).
// Rows without data carry zero codes and zero scales: their contribution is 0 * finite = 0. The sums run in the same
// order whatever XSrc is, so the global and shared-memory paths give the same bits.
template <bool kInt4, bool kTwoLevel, bool kHasMin, int R, typename XSrc>
QHD void quant_chunk_fma(const uint4 (&w)[R], const uint2 (&raw)[R], const XSrc& xs, int c, float bias,
                         float (&acc)[R]) {
  float dot[R];
#pragma unroll
  for (int i = 0; i < R; ++i) dot[i] = 0.0f;
  float xsum = 0.0f;
  if (kInt4) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 xl = xs.word(c, q);
      const float4 xh = xs.word(c, q + 4);
      if (kHasMin) xsum = quant_sum4(xh, quant_sum4(xl, xsum));
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const uint32_t v = quant_word(w[i], q);
        dot[i] = quant_dot4(v & 0x0F0F0F0Fu, xl, bias, dot[i]);
        dot[i] = quant_dot4((v >> 4) & 0x0F0F0F0Fu, xh, bias, dot[i]);
      }
    }
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 xv = xs.word(c, q);
      if (kHasMin) xsum = quant_sum4(xv, xsum);
#pragma unroll
      for (int i = 0; i < R; ++i) dot[i] = quant_dot4(quant_word(w[i], q) ^ 0x80808080u, xv, bias, dot[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < R; ++i) {
    acc[i] = fmaf(quant_scale<kTwoLevel>(raw[i]), dot[i], acc[i]);
    if (kHasMin) acc[i] = fmaf(quant_min<kTwoLevel>(raw[i]), xsum, acc[i]);
  }
}

// ---- warp-dp4a: int8 activations -------------------------------------------------------------------------------------

// Quantizes x[32b .. 32b+31] as llama.cpp's quantize_row_q8_1: d = amax / 127, q = roundf(x / d) (as x * (1 / d)),
// and the sums of q over each half. The kernel (one thread per block) and the tests' reference run this same code.
QHD void quant_x_q8_block(const float* __restrict__ x, int64_t b, int8_t* __restrict__ xq, float* __restrict__ xd,
                          int* __restrict__ xs16) {
  float v[32];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    v[j] = quant_ldg(x + 32 * b + j);
    amax = fmaxf(amax, fabsf(v[j]));
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int s0 = 0, s1 = 0;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const float t = v[j] * id;
    const int q = int(roundf(t));
    xq[32 * b + j] = int8_t(q);
    if (j < 16) s0 += q; else s1 += q;
  }
  xd[b] = d;
  xs16[2 * b] = s0;
  xs16[2 * b + 1] = s1;
}

#if defined(__CUDACC__)
// One lane's part of quant_x_q8_block with 8 lanes per block of 32 (lanes 8i .. 8i + 7 of a warp; sub = lane & 7 holds
// values 4 sub .. 4 sub + 3 of block b in v): amax over the 8 lanes and the sums over 16 by xor shuffles, q written 4
// bytes per lane. Every lane of the warp calls it (the shuffles); `in` = b is a block of x (else nothing is written).
// Bit for bit quant_x_q8_block (the same max, division, reciprocal and rounding per value; the sums are integers).
__device__ __forceinline__ void quant_x_q8_lanes(const float4& v, int b, bool in, int sub, int8_t* xq, float* xd,
                                                 int* xs16) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const int q0 = int(roundf(v.x * id)), q1 = int(roundf(v.y * id)), q2 = int(roundf(v.z * id)),
            q3 = int(roundf(v.w * id));
  int sum = q0 + q1 + q2 + q3;
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);  // lanes 0-3 of the 8: first 16 values; 4-7: the second 16
  if (in) {
    reinterpret_cast<uint32_t*>(xq)[b * 8 + sub] = (uint32_t(q0) & 0xffu) | ((uint32_t(q1) & 0xffu) << 8) |
                                                   ((uint32_t(q2) & 0xffu) << 16) | (uint32_t(q3) << 24);
    if (sub == 0) xd[b] = d;
    if ((sub & 3) == 0) xs16[2 * b + (sub >> 2)] = sum;
  }
}

// quant_x_q8_block's results for all k / 32 blocks of x, by the block's warps with coalesced loads: 8 lanes per block
// of 32 (a float4 each; a warp takes 4 blocks = 512 contiguous bytes per load), quant_x_q8_lanes; 4 rounds' loads in
// flight at once. (One thread per block of 32, as before, reads x 128 bytes apart across the lanes: 32 L1 wavefronts
// per load, measured ~15 us per call at k = 14,336 on the H200.)
__device__ __forceinline__ void quant_x_q8_block_warps(const float* __restrict__ x, int k, int8_t* xq, float* xd,
                                                       int* xs16, int warp, int lane) {
  constexpr int kStep = kQuantWarpsPerBlock * 4;  // blocks of 32 the block's warps take per round
  constexpr int kUnroll = 4;                      // rounds whose loads are issued together (latency, not registers)
  const int nb = k / 32, sub = lane & 7;
  const bool vec = (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  for (int base = warp * 4 + (lane >> 3); base - (lane >> 3) < nb; base += kStep * kUnroll) {  // warp-uniform
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int b = base + u * kStep;
      v[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (b < nb) {
        const float* p = x + int64_t(b) * 32 + 4 * sub;
        v[u] = vec ? __ldg(reinterpret_cast<const float4*>(p))
                   : make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int b = base + u * kStep;  // every lane of the warp stays for the shuffles
      quant_x_q8_lanes(v[u], b, b < nb, sub, xq, xd, xs16);
    }
  }
}
#endif

// One 16-byte chunk c for R rows with the int8 activations: integer dots by dp4a (exact), then
// acc[i] += (s_i * d_x) * float(dot + code_offset * sum q) (+ (m_i * d_x) * float(sum q)).
//   Int4: chunk c = group c = x block c; code word q's low nibbles pair with xq[32c + 4q ..], its high nibbles with
//         xq[32c + 16 + 4q ..] (two 16-byte xq loads per chunk, shared by the R rows).
//   Int8: chunk c = x[16c .. 16c+15], half of x block c / 2 (one 16-byte xq load); codes are signed int8 already.
// x's int8 form (quant_x_q8_block's output) is read with plain loads: shared memory on the device (each block
// quantizes x once, quant_gemv_warp_kernel), host arrays in the emulation.
struct QuantXq8 {
  const int8_t* q;   // [k], 16-byte aligned
  const float* d;    // [k / 32]
  const int* s16;    // [k / 16]
};
template <bool kInt4, bool kTwoLevel, bool kHasMin, int R>
QHD void quant_chunk_dp4a(const uint4 (&w)[R], const uint2 (&raw)[R], const QuantXq8& xq, int c, const int code_offset,
                          float (&acc)[R]) {
  const uint4* xq16 = reinterpret_cast<const uint4*>(xq.q);
  if (kInt4) {
    const uint4 xlo = xq16[2 * c], xhi = xq16[2 * c + 1];
    const float dx = xq.d[c];
    const int qsum = xq.s16[2 * c] + xq.s16[2 * c + 1];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      // High nibbles in place (16 * code as an unsigned byte): one AND per word instead of a shift and an AND; the
      // exact integer sum is 16 times theirs.
      int dlo = 0, dhi16 = 0;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint32_t v = quant_word(w[i], q);
        dlo = quant_dp4a(v & 0x0F0F0F0Fu, quant_word(xlo, q), dlo);
        dhi16 = quant_dp4a_us(v & 0xF0F0F0F0u, quant_word(xhi, q), dhi16);
      }
      const int dot = dlo + (dhi16 >> 4);
      acc[i] = fmaf(quant_scale<kTwoLevel>(raw[i]) * dx, float(dot + code_offset * qsum), acc[i]);
      if (kHasMin) acc[i] = fmaf(quant_min<kTwoLevel>(raw[i]) * dx, float(qsum), acc[i]);
    }
  } else {
    const uint4 xv = xq16[c];
    const float dx = xq.d[c >> 1];
    const int qsum = kHasMin ? xq.s16[c] : 0;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      int dot = 0;
#pragma unroll
      for (int q = 0; q < 4; ++q) dot = quant_dp4a(quant_word(w[i], q), quant_word(xv, q), dot);
      acc[i] = fmaf(quant_scale<kTwoLevel>(raw[i]) * dx, float(dot), acc[i]);
      if (kHasMin) acc[i] = fmaf(quant_min<kTwoLevel>(raw[i]) * dx, float(qsum), acc[i]);
    }
  }
}

// ---- per-lane bodies -------------------------------------------------------------------------------------------------

// Where warp `warp` of block `block` works (warp and as-stored mappings): row group rg = block * (8 / splits) +
// warp / splits (rows rg * rows_per_warp ..), K slice warp % splits = units [slice * slice_units, + slice_units)
// clipped to units.
struct QuantWarpCoords {
  int64_t row0;
  int slice, begin, end;
};
QHD QuantWarpCoords quant_warp_coords(int block, int warp, int splits, int slice_units, int units, int rows_per_warp) {
  QuantWarpCoords c;
  const int64_t rg = int64_t(block) * (kQuantWarpsPerBlock / splits) + warp / splits;
  c.row0 = rg * rows_per_warp;
  c.slice = warp % splits;
  const int begin = c.slice * slice_units;
  c.begin = begin < units ? begin : units;
  c.end = units - c.begin < slice_units ? units : c.begin + slice_units;
  return c;
}

// "warp" as a plain loop (the reference the host emulation runs; the device kernel, quant_gemv_warp_kernel below,
// keeps a ring of these loads across batches and row groups and sums each lane's chunks in this same order):
// lane `lane`'s partial sums acc[i] of rows row0 + i (i < R) over chunks [c_begin, c_end): lane l takes chunks
// c_begin + l + 32 * (U * batch + u); all R * U code loads (and their scales) of a batch are issued before the first
// is used; only weights are read before griddepcontrol.wait (device). Rows >= n and chunks past c_end load zeros.
// kDp4a ("warp-dp4a"): the same loads, the chunk through quant_chunk_dp4a (the int8 x of a.xq) instead.
template <bool kInt4, bool kTwoLevel, bool kHasMin, bool kVecX, int R, int U, bool kDp4a = false>
QHD void quant_warp_lane(const QuantPackedArgs& a, int64_t row0, int c_begin, int c_end, int lane, float (&acc)[R]) {
  bool row_ok[R];
  const uint4* rowp[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    row_ok[i] = row0 + i < a.n;
    rowp[i] = reinterpret_cast<const uint4*>(a.codes + (row_ok[i] ? row0 + i : 0) * a.ld_codes);
    acc[i] = 0.0f;
  }
  const int batches = (c_end - c_begin + 32 * U - 1) / (32 * U);  // warp-uniform
  bool waited = false;
  for (int b = 0; b < batches; ++b) {
    uint4 wv[U][R];
    uint2 raw[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c_begin + b * 32 * U + 32 * u + lane;
#pragma unroll
      for (int i = 0; i < R; ++i) {
        if (c < c_end && row_ok[i]) {
          wv[u][i] = quant_load_codes(rowp[i] + c);
          raw[u][i] = quant_load_scale_raw<kTwoLevel, kHasMin>(a, row0 + i, c);
        } else {
          wv[u][i] = make_uint4(0u, 0u, 0u, 0u);
          raw[u][i] = make_uint2(0u, 0u);
        }
      }
    }
    if (!waited) {
      quant_pdl_wait();  // x and y belong to the predecessor: only weights were read above
      waited = true;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c_begin + b * 32 * U + 32 * u + lane;
      if (c < c_end) {
        if constexpr (kDp4a)
          quant_chunk_dp4a<kInt4, kTwoLevel, kHasMin, R>(wv[u], raw[u], QuantXq8{a.xq, a.xd, a.xs16}, c,
                                                         a.code_offset, acc);
        else
          quant_chunk_fma<kInt4, kTwoLevel, kHasMin, R>(wv[u], raw[u], QuantXGlobal<kVecX, kInt4 ? 32 : 16>{a.x}, c,
                                                        a.bias, acc);
      }
    }
  }
  if (!waited) quant_pdl_wait();
}

// "thread": the whole of row `row` (< n), kQuantThreadUnroll chunks in flight.
template <bool kInt4, bool kTwoLevel, bool kHasMin, bool kVecX>
QHD float quant_thread_row(const QuantPackedArgs& a, int64_t row) {
  constexpr int U = kQuantThreadUnroll;
  const uint4* rowp = reinterpret_cast<const uint4*>(a.codes + row * a.ld_codes);
  float acc[1] = {0.0f};
  for (int c0 = 0; c0 < a.chunks; c0 += U) {
    uint4 wv[U][1];
    uint2 raw[U][1];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u;
      if (c < a.chunks) {
        wv[u][0] = quant_load_codes(rowp + c);
        raw[u][0] = quant_load_scale_raw<kTwoLevel, kHasMin>(a, row, c);
      } else {
        wv[u][0] = make_uint4(0u, 0u, 0u, 0u);
        raw[u][0] = make_uint2(0u, 0u);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (c0 + u < a.chunks)
        quant_chunk_fma<kInt4, kTwoLevel, kHasMin, 1>(wv[u], raw[u], QuantXGlobal<kVecX, kInt4 ? 32 : 16>{a.x},
                                                      c0 + u, a.bias, acc);
  }
  return acc[0];
}

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
template <> struct QuantBlockInfo<quant_type_id::kQ6_K> { static constexpr int bytes = 210, weights = 256; };

// sum_j w_j x_j over one block b (GGUF bytes) and its x (xb = x + block * block_weights).
template <int kType, bool kVecX>
QHD float quant_block_dot(const uint8_t* __restrict__ b, const float* __restrict__ xb) {
  using namespace quant_type_id;
  if constexpr (kType == kQ4_0) {  // fp16 d, qs[16]: (nibble - 8) * d
    const float d = quant_h2f(quant_ld16(b));
    float dot = 0.0f;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint32_t v = quant_ld32_a2(b + 2 + 4 * q);
      dot = quant_dot4(v & 0x0F0F0F0Fu, quant_load_x4<kVecX>(xb, 4 * q), kQuantU - 8.0f, dot);
      dot = quant_dot4((v >> 4) & 0x0F0F0F0Fu, quant_load_x4<kVecX>(xb, 16 + 4 * q), kQuantU - 8.0f, dot);
    }
    return d * dot;
  } else if constexpr (kType == kQ4_1) {  // fp16 d, fp16 m, qs[16]: nibble * d + m
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
  } else if constexpr (kType == kQ5_0) {  // fp16 d, qh[4], qs[16]: (q5 - 16) * d
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
  } else if constexpr (kType == kQ5_1) {  // fp16 d, fp16 m, qh[4], qs[16]: q5 * d + m
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
  } else if constexpr (kType == kQ8_0) {  // fp16 d, int8 qs[32]: q * d
    const float d = quant_h2f(quant_ld16(b));
    float dot = 0.0f;
#pragma unroll
    for (int q = 0; q < 8; ++q)
      dot = quant_dot4(quant_ld32_a2(b + 2 + 4 * q) ^ 0x80808080u, quant_load_x4<kVecX>(xb, 4 * q), kQuantU - 128.0f, dot);
    return d * dot;
  } else if constexpr (kType == kQ4_K) {
    // fp16 d, fp16 dmin, scales[12] (get_scale_min_k4), qs[128]: sub-block 2c = low nibbles of qs[32c .. 32c+31]
    // (weights 64c .. 64c+31), 2c+1 = their high nibbles (64c+32 ..); w = (d * sc) * q - (dmin * m).
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
        const uint32_t v = quant_ld32_a4(b + 16 + 32 * c + 4 * t);
        const float4 xl = quant_load_x4<kVecX>(xb, 64 * c + 4 * t);
        const float4 xh = quant_load_x4<kVecX>(xb, 64 * c + 32 + 4 * t);
        dlo = quant_dot4(v & 0x0F0F0F0Fu, xl, kQuantU, dlo);
        dhi = quant_dot4((v >> 4) & 0x0F0F0F0Fu, xh, kQuantU, dhi);
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
  } else {
    static_assert(kType == kQ6_K, "unknown block type");
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

// ---- the kernels shared by two mappings --------------------------------------------------------------------------

#if defined(__CUDACC__)
// The "warp" and "warp-dp4a" kernel (kernels/quant/gemv_quant_warp.cu, gemv_quant_warp_dp4a.cu). Warp lane j (splits warps
// of one block, one K slice each) walks row groups [j * groups / lanes, (j + 1) * groups / lanes) of R rows. A ring of
// U slots per row: slot u holds, for each row of the group, the 16-byte code chunk c_begin + lane + 32 * (U * b + u)
// of batch b and its scale words; as soon as slot u of this batch is used it is refilled with slot u of the next
// batch, or of batch 0 of the next group, so R * U loads stay in flight across batches and row groups (the reduction
// of a finished group runs under the next group's loads). A lane's chunks are summed in the same order as
// quant_warp_lane's (the host emulation's reference), so a row's per-lane sums are identical. Only weights are read
// before griddepcontrol.wait; then a shuffle reduction per row and, with split-K (one group per lane), a sum of the
// slices in order through shared memory (deterministic, no atomics).
template <bool kInt4, bool kTwoLevel, bool kHasMin, bool kVecX, bool kDp4a, bool kSmemX = false>
__global__ void __launch_bounds__(kQuantGemvThreads, kQuantWarpMinBlocks) quant_gemv_warp_kernel(QuantPackedArgs a) {
  constexpr int R = kQuantWarpRows, U = kQuantWarpUnroll;
  __shared__ float slice_sums[kQuantWarpsPerBlock][R];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int splits = a.splits;
  const int64_t j = int64_t(blockIdx.x) * (kQuantWarpsPerBlock / splits) + warp / splits;
  const int slice = warp % splits;
  const int c_begin = min(a.chunks, slice * a.slice_units);
  const int c_end = min(a.chunks, c_begin + a.slice_units);
  const int batches = max(1, (c_end - c_begin + 32 * U - 1) / (32 * U));
  const int64_t g_begin = j < a.lanes ? j * a.groups / a.lanes : 0;
  const int64_t g_end = j < a.lanes ? (j + 1) * a.groups / a.lanes : 0;
  pdl_launch_dependents();

  uint4 wv[U][R];
  uint2 raw[U][R];
  // Slot u of batch b of group g; zeros past the slice, past n and past the lane's run (no checks in the dots).
  auto fill = [&](int64_t g, int b, int u) {
    const int c = c_begin + b * 32 * U + 32 * u + lane;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int64_t row = g * R + i;
      if (g < g_end && c < c_end && row < a.n) {
        wv[u][i] = quant_load_codes(reinterpret_cast<const uint4*>(a.codes + row * a.ld_codes) + c);
        raw[u][i] = quant_load_scale_raw<kTwoLevel, kHasMin>(a, row, c);
      } else {
        wv[u][i] = make_uint4(0u, 0u, 0u, 0u);
        raw[u][i] = make_uint2(0u, 0u);
      }
    }
  };
#pragma unroll
  for (int u = 0; u < U; ++u) fill(g_begin, 0, u);
  pdl_wait();  // x and y belong to the predecessor: only weights were read above

  // warp-dp4a: the block quantizes x to int8 per 32 into shared memory (quant_x_q8_block, one thread per block of 32)
  // while the ring's first loads are in flight: no separate launch, no scratch, and the dots read x from shared memory.
  extern __shared__ __align__(16) unsigned char quant_x_smem[];
  QuantXq8 xq{nullptr, nullptr, nullptr};
  if constexpr (kDp4a) {
    const int k = a.chunks * (kInt4 ? 32 : 16);
    int8_t* sq = reinterpret_cast<int8_t*>(quant_x_smem);
    float* sd = reinterpret_cast<float*>(quant_x_smem + quant_x_smem_offset_d(k));
    int* ss = reinterpret_cast<int*>(quant_x_smem + quant_x_smem_offset_s16(k));
    quant_x_q8_block_warps(a.x, k, sq, sd, ss, warp, lane);
    __syncthreads();
    xq = QuantXq8{sq, sd, ss};
  }
  // "warp" with kSmemX: the block stages x in shared memory transposed to float4 [W / 4][chunks] (QuantXShared), read
  // coalesced from x once; the dots then read it conflict-free instead of 32 L1 sectors per request.
  const QuantXShared xsh{reinterpret_cast<const float4*>(quant_x_smem), a.chunks};
  if constexpr (!kDp4a && kSmemX) {
    constexpr int kWords = kInt4 ? 8 : 4;  // float4 words per chunk
    float4* sp = reinterpret_cast<float4*>(quant_x_smem);
    for (int i = threadIdx.x; i < a.chunks * kWords; i += kQuantGemvThreads)
      sp[(i % kWords) * a.chunks + i / kWords] = quant_load_x4<kVecX>(a.x, int64_t(i) * 4);
    __syncthreads();
  }

  float acc[R];
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = 0.0f;
  int64_t g = g_begin;
  int b = 0;
  while (g < g_end) {
    int next_b = b + 1;
    int64_t next_g = g;
    if (next_b == batches) {
      next_b = 0;
      ++next_g;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c_begin + b * 32 * U + 32 * u + lane;
      if (c < c_end) {
        if constexpr (kDp4a)
          quant_chunk_dp4a<kInt4, kTwoLevel, kHasMin, R>(wv[u], raw[u], xq, c, a.code_offset, acc);
        else
          if constexpr (kSmemX)
            quant_chunk_fma<kInt4, kTwoLevel, kHasMin, R>(wv[u], raw[u], xsh, c, a.bias, acc);
          else
            quant_chunk_fma<kInt4, kTwoLevel, kHasMin, R>(wv[u], raw[u], QuantXGlobal<kVecX, kInt4 ? 32 : 16>{a.x}, c,
                                                          a.bias, acc);
      }
      fill(next_g, next_b, u);
    }
    if (next_b == 0) {  // group g is complete; the next group's first batch is already in flight
      const float mine = warp_sum_rows(acc, lane);  // lane i < R keeps row g * R + i
      const int64_t row = g * R + lane;
      if (lane < R && row < a.n) {
        if (splits == 1)
          a.y[row] = a.accumulate ? a.y[row] + mine : mine;
        else
          slice_sums[warp][lane] = mine;
      }
    }
    g = next_g;
    b = next_b;
  }
  if (splits > 1) {  // block-uniform branch: every thread reaches the barrier; a split lane owns one group
    __syncthreads();
    const int64_t row = g_begin * R + lane;
    if (slice == 0 && g_begin < g_end && lane < R && row < a.n) {
      float s = 0.0f;
      for (int i = 0; i < splits; ++i) s += slice_sums[warp + i][lane];
      a.y[row] = a.accumulate ? a.y[row] + s : s;
    }
  }
}
#endif

// The code -> value bias: 2^23 (+ 128 for the XOR-biased int8 codes), minus code_offset.
inline float quant_code_bias(QuantCodeFamily family, int code_offset) {
  return -(8388608.0f + (family == QuantCodeFamily::Int8 ? 128.0f : 0.0f)) + float(code_offset);
}

// Host: the kernel arguments of w for a prepacked-plane launch.
inline QuantPackedArgs quant_packed_args(const QuantGemvWeight& w, const QuantGemvPlan& plan, const float* x, float* y,
                                         bool accumulate) {
  QuantPackedArgs a;
  a.codes = w.codes;
  a.scales = w.scales;
  a.mins = w.mins;
  a.sub_scales = w.sub_scales;
  a.sub_mins = w.sub_mins;
  a.super_d = w.super_d;
  a.super_dmin = w.super_dmin;
  a.ld_codes = w.ld_codes;
  a.ld_groups = w.ld_groups;
  a.ld_sub = w.ld_sub;
  a.ld_super = w.ld_super;
  a.n = int(w.n);
  a.chunks = quant_gemv_chunks(w);
  a.group_shift = (w.family == QuantCodeFamily::Int8 && w.group == 32) ? 1 : 0;
  a.super_shift = !w.two_level ? 0 : w.groups_per_super == 8 ? 3 : 4;
  a.splits = plan.splits;
  a.slice_units = plan.slice_units;
  a.groups = plan.row_groups;
  a.lanes = plan.lanes;
  a.bias = quant_code_bias(w.family, w.code_offset);
  a.code_offset = w.code_offset;
  a.x = x;
  a.y = y;
  a.accumulate = accumulate ? 1 : 0;
  a.xq = nullptr;
  a.xd = nullptr;
  a.xs16 = nullptr;
  return a;
}

}  // namespace llm
