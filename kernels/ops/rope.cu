// Rotary position embedding, interleaved pairs (2i, 2i+1), positions read from device memory; alone, or fused with
// the KV-cache store (rope_kv_store: one launch per layer instead of two).
// Numerics follow the CPU reference: angle = float(pos) * inv_freq[i] in FP32 (one rounding, identical bits on both
// sides), then the precise sincosf (no fast-math; large angles use full range reduction, as std::sin/std::cos do),
// so GPU and CPU differ only by the few-ulp error of the two sin/cos libraries and FMA contraction.
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/rope_device.cuh"  // rotate_pair

namespace llm {
namespace {

// rotate_pair (kernels/ops/rope_device.cuh): shared by both kernels here and by rope_kv_store_fp8 (kernels/attention/kv_fp8.cu) so
// they agree bit for bit.

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
    const float2 y = rotate_pair(x[2 * i], x[2 * i + 1], pos0 + t, inv_freq[i]);
    x[2 * i] = y.x;
    x[2 * i + 1] = y.y;
  }
}

// One thread per pair: q pairs (rotated in place), then k pairs (rotated into k_cache), then v pairs (copied into
// v_cache), per token. Caches [ctx, kv_dim] BF16, rows *d_pos0 + t.
__global__ void rope_kv_store_kernel(float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                                     const float* __restrict__ inv_freq, const int* __restrict__ d_pos0, int n_tokens,
                                     int n_heads, int n_kv_heads, int head_dim, uint16_t* __restrict__ kc,
                                     uint16_t* __restrict__ vc, int64_t stride) {
  // The token axis (grid y; kernels/ops/token_axis.h): token y's q, k, v and position are `stride` bytes on.
  q = token_ptr(q, stride, int(blockIdx.y));
  k = token_ptr(k, stride, int(blockIdx.y));
  v = token_ptr(v, stride, int(blockIdx.y));
  d_pos0 = token_ptr(d_pos0, stride, int(blockIdx.y));
  const int half = head_dim / 2;
  const int64_t q_pairs = int64_t(n_heads) * half, kv_pairs = int64_t(n_kv_heads) * half;
  const int64_t per_token = q_pairs + 2 * kv_pairs;
  const int64_t total = per_token * n_tokens;
  const int64_t kv_dim = int64_t(n_kv_heads) * head_dim;
  const int pos0 = *d_pos0;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int t = int(idx / per_token);
    int64_t r = idx - int64_t(t) * per_token;
    if (r < q_pairs) {
      const int head = int(r / half), i = int(r - int64_t(head) * half);
      float* x = q + (int64_t(t) * n_heads + head) * head_dim;
      const float2 y = rotate_pair(x[2 * i], x[2 * i + 1], pos0 + t, inv_freq[i]);
      x[2 * i] = y.x;
      x[2 * i + 1] = y.y;
      continue;
    }
    r -= q_pairs;
    uint16_t* row_k = kc + int64_t(pos0 + t) * kv_dim;
    uint16_t* row_v = vc + int64_t(pos0 + t) * kv_dim;
    if (r < kv_pairs) {
      const int head = int(r / half), i = int(r - int64_t(head) * half);
      const int64_t c = int64_t(head) * head_dim + 2 * i;
      const float* x = k + int64_t(t) * kv_dim + c;
      const float2 y = rotate_pair(x[0], x[1], pos0 + t, inv_freq[i]);
      row_k[c] = f32_to_bf16(y.x);
      row_k[c + 1] = f32_to_bf16(y.y);
    } else {
      const int64_t c = 2 * (r - kv_pairs);
      const float* x = v + int64_t(t) * kv_dim + c;
      row_v[c] = f32_to_bf16(x[0]);
      row_v[c + 1] = f32_to_bf16(x[1]);
    }
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

void rope_kv_store(float* q, const float* k, const float* v, const float* inv_freq, const int* d_pos0, int n_tokens,
                   int n_heads, int n_kv_heads, int head_dim, uint16_t* k_cache, uint16_t* v_cache, cudaStream_t s,
                   TokenAxis tok) {
  if (n_tokens < 0 || n_heads < 0 || n_kv_heads < 0 || head_dim <= 0 || head_dim % 2 != 0)
    fail("rope_kv_store: invalid shape n_tokens ", n_tokens, ", n_heads ", n_heads, ", n_kv_heads ", n_kv_heads,
         ", head_dim ", head_dim, " (head_dim must be even)");
  const int64_t total = int64_t(n_tokens) * (n_heads + 2 * n_kv_heads) * (head_dim / 2);
  if (total == 0) return;
  const int threads = 256;
  const int64_t blocks = (total + threads - 1) / threads;
  if (tok.many() && n_tokens != 1) fail("rope_kv_store: a token axis runs one token per slab, found ", n_tokens);
  const dim3 grid{unsigned(blocks < 65536 ? blocks : 65536), unsigned(tok.n)};
  rope_kv_store_kernel<<<grid, threads, 0, s>>>(q, k, v, inv_freq, d_pos0, n_tokens, n_heads, n_kv_heads, head_dim,
                                                k_cache, v_cache, tok.stride);
  CUDA_CHECK_LAUNCH("rope_kv_store_kernel");
}

}  // namespace llm
