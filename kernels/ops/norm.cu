// RMSNorm over rows: one block per row, FP32 sum of squares reduced by warp shuffles then shared memory.
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/ops/block_reduce.cuh"
#include "kernels/cuda_check.h"
#include "kernels/ops/norm_shape.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/pdl.cuh"

namespace llm {
namespace {

__device__ __forceinline__ void store_out(float* out, size_t i, float v) { out[i] = v; }
__device__ __forceinline__ void store_out(uint16_t* out, size_t i, float v) { out[i] = f32_to_bf16(v); }

// x, out [rows, dim]; w [dim]. No __restrict__: out may alias x (each element is read and written by one thread).
// Token axis (grid y; kernels/ops/token_axis.h): token y's x and out are `stride` bytes on.
template <typename Out>
__global__ void rmsnorm_kernel(const float* x, const float* __restrict__ w, Out* out, int dim, float eps,
                               int64_t stride) {
  x = token_ptr(x, stride, int(blockIdx.y));
  out = token_ptr(out, stride, int(blockIdx.y));
  pdl_launch_dependents();  // the GEMV after this kernel may start streaming its weights
  __shared__ float red[32];
  const size_t row = size_t(blockIdx.x) * size_t(dim);
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = x[row + i];
    ss += v * v;
  }
  ss = block_sum(ss, red);
  // Same expression as the CPU reference: 1 / sqrt(mean + eps), not the approximate rsqrtf.
  const float inv = 1.0f / sqrtf(ss / float(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) store_out(out, row + i, x[row + i] * inv * w[i]);
}

// One block per token: the embedding row, w * x, and 1 / rms(x) (embed_rmsnorm_fold); block t's pointers (all but
// table and w) `stride` bytes on per token (the token axis).
__global__ void embed_rmsnorm_fold_kernel(const uint16_t* __restrict__ table, const int* __restrict__ d_token, int dim,
                                          const float* __restrict__ w, float eps, float* __restrict__ x,
                                          float* __restrict__ xg, float* __restrict__ inv, float* __restrict__ sums,
                                          unsigned* __restrict__ count, int64_t stride) {
  const int t = int(blockIdx.x);
  d_token = token_ptr(d_token, stride, t);
  x = token_ptr(x, stride, t);
  xg = token_ptr(xg, stride, t);
  inv = token_ptr(inv, stride, t);
  sums = token_ptr(sums, stride, t);
  count = token_ptr(count, stride, t);
  pdl_launch_dependents();
  __shared__ float red[32];
  const uint16_t* row = table + int64_t(*d_token) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = bf16_to_f32(row[i]);
    x[i] = v;
    xg[i] = w[i] * v;
    ss += v * v;
  }
  ss = block_sum(ss, red);
  if (threadIdx.x == 0) {
    *inv = 1.0f / sqrtf(ss / float(dim) + eps);
    if (sums) {  // also as a producer of one block sum (GemvEpilogue::scale_sums)
      sums[0] = ss;
      *count = 1u;
    }
  }
}

template <typename Out>
void launch_rmsnorm(const float* x, const float* w, Out* out, int rows, int dim, float eps, cudaStream_t s,
                    TokenAxis tok = {}) {
  if (rows < 0 || dim <= 0) fail("rmsnorm: invalid shape rows ", rows, ", dim ", dim);
  if (tok.many() && rows != 1) fail("rmsnorm: a token axis runs one row per slab, found ", rows);
  if (rows == 0) return;
  const dim3 grid{unsigned(rows), unsigned(tok.n)};
  rmsnorm_kernel<Out><<<grid, rmsnorm_threads(dim), 0, s>>>(x, w, out, dim, eps, tok.stride);
  CUDA_CHECK_LAUNCH("rmsnorm_kernel");
}

}  // namespace

void embed_rmsnorm_fold(const uint16_t* table, const int* d_token, int dim, const float* w, float eps, float* x,
                        float* xg, float* inv, cudaStream_t s, float* sums, unsigned* count, TokenAxis tok) {
  if (dim <= 0) fail("embed_rmsnorm_fold: invalid dim ", dim);
  if ((sums == nullptr) != (count == nullptr)) fail("embed_rmsnorm_fold: block sums without a count, or the reverse");
  embed_rmsnorm_fold_kernel<<<unsigned(tok.n), rmsnorm_threads(dim), 0, s>>>(table, d_token, dim, w, eps, x, xg, inv,
                                                                             sums, count, tok.stride);
  CUDA_CHECK_LAUNCH("embed_rmsnorm_fold_kernel");
}

void rmsnorm(const float* x, const float* w, float* out, int rows, int dim, float eps, cudaStream_t s,
             TokenAxis tok) {
  launch_rmsnorm(x, w, out, rows, dim, eps, s, tok);
}

void rmsnorm_bf16(const float* x, const float* w, uint16_t* out, int rows, int dim, float eps, cudaStream_t s) {
  launch_rmsnorm(x, w, out, rows, dim, eps, s);
}

}  // namespace llm
