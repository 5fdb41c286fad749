// quant_dequantize_bf16 (kernels/quant/gemv_quant.h): one thread per 8 weights of a row, one 16-byte store each.
#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/quant/gemv_quant.h"
#include "kernels/quant/quant_dequant.h"

namespace llm {
namespace {

__global__ void quant_dequantize_bf16_kernel(QuantGemvWeight w, uint16_t* __restrict__ out, int64_t ld_out) {
  const int64_t per_row = w.k / 8;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= w.n * per_row) return;
  const int64_t r = t / per_row, j0 = (t % per_row) * 8;
  float v[8];
  quant_plane_weights8(w, r, j0, v);
  uint32_t h[4];
  for (int i = 0; i < 4; ++i) h[i] = uint32_t(f32_to_bf16(v[2 * i])) | uint32_t(f32_to_bf16(v[2 * i + 1])) << 16;
  *reinterpret_cast<uint4*>(out + r * ld_out + j0) = make_uint4(h[0], h[1], h[2], h[3]);
}

}  // namespace

void quant_dequantize_bf16(const QuantGemvWeight& w, uint16_t* out, int64_t ld_out, cudaStream_t stream) {
  const QuantTypeTraits t = quant_type_traits(w.type_id);
  if (!quant_gemv_has_planes(QuantGemvKind::Warp, w))
    fail("quant_dequantize_bf16: the ", t.name, " matrix [", w.n, ", ", w.k, "] has no prepacked planes");
  if (w.k % 8 != 0 || ld_out < w.k || ld_out % 8 != 0 || (reinterpret_cast<uintptr_t>(out) & 15) != 0)
    fail("quant_dequantize_bf16: ", t.name, " [", w.n, ", ", w.k, "] into rows of ", ld_out,
         " (need ld_out >= k, both multiples of 8, out 16-byte aligned)");
  const int64_t threads = w.n * (w.k / 8);
  if (threads == 0) return;
  const int block = 256;
  quant_dequantize_bf16_kernel<<<unsigned((threads + block - 1) / block), block, 0, stream>>>(w, out, ld_out);
  CUDA_CHECK_LAUNCH("quant_dequantize_bf16_kernel");
}

}  // namespace llm
