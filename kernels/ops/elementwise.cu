// Element-wise device ops: embedding lookup, SwiGLU, residual add, FP32 <-> BF16 conversions, KV-cache store.
// All are memory-bound grid-stride loops; BF16 rounding is core/dtype.h's (round to nearest even, as the host).
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/pdl.cuh"
#include "kernels/ops/swiglu.cuh"

namespace llm {
namespace {

constexpr int kThreads = 256;

// Enough blocks to cover n once, capped (the loops are grid-stride).
unsigned grid_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : (b > 8192 ? 8192 : b));
}

#define GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < int64_t(n); i += int64_t(gridDim.x) * blockDim.x)

// table [vocab, dim] BF16, out [n_tokens, dim] FP32.
// Token axis (grid y; kernels/ops/token_axis.h): token y's tokens and out are `stride` bytes on.
__global__ void embed_kernel(const uint16_t* __restrict__ table, const int* __restrict__ tokens, int n_tokens, int dim,
                             float* __restrict__ out, int64_t stride) {
  tokens = token_ptr(tokens, stride, int(blockIdx.y));
  out = token_ptr(out, stride, int(blockIdx.y));
  GRID_STRIDE(i, int64_t(n_tokens) * dim) {
    const int64_t t = i / dim, c = i - t * dim;
    out[i] = bf16_to_f32(table[int64_t(tokens[t]) * dim + c]);
  }
}

__global__ void swiglu_kernel(const float* __restrict__ gate, const float* __restrict__ up, float* __restrict__ out,
                              size_t n, int64_t stride = 0) {
  gate = token_ptr(gate, stride, int(blockIdx.y));  // the token axis (grid y), as embed_kernel's
  up = token_ptr(up, stride, int(blockIdx.y));
  out = token_ptr(out, stride, int(blockIdx.y));
  pdl_launch_dependents();  // the GEMV after this kernel may start streaming its weights
  GRID_STRIDE(i, n) out[i] = swiglu_value(gate[i], up[i]);
}

// Rows of [gate | up] (FP32, [rows, 2 hidden]) -> BF16 silu(gate) * up [rows, hidden]: prefill's SwiGLU and the
// conversion its down GEMM needs, in one pass.
template <typename Out>
__global__ void swiglu_rows_kernel(const float* __restrict__ gate_up, Out* __restrict__ out, int rows, int hidden) {
  GRID_STRIDE(i, int64_t(rows) * hidden) {
    const int64_t t = i / hidden, c = i - t * hidden;
    const float v = swiglu_value(gate_up[t * 2 * hidden + c], gate_up[t * 2 * hidden + hidden + c]);
    if constexpr (sizeof(Out) == 2)
      out[i] = f32_to_bf16(v);
    else
      out[i] = v;
  }
}

__global__ void spin_kernel(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

__global__ void add_kernel(float* __restrict__ y, const float* __restrict__ x, size_t n) {
  GRID_STRIDE(i, n) y[i] += x[i];
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ x, uint16_t* __restrict__ out, size_t n) {
  GRID_STRIDE(i, n) out[i] = f32_to_bf16(x[i]);
}

__global__ void bf16_to_f32_kernel(const uint16_t* __restrict__ x, float* __restrict__ out, size_t n) {
  GRID_STRIDE(i, n) out[i] = bf16_to_f32(x[i]);
}

// k, v [n_tokens, kv_dim] -> caches [ctx, kv_dim] rows *d_pos0 + t.
__global__ void kv_store_kernel(const float* __restrict__ k, const float* __restrict__ v, uint16_t* __restrict__ kc,
                                uint16_t* __restrict__ vc, const int* __restrict__ d_pos0, int n_tokens, int kv_dim) {
  const int64_t base = int64_t(*d_pos0) * kv_dim;
  GRID_STRIDE(i, int64_t(n_tokens) * kv_dim) {
    kc[base + i] = f32_to_bf16(k[i]);
    vc[base + i] = f32_to_bf16(v[i]);
  }
}

// Token t's step word {ids[0] + t0 + t, ids[1 + t0 + t]} into its slab, t < n.
__global__ void spread_steps_kernel(const int* __restrict__ ids, int t0, int n, int* step, int64_t stride) {
  const int t = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (t >= n) return;
  int* w = token_ptr(step, stride, t);
  w[0] = ids[0] + t0 + t;
  w[1] = ids[1 + t0 + t];
}

#undef GRID_STRIDE

}  // namespace

void embed_lookup(const uint16_t* table, const int* d_tokens, int n_tokens, int dim, float* out, cudaStream_t s,
                  TokenAxis tok) {
  if (n_tokens < 0 || dim <= 0) fail("embed_lookup: invalid shape n_tokens ", n_tokens, ", dim ", dim);
  if (tok.many() && n_tokens != 1) fail("embed_lookup: a token axis runs one token per slab, found ", n_tokens);
  if (n_tokens == 0) return;
  const dim3 grid{grid_for(int64_t(n_tokens) * dim), unsigned(tok.n)};
  embed_kernel<<<grid, kThreads, 0, s>>>(table, d_tokens, n_tokens, dim, out, tok.stride);
  CUDA_CHECK_LAUNCH("embed_kernel");
}

void spread_token_steps(const int* ids, int t0, int n, int* step, int64_t stride, cudaStream_t s) {
  if (n < 1 || t0 < 0 || (n > 1 && stride <= 0))
    fail("spread_token_steps: ", n, " tokens from ", t0, ", stride ", stride);
  spread_steps_kernel<<<unsigned((n + 127) / 128), 128, 0, s>>>(ids, t0, n, step, stride);
  CUDA_CHECK_LAUNCH("spread_steps_kernel");
}

void swiglu(const float* gate, const float* up, float* out, size_t n, cudaStream_t s) {
  if (n == 0) return;
  swiglu_kernel<<<grid_for(int64_t(n)), kThreads, 0, s>>>(gate, up, out, n);
  CUDA_CHECK_LAUNCH("swiglu_kernel");
}

void swiglu_fused(const float* gate_up, float* out, size_t n, cudaStream_t s, TokenAxis tok) {
  if (n == 0) return;
  const dim3 grid{grid_for(int64_t(n)), unsigned(tok.n)};
  swiglu_kernel<<<grid, kThreads, 0, s>>>(gate_up, gate_up + n, out, n, tok.stride);
  CUDA_CHECK_LAUNCH("swiglu_kernel (fused gate|up)");
}

void swiglu_rows_bf16(const float* gate_up, uint16_t* out, int rows, int hidden, cudaStream_t s) {
  if (rows < 0 || hidden <= 0) fail("swiglu_rows_bf16: invalid shape rows ", rows, ", hidden ", hidden);
  if (rows == 0) return;
  swiglu_rows_kernel<<<grid_for(int64_t(rows) * hidden), kThreads, 0, s>>>(gate_up, out, rows, hidden);
  CUDA_CHECK_LAUNCH("swiglu_rows_kernel (BF16)");
}

void swiglu_rows(const float* gate_up, float* out, int rows, int hidden, cudaStream_t s) {
  if (rows < 0 || hidden <= 0) fail("swiglu_rows: invalid shape rows ", rows, ", hidden ", hidden);
  if (rows == 0) return;
  swiglu_rows_kernel<<<grid_for(int64_t(rows) * hidden), kThreads, 0, s>>>(gate_up, out, rows, hidden);
  CUDA_CHECK_LAUNCH("swiglu_rows_kernel (FP32)");
}

void spin_device(unsigned long long ns, cudaStream_t s) {
  spin_kernel<<<1, 1, 0, s>>>(ns);
  CUDA_CHECK_LAUNCH("spin_kernel");
}

void add_inplace(float* y, const float* x, size_t n, cudaStream_t s) {
  if (n == 0) return;
  add_kernel<<<grid_for(int64_t(n)), kThreads, 0, s>>>(y, x, n);
  CUDA_CHECK_LAUNCH("add_kernel");
}

void convert_f32_to_bf16(const float* x, uint16_t* out, size_t n, cudaStream_t s) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<grid_for(int64_t(n)), kThreads, 0, s>>>(x, out, n);
  CUDA_CHECK_LAUNCH("f32_to_bf16_kernel");
}

void convert_bf16_to_f32(const uint16_t* x, float* out, size_t n, cudaStream_t s) {
  if (n == 0) return;
  bf16_to_f32_kernel<<<grid_for(int64_t(n)), kThreads, 0, s>>>(x, out, n);
  CUDA_CHECK_LAUNCH("bf16_to_f32_kernel");
}

void kv_store(const float* k, const float* v, uint16_t* k_cache, uint16_t* v_cache, const int* d_pos0, int n_tokens,
              int kv_dim, cudaStream_t s) {
  if (n_tokens < 0 || kv_dim <= 0) fail("kv_store: invalid shape n_tokens ", n_tokens, ", kv_dim ", kv_dim);
  if (n_tokens == 0) return;
  kv_store_kernel<<<grid_for(int64_t(n_tokens) * kv_dim), kThreads, 0, s>>>(k, v, k_cache, v_cache, d_pos0, n_tokens,
                                                                             kv_dim);
  CUDA_CHECK_LAUNCH("kv_store_kernel");
}

}  // namespace llm
