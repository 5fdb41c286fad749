// The quantized GEMV's per-chunk arithmetic (kernels/quant/gemv_quant_*.cu, and the persistent kernel's quantized
// stages): host/device shims, the prepacked-plane kernel arguments, scale loads and decoding (bit for bit as
// models/quant.cpp's group_scale/group_min), code -> float conversion, the per-chunk FP32 and dp4a dots, and x's int8
// form for warp-dp4a. Everything a lane computes is __host__ __device__ (QHD): on the host the loads are plain reads, so
// tests/gpu/gemv_quant_test.cu runs the very same code on the CPU (no device needed) and checks it against the FP64
// reference. Included through kernels/quant/gemv_quant_device.cuh.
#pragma once
#include <cstdint>
#include <cstring>

#include <cuda_fp16.h>

#include "core/dtype.h"             // bits_to_f32; f16_to_f32 (host path)
#include "kernels/gemv/gemv_device.cuh"  // load_weights_streaming, warp_sum
#include "kernels/gemv/gemv_epilogue.cuh"  // GemvEpilogue, gemv_store_row
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

// a * b rounded once, never contracted into an FMA (core/dtype.h mul_rn).
QHD float quant_mul_rn(float a, float b) { return mul_rn(a, b); }

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

// 8, 4 or 2 code bytes (T = uint2, uint32_t, unsigned short: the split planes of Q5_K and Q6_K): the same streaming
// loads, narrower.
template <typename T>
QHD T quant_load_narrow(const uint8_t* p) {
  T v;
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 8)
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  else if constexpr (sizeof(T) == 4)
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
#else
  std::memcpy(&v, p, sizeof(T));
#endif
  return v;
}

// One 16-byte code chunk (chunk c of row `row`) as a ring slot holds it: loaded with load(), turned into the 16 codes
// the dots take (a uint4: 32 nibbles, or 16 int8) only where used, so a refill issues its loads and moves on.
// kHiBits 0: the 16 bytes as stored. 1, 2 (Q5_K, Q6_K, core/quant_planes.h): 8 bytes of nibbles and 2 or 4 bytes of
// high bits, widened to the int8 codes by quant_split_word.
template <int kHiBits>
struct QuantCodeSlot {
  uint2 lo;
  uint32_t hi;
  QHD void load(const QuantPlanes& p, int64_t row, int c) {
    lo = quant_load_narrow<uint2>(p.codes + row * p.ld_codes + 8 * int64_t(c));
    const uint8_t* h = p.code_hi + row * p.ld_hi + kHiBits * 2 * int64_t(c);
    if constexpr (kHiBits == 2)
      hi = quant_load_narrow<uint32_t>(h);
    else
      hi = quant_load_narrow<unsigned short>(h);
  }
  QHD void zero() {
    lo = make_uint2(0u, 0u);
    hi = 0u;
  }
  QHD uint4 codes() const {
    return make_uint4(quant_split_word<kHiBits>(lo.x, lo.y, hi, 0), quant_split_word<kHiBits>(lo.x, lo.y, hi, 1),
                      quant_split_word<kHiBits>(lo.x, lo.y, hi, 2), quant_split_word<kHiBits>(lo.x, lo.y, hi, 3));
  }
};
template <>
struct QuantCodeSlot<0> {
  uint4 v;
  QHD void load(const QuantPlanes& p, int64_t row, int c) {
    v = quant_load_codes(reinterpret_cast<const uint4*>(p.codes + row * p.ld_codes) + c);
  }
  QHD void zero() { v = make_uint4(0u, 0u, 0u, 0u); }
  QHD uint4 codes() const { return v; }
};
// The slot of a kernel form (kInt4, kTwoLevel, kHasMin): split for Q5_K and Q6_K.
template <bool kInt4, bool kTwoLevel, bool kHasMin>
using QuantCodes = QuantCodeSlot<quant_split_hi_bits(kInt4, kTwoLevel, kHasMin)>;

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

// Arguments of the prepacked-plane kernels (warp, thread, warp-dp4a): the planes and pitches (QuantPlanes,
// core/quant_planes.h, first, so the layout is the planes' own) and what the kernels derive from the type and plan.
struct QuantPackedArgs : QuantPlanes {
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
  GemvEpilogue ep;               // the RMSNorm fold (kernels/gemv/gemv_epilogue.h)
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

// A Q4_K/Q5_K super-block head (core/quant_planes.h k_heads): 16 bytes, one load (read-only path on the device).
QHD uint4 quant_load_head(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(reinterpret_cast<const uint4*>(p));
#else
  uint4 v;
  std::memcpy(&v, p, 16);
  return v;
#endif
}

// The head of chunk c of row r (its group c >> group_shift is group (c >> group_shift) & 7 of that head).
QHD const uint8_t* quant_head_at(const QuantPackedArgs& a, int64_t r, int c) {
  return a.k_heads + r * a.ld_heads + 16 * ((c >> a.group_shift) >> 3);
}

// The raw scale words of group j (0..7) of a head: .x = sc | fp16 d << 16, .y = m | fp16 dmin << 16.
QHD uint2 quant_head_raw(const uint4& h, int j) {
  uint32_t sc, m;
  k_head_scale_min(h.y, h.z, h.w, j, &sc, &m);
  return make_uint2(sc | (h.x << 16), m | (h.x & 0xffff0000u));
}

// The raw scale words of chunk c of row r, loaded with the codes so both are in flight together:
//   one-level: .x = fp16 s, .y = fp16 m;  two-level: .x = sub_scale byte | fp16 d << 16, .y = sub_min | fp16 dmin << 16
//   (Q4_K, Q5_K: one 16-byte head load, quant_head_raw; Q6_K: the sub-scale and d, two loads).
template <bool kTwoLevel, bool kHasMin>
QHD uint2 quant_load_scale_raw(const QuantPackedArgs& a, int64_t r, int c) {
  const int g = c >> a.group_shift;
  uint2 raw = make_uint2(0u, 0u);
  if (!kTwoLevel) {
    raw.x = quant_ldg(a.scales + r * a.ld_groups + g);
    if (kHasMin) raw.y = quant_ldg(a.mins + r * a.ld_groups + g);
  } else if (kHasMin) {
    raw = quant_head_raw(quant_load_head(quant_head_at(a, r, c)), g & 7);
  } else {
    const int64_t sub = r * a.ld_sub + g, sup = r * a.ld_super + (g >> a.super_shift);
    raw.x = uint32_t(quant_ldg(reinterpret_cast<const unsigned char*>(a.sub_scales) + sub)) |
            (uint32_t(quant_ldg(a.super_d + sup)) << 16);
  }
  return raw;
}

// One ring slot's scale words: the raw words (quant_load_scale_raw), or for Q4_K/Q5_K (kHead) the 16-byte head as
// loaded, turned into the raw words of group j (0..7) of its super-block only where the chunk is used (words), so a
// ring refill issues its loads and moves on instead of waiting on the head to decode it.
template <bool kHead>
struct QuantScaleSlot {
  uint2 raw;
  template <bool kTwoLevel, bool kHasMin>
  QHD void load(const QuantPackedArgs& a, int64_t r, int c) { raw = quant_load_scale_raw<kTwoLevel, kHasMin>(a, r, c); }
  QHD void zero() { raw = make_uint2(0u, 0u); }
  QHD uint2 words(int) const { return raw; }
};
template <>
struct QuantScaleSlot<true> {
  uint4 head;
  template <bool kTwoLevel, bool kHasMin>
  QHD void load(const QuantPackedArgs& a, int64_t r, int c) {
    head = quant_load_head(quant_head_at(a, r, c));
  }
  QHD void zero() { head = make_uint4(0u, 0u, 0u, 0u); }
  QHD uint2 words(int j) const { return quant_head_raw(head, j); }
};

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

// Quantizes 32 values as llama.cpp's quantize_row_q8_1: d = amax / 127, q = roundf(x / d) (as x * (1 / d)), and the
// sums of q over each half, into q[0..31], *d, s16[0..1]. quant_x_q8_block, the batched GEMV's x pass and the tests'
// references run this same code.
QHD void quant_x_q8_values(const float (&v)[32], int8_t* __restrict__ q, float* __restrict__ d, int* __restrict__ s16) {
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(v[j]));
  const float dd = amax / 127.0f;
  const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
  int s0 = 0, s1 = 0;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const float t = v[j] * id;
    const int qj = int(roundf(t));
    q[j] = int8_t(qj);
    if (j < 16) s0 += qj; else s1 += qj;
  }
  *d = dd;
  s16[0] = s0;
  s16[1] = s1;
}

// x[32b .. 32b+31] through quant_x_q8_values into xq[32b ..], xd[b], xs16[2b ..]. The kernel (one thread per block)
// and the tests' reference run this same code.
QHD void quant_x_q8_block(const float* __restrict__ x, int64_t b, int8_t* __restrict__ xq, float* __restrict__ xd,
                          int* __restrict__ xs16) {
  float v[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) v[j] = quant_ldg(x + 32 * b + j);
  quant_x_q8_values(v, xq + 32 * b, xd + b, xs16 + 2 * b);
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
// The exact integer dots of one 16-byte code chunk with x's int8 form (dp4a, 4 codes at a time).
//   Int4: low nibbles with xlo's bytes, high nibbles with xhi's (the high nibbles in place, as 16 * code unsigned: one
//   AND per word instead of a shift and an AND; that sum is 16 times theirs). Int8: signed codes with xv's bytes.
QHD int quant_dot_int4(const uint4& w, const uint4& xlo, const uint4& xhi) {
  int dlo = 0, dhi16 = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int q = 0; q < 4; ++q) {
    const uint32_t v = quant_word(w, q);
    dlo = quant_dp4a(v & 0x0F0F0F0Fu, quant_word(xlo, q), dlo);
    dhi16 = quant_dp4a_us(v & 0xF0F0F0F0u, quant_word(xhi, q), dhi16);
  }
  return dlo + (dhi16 >> 4);
}
QHD int quant_dot_int8(const uint4& w, const uint4& xv) {
  int dot = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int q = 0; q < 4; ++q) dot = quant_dp4a(quant_word(w, q), quant_word(xv, q), dot);
  return dot;
}

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
      const int dot = quant_dot_int4(w[i], xlo, xhi);
      acc[i] = fmaf(quant_scale<kTwoLevel>(raw[i]) * dx, float(dot + code_offset * qsum), acc[i]);
      if (kHasMin) acc[i] = fmaf(quant_min<kTwoLevel>(raw[i]) * dx, float(qsum), acc[i]);
    }
  } else {
    // Q6_K's codes are 0..63 with code_offset -32 (core/quant_planes.h), added as code_offset * sum q: the same integer
    // as the dot of the signed codes.
    constexpr bool kOffset = quant_split_hi_bits(kInt4, kTwoLevel, kHasMin) == 2;
    const uint4 xv = xq16[c];
    const float dx = xq.d[c >> 1];
    const int qsum = kHasMin || kOffset ? xq.s16[c] : 0;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int dot = quant_dot_int8(w[i], xv) + (kOffset ? code_offset * qsum : 0);
      acc[i] = fmaf(quant_scale<kTwoLevel>(raw[i]) * dx, float(dot), acc[i]);
      if (kHasMin) acc[i] = fmaf(quant_min<kTwoLevel>(raw[i]) * dx, float(qsum), acc[i]);
    }
  }
}

}  // namespace llm
