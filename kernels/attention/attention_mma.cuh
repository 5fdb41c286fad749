// Tensor-core building blocks of the attention kernels (kernels/attention/attention_tc.cu): BF16 mma.sync m16n8k16 with FP32
// accumulators, ldmatrix from padded shared-memory tiles, cp.async with zero fill. Device code only (sm_80+).
//
// Fragment layouts of mma.m16n8k16 (lane = threadIdx.x % 32, r = lane / 4, c = (lane % 4) * 2):
//   A (16 x 16, row major), four 32-bit registers of two BF16 each: a0 = (r, c..c+1), a1 = (r+8, c..c+1),
//     a2 = (r, c+8..c+9), a3 = (r+8, c+8..c+9);
//   B (16 x 8, k x n), two registers: b0 = (k = c..c+1, n = r), b1 = (k = c+8..c+9, n = r);
//   C (16 x 8, FP32), four floats: (r, c), (r, c+1), (r+8, c), (r+8, c+1).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace llm {
namespace attn {

// d += a * b
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a * b, FP16 inputs (the FP8 cache's path: E4M3 codes are FP16 values up to a power of two).
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The tensor-core input type of a kernel: BF16 (the BF16 cache) or FP16 (the FP8 cache).
template <bool kF16>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if (kF16)
    mma_f16(d, a, b0, b1);
  else
    mma_bf16(d, a, b0, b1);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 BF16 matrices; lane i gives the address of row i % 8 of matrix i / 8 (16 contiguous bytes).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

// The same, each matrix delivered transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

// 16 bytes global -> shared, asynchronously; valid == false writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
// 4 bytes global -> shared (a scale), asynchronously; valid == false writes zeros.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Two floats as BF16x2 (x in the low half), round to nearest even.
__device__ __forceinline__ uint32_t pack_bf16(float x, float y) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// x = hi + lo with hi, lo BF16: the pair carries ~16 mantissa bits, so an FP32 operand loses almost nothing on the
// BF16 tensor cores (two mma instead of one).
__device__ __forceinline__ void split_bf16(float x, float y, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  const float2 hf = __bfloat1622float2(h);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = pack_bf16(x - hf.x, y - hf.y);
}

// Two floats as FP16x2 (x in the low half), round to nearest even; and as two FP16 terms (hi + lo: ~22 bits).
__device__ __forceinline__ uint32_t pack_f16(float x, float y) {
  const __half2 v = __floats2half2_rn(x, y);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ void split_f16(float x, float y, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(x, y);
  const float2 hf = __half22float2(h);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = pack_f16(x - hf.x, y - hf.y);
}

template <bool kF16>
__device__ __forceinline__ uint32_t pack(float x, float y) {
  return kF16 ? pack_f16(x, y) : pack_bf16(x, y);
}
template <bool kF16>
__device__ __forceinline__ void split(float x, float y, uint32_t& hi, uint32_t& lo) {
  if (kF16)
    split_f16(x, y, hi, lo);
  else
    split_bf16(x, y, hi, lo);
}

// Two E4M3 codes (the first in the low byte) as FP16x2: exact (every E4M3 value, subnormals and NaN included, is an
// FP16 value), one cvt.rn.f16x2.e4m3x2 instruction.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}


}  // namespace attn
}  // namespace llm
