// "thread-splitk" (control): still one thread per row with 2-byte uncoalesced loads, but K split over blockIdx.y so
// the GPU is full: separates the cost of uncoalesced loads from the cost of too few threads.
// Partial sums go to the context's [splits, N] buffer and a second pass adds them in a fixed order (deterministic).
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_internal.h"

namespace llm {
namespace {

constexpr int kThreads = 256;
constexpr int kMinSlice = 16;  // one 32-byte sector of a row: a slice never shares a sector with the next one

// W [N, ld] row-major BF16 bits; x [K]; partial [splits, N]: partial[s, n] = sum over slice s of W[n, k] x[k].
__global__ void gemv_thread_splitk_partial_bf16(const uint16_t* W, int64_t ld, int N, int K, const float* x,
                                                int slice, float* partial) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= N) return;
  const int k0 = blockIdx.y * slice;
  const int k1 = min(K, k0 + slice);
  const uint16_t* w = W + int64_t(row) * ld;
  float acc = 0.0f;
  for (int k = k0; k < k1; ++k) acc = fmaf(__uint_as_float(uint32_t(w[k]) << 16), x[k], acc);
  partial[size_t(blockIdx.y) * N + row] = acc;
}

void prepack(const uint16_t* w_rowmajor, int N, int K, GemvWeight* out, cudaStream_t stream) {
  gemv_prepack_rowmajor(w_rowmajor, N, K, 1, out, stream);
}

GemvLaunchShape shape(int N, int K) { return gemv_splitk_shape(N, K, kMinSlice, kThreads); }

void launch(const GemvWeight& w, const float* x, float* y, bool accumulate, const GemvEpilogue& ep,
            GemvContext* ctx) {
  gemv_check_launch("thread-splitk", w, x, y);
  const GemvSplitK plan = gemv_plan_splitk(w.N, w.K, kMinSlice);
  float* partial = gemv_partial_buffer("thread-splitk", ctx, plan.splits, w.N);
  const dim3 grid((w.N + kThreads - 1) / kThreads, plan.splits);
  gemv_thread_splitk_partial_bf16<<<grid, kThreads, 0, ctx->stream>>>(w.data, w.ld, w.N, w.K, x, plan.slice,
                                                                       partial);
  CUDA_CHECK_LAUNCH("gemv_thread_splitk_partial_bf16");
  gemv_sum_partials(partial, plan.splits, w.N, y, accumulate, ep, ctx->stream);
}

}  // namespace

extern const GemvMapping gemv_mapping_thread_splitk =
    gemv_mapping_of(GemvBf16Form::ThreadSplitk, prepack, launch, shape, 1);

}  // namespace llm
