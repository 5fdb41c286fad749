// "colmajor": the weight prepacked (device transpose) into [K, N], contiguous along outputs; one thread per output
// column per K-slice: lanes read consecutive n, so loads coalesce (64 bytes per warp load) with no cross-lane reduction.
// K is split over blockIdx.y so small N still fills the GPU; the partial sums go to the context's [splits, N] buffer
// and a second pass adds them in a fixed order: deterministic (atomicAdd into y would not be).
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_internal.h"

namespace llm {
namespace {

constexpr int kThreads = 256;
constexpr int kMinSlice = 16;
constexpr int kTile = 32;

// in [N, K] row-major -> out [K, ld] (out[k * ld + n] = in[n * K + k]). Tiles through shared memory so both the
// read (along k) and the write (along n) are coalesced; the +1 column avoids shared-memory bank conflicts.
__global__ void transpose_bf16(const uint16_t* __restrict__ in, int N, int K, uint16_t* __restrict__ out,
                               int64_t ld) {
  __shared__ uint16_t tile[kTile][kTile + 1];
  const int k0 = blockIdx.x * kTile, n0 = blockIdx.y * kTile;
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int n = n0 + i, k = k0 + threadIdx.x;
    if (n < N && k < K) tile[i][threadIdx.x] = in[int64_t(n) * K + k];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int k = k0 + i, n = n0 + threadIdx.x;
    if (n < N && k < K) out[int64_t(k) * ld + n] = tile[threadIdx.x][i];
  }
}

// W [K, ld] BF16 bits (column n contiguous across lanes); x [K]; partial [splits, N].
__global__ void gemv_colmajor_partial_bf16(const uint16_t* __restrict__ W, int64_t ld, int N, int K,
                                           const float* __restrict__ x, int slice, float* __restrict__ partial) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int k0 = blockIdx.y * slice;
  const int k1 = min(K, k0 + slice);
  float acc = 0.0f;
  for (int k = k0; k < k1; ++k) acc = fmaf(__uint_as_float(uint32_t(W[int64_t(k) * ld + n]) << 16), x[k], acc);
  partial[size_t(blockIdx.y) * N + n] = acc;
}

// ld = N rounded up to 32 elements: each k-row starts 64-byte aligned, so a warp's 32 columns are 2 whole sectors.
void prepack(const uint16_t* w_rowmajor, int N, int K, GemvWeight* out, cudaStream_t stream) {
  if (N <= 0 || K <= 0 || w_rowmajor == nullptr) fail("gemv 'colmajor' prepack: bad [N, K] = [", N, ", ", K, "]");
  const int64_t ld = gemv_round_up(N, 32);
  const size_t bytes = size_t(K) * size_t(ld) * sizeof(uint16_t);
  uint16_t* data = nullptr;
  CUDA_CHECK(cudaMalloc(&data, bytes));
  if (ld != N) CUDA_CHECK(cudaMemsetAsync(data, 0, bytes, stream));
  const dim3 grid((K + kTile - 1) / kTile, (N + kTile - 1) / kTile), block(kTile, 8);
  transpose_bf16<<<grid, block, 0, stream>>>(w_rowmajor, N, K, data, ld);
  CUDA_CHECK_LAUNCH("transpose_bf16");
  out->N = N;
  out->K = K;
  out->data = data;
  out->ld = ld;
  out->bytes = bytes;
}

GemvLaunchShape shape(int N, int K) { return gemv_splitk_shape(N, K, kMinSlice, kThreads); }

void launch(const GemvWeight& w, const float* x, float* y, bool accumulate, const GemvEpilogue& ep,
            GemvContext* ctx) {
  gemv_check_launch("colmajor", w, x, y);
  if (w.ld < w.N) fail("gemv 'colmajor': weight [", w.N, ", ", w.K, "] is not [K, N] (ld ", w.ld, " < N)");
  const GemvSplitK plan = gemv_plan_splitk(w.N, w.K, kMinSlice);
  float* partial = gemv_partial_buffer("colmajor", ctx, plan.splits, w.N);
  const dim3 grid((w.N + kThreads - 1) / kThreads, plan.splits);
  gemv_colmajor_partial_bf16<<<grid, kThreads, 0, ctx->stream>>>(w.data, w.ld, w.N, w.K, x, plan.slice, partial);
  CUDA_CHECK_LAUNCH("gemv_colmajor_partial_bf16");
  gemv_sum_partials(partial, plan.splits, w.N, y, accumulate, ep, ctx->stream);
}

}  // namespace

extern const GemvMapping gemv_mapping_colmajor = gemv_mapping_of(GemvBf16Form::Colmajor, prepack, launch, shape);

}  // namespace llm
