// Rotary position embedding, interleaved pairs (2i, 2i+1), positions read from device memory.
// Numerics follow the CPU reference: angle = float(pos) * inv_freq[i] in FP32 (one rounding, identical bits on both
// sides), then the precise sincosf (no fast-math; large angles use full range reduction, as std::sin/std::cos do),
// so GPU and CPU differ only by the few-ulp error of the two sin/cos libraries and FMA contraction.
#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/ops.h"

namespace llm {
namespace {

// q [n_tokens, n_heads, head_dim], k [n_tokens, n_kv_heads, head_dim]; one thread per pair.
__global__ void rope_kernel(float* __restrict__ q, float* __restrict__ k, const float* __restrict__ inv_freq,
                            const int* __restrict__ d_pos0, int n_tokens, int n_heads, int n_kv_heads, int head_dim) {
  const int half = head_dim / 2;
  const int64_t per_token = int64_t(n_heads + n_kv_heads) * half;
  const int64_t total = per_token * n_tokens;
  const int pos0 = *d_pos0;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int t = int(idx / per_token);
    const int r = int(idx - int64_t(t) * per_token);
    const int head = r / half, i = r - head * half;
    float* x = head < n_heads ? q + (int64_t(t) * n_heads + head) * head_dim
                              : k + (int64_t(t) * n_kv_heads + (head - n_heads)) * head_dim;
    const float a = float(pos0 + t) * inv_freq[i];
    float s, c;
    sincosf(a, &s, &c);
    const float x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = x0 * c - x1 * s;
    x[2 * i + 1] = x0 * s + x1 * c;
  }
}

}  // namespace

void rope(float* q, float* k, const float* inv_freq, const int* d_pos0, int n_tokens, int n_heads, int n_kv_heads,
          int head_dim, cudaStream_t s) {
  if (n_tokens < 0 || n_heads < 0 || n_kv_heads < 0 || head_dim <= 0 || head_dim % 2 != 0)
    fail("rope: invalid shape n_tokens ", n_tokens, ", n_heads ", n_heads, ", n_kv_heads ", n_kv_heads,
         ", head_dim ", head_dim, " (head_dim must be even)");
  const int64_t total = int64_t(n_tokens) * (n_heads + n_kv_heads) * (head_dim / 2);
  if (total == 0) return;
  const int threads = 256;
  const int64_t blocks = (total + threads - 1) / threads;
  rope_kernel<<<unsigned(blocks < 65536 ? blocks : 65536), threads, 0, s>>>(q, k, inv_freq, d_pos0, n_tokens, n_heads,
                                                                            n_kv_heads, head_dim);
  CUDA_CHECK_LAUNCH("rope_kernel");
}

}  // namespace llm
