// quant_dequantize_bf16 (kernels/quant/gemv_quant.h): one thread per chunk of codes (16 bytes; Q5_K/Q6_K 8 + 2 or 4).
#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/quant/gemv_quant.h"
#include "kernels/quant/quant_dequant.h"

namespace llm {
namespace {

// One thread per 16-byte chunk of codes: one 16-byte load, the group's scale, 32 (Int4) or 16 (Int8) weights out in
// four or two 16-byte stores. Consecutive threads take consecutive chunks of a row: loads and stores coalesce.
template <bool kInt4>
__global__ void quant_dequantize_bf16_kernel(QuantGemvWeight w, uint16_t* __restrict__ out, int64_t ld_out) {
  constexpr int per = kInt4 ? 32 : 16;
  const int64_t chunks = w.k / per;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= w.n * chunks) return;
  const int64_t r = t / chunks, c = t % chunks;
  uint32_t words[4];
  quant_plane_chunk_words(w, r, c, words);
  float f[32];
  quant_plane_chunk<kInt4>(w, r, c, words, f);
  uint4* dst = reinterpret_cast<uint4*>(out + r * ld_out + c * per);
#pragma unroll
  for (int q = 0; q < per / 8; ++q) {
    uint32_t h[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      h[i] = uint32_t(f32_to_bf16(f[8 * q + 2 * i])) | uint32_t(f32_to_bf16(f[8 * q + 2 * i + 1])) << 16;
    dst[q] = make_uint4(h[0], h[1], h[2], h[3]);
  }
}

}  // namespace

void quant_dequantize_bf16(const QuantGemvWeight& w, uint16_t* out, int64_t ld_out, cudaStream_t stream) {
  const QuantTypeTraits t = quant_type_traits(w.type_id);
  if (!quant_gemv_has_planes(QuantGemvKind::Warp, w))
    fail("quant_dequantize_bf16: the ", t.name, " matrix [", w.n, ", ", w.k, "] has no prepacked planes");
  if (w.k % 8 != 0 || ld_out < w.k || ld_out % 8 != 0 || (reinterpret_cast<uintptr_t>(out) & 15) != 0)
    fail("quant_dequantize_bf16: ", t.name, " [", w.n, ", ", w.k, "] into rows of ", ld_out,
         " (need ld_out >= k, both multiples of 8, out 16-byte aligned)");
  const int64_t threads = w.n * (w.k / quant_chunk_weights(w));
  if (threads == 0) return;
  const int block = 256;
  const unsigned grid = unsigned((threads + block - 1) / block);
  if (w.family == QuantCodeFamily::Int4)
    quant_dequantize_bf16_kernel<true><<<grid, block, 0, stream>>>(w, out, ld_out);
  else
    quant_dequantize_bf16_kernel<false><<<grid, block, 0, stream>>>(w, out, ld_out);
  CUDA_CHECK_LAUNCH("quant_dequantize_bf16_kernel");
}

}  // namespace llm
