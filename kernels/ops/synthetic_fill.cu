// Synthetic BF16 weights generated in place on the device, bit-identical to HostTensor::read_rows_bf16
// (models/tensor.cpp): element (r, c) = bf16(rng_value(seed, id, file_row(r) * cols + c, offset, scale)).
#include "core/counter_rng.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/ops/ops.h"

namespace llm {
namespace {

// HostTensor::file_row: engine row r of a rotate-half checkpoint reads file row h*hd + (i&1)*hd/2 + i/2.
__device__ __forceinline__ int64_t file_row(int64_t r, int rope_head_dim) {
  if (!rope_head_dim) return r;
  const int64_t hd = rope_head_dim, h = r / hd, i = r - h * hd;
  return h * hd + (i & 1) * (hd / 2) + (i >> 1);
}

// rng_value with every FP32 operation rounded separately: nvcc would otherwise contract scale*x + offset into an FMA
// and differ from the host in the last bit (the host build targets x86-64 without FMA contraction).
__device__ __forceinline__ float rng_value_rn(uint64_t seed, uint64_t id, uint64_t index, float offset, float scale) {
  const float unit = rng_unit(seed, id, index);  // (u >> 40) * 2^-24: exact
  return __fadd_rn(offset, __fmul_rn(scale, __fsub_rn(__fmul_rn(2.0f, unit), 1.0f)));
}

// out [rows, cols] BF16 in engine row order.
__global__ void fill_kernel(uint16_t* __restrict__ out, int64_t rows, int64_t cols, uint64_t seed, uint64_t id,
                            float offset, float scale, int rope_head_dim) {
  const int64_t n = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const uint64_t index = uint64_t(file_row(r, rope_head_dim) * cols + c);
    out[i] = f32_to_bf16(rng_value_rn(seed, id, index, offset, scale));
  }
}

}  // namespace

void fill_synthetic_bf16(uint16_t* out, int64_t rows, int64_t cols, uint64_t seed, uint64_t tensor_id, float offset,
                         float scale, int rope_head_dim, cudaStream_t s) {
  if (rows < 0 || cols < 0) fail("fill_synthetic_bf16: invalid shape [", rows, ", ", cols, "]");
  if (rope_head_dim < 0 || rope_head_dim % 2 != 0 || (rope_head_dim && rows % rope_head_dim != 0))
    fail("fill_synthetic_bf16: rope_head_dim ", rope_head_dim, " must be 0 or an even divisor of rows (", rows, ")");
  const int64_t n = rows * cols;
  if (n == 0) return;
  const int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 16384) blocks = 16384;
  fill_kernel<<<unsigned(blocks), threads, 0, s>>>(out, rows, cols, seed, tensor_id, offset, scale, rope_head_dim);
  CUDA_CHECK_LAUNCH("fill_kernel");
}

}  // namespace llm
