// Pieces shared by several GEMV mappings: padded row-major prepack, the split-K plan and its deterministic combine.
#include <algorithm>
#include <atomic>

#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_epilogue.cuh"
#include "kernels/gemv/gemv_internal.h"

namespace llm {

int gemv_sm_count() {
  static std::atomic<int> cached{0};
  int n = cached.load(std::memory_order_relaxed);
  if (n > 0) return n;
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) {
    cudaGetLastError();  // no device: clear the error, report launch shapes for the H200
    sms = 132;
  }
  cached.store(sms, std::memory_order_relaxed);
  return sms;
}

void gemv_check_launch(const char* mapping, const GemvWeight& w, const float* x, const float* y) {
  if (w.data == nullptr || w.N <= 0 || w.K <= 0)
    fail("gemv '", mapping, "': weight not prepacked (N=", w.N, ", K=", w.K, ")");
  if (x == nullptr || y == nullptr) fail("gemv '", mapping, "': null x or y for a [", w.N, ", ", w.K, "] weight");
}

void gemv_check_epilogue(const char* mapping, const GemvEpilogue& ep, int64_t grid, bool reads_norm_sums,
                         bool x_forms, bool token_axis) {
  if (ep.tokens.n < 1 || (ep.tokens.many() && (ep.tokens.stride <= 0 || ep.tokens.stride % 16 != 0)))
    fail("gemv '", mapping, "': a token axis of ", ep.tokens.n, " tokens ", ep.tokens.stride,
         " bytes apart (need n >= 1 and, for several, a positive stride that keeps 16-byte alignment)");
  if (ep.tokens.many() && !token_axis)
    fail("gemv '", mapping, "': no token axis (the quantized warp forms and warp-r2 have it; --vfy-order pass)");
  if (ep.x_form() && !x_forms)
    fail("gemv '", mapping, "': cannot make x from an input form (SwiGLU or a split merge: the quantized warp form "
         "can; use --stage-glu off / --o-merge off)");
  if (ep.scale_sums && !reads_norm_sums)
    fail("gemv '", mapping, "': cannot read an RMSNorm fold's block sums (the quantized warp forms can; use --norm-sums "
         "off)");
  if (ep.scale_sums && ep.scale) fail("gemv '", mapping, "': an RMSNorm-fold consumer given both a scale and block sums");
  if (ep.scale_sums && (!ep.scale_count || ep.norm_n <= 0))
    fail("gemv '", mapping, "': an RMSNorm-fold consumer of block sums needs their count and n > 0 (n = ", ep.norm_n,
         ")");
  if (!ep.producer()) return;
  if (!ep.norm_w || !ep.partials || (ep.inv ? !ep.arrivals : !ep.count))
    fail("gemv '", mapping, "': an RMSNorm-fold producer needs norm_w, partials, and inv and arrivals or a count");
  if (grid > kGemvEpiloguePartials)
    fail("gemv '", mapping, "': an RMSNorm-fold producer of ", grid, " blocks (at most ", kGemvEpiloguePartials, ")");
}

cudaStream_t gemv_stream(const GemvContext* ctx) { return ctx ? ctx->stream : nullptr; }

void gemv_prepack_rowmajor(const uint16_t* w_rowmajor, int N, int K, int align_elems, GemvWeight* out,
                           cudaStream_t stream) {
  if (N <= 0 || K <= 0 || align_elems <= 0 || w_rowmajor == nullptr)
    fail("gemv prepack: bad row-major [N, K] = [", N, ", ", K, "] (align ", align_elems, ")");
  const int64_t ld = gemv_round_up(K, align_elems);
  const size_t bytes = size_t(N) * size_t(ld) * sizeof(uint16_t);
  uint16_t* data = nullptr;
  CUDA_CHECK(cudaMalloc(&data, bytes));
  if (ld != K) CUDA_CHECK(cudaMemsetAsync(data, 0, bytes, stream));
  CUDA_CHECK(cudaMemcpy2DAsync(data, size_t(ld) * 2, w_rowmajor, size_t(K) * 2, size_t(K) * 2, size_t(N),
                               cudaMemcpyDeviceToDevice, stream));
  out->N = N;
  out->K = K;
  out->data = data;
  out->ld = ld;
  out->bytes = bytes;
}

GemvSplitK gemv_plan_splitk(int N, int K, int min_slice) {
  const int64_t target_threads = int64_t(gemv_sm_count()) * 2048;
  int64_t splits = (target_threads + N - 1) / N;
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, K / min_slice));
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, int64_t(kGemvPartialFloats) / N));
  splits = std::min<int64_t>(splits, 65535);  // gridDim.y
  splits = std::max<int64_t>(splits, 1);
  GemvSplitK plan;
  plan.slice = int(gemv_round_up((K + splits - 1) / splits, min_slice));
  plan.splits = int((K + plan.slice - 1) / plan.slice);  // rounding the slice up may leave fewer slices
  return plan;
}

GemvLaunchShape gemv_splitk_shape(int N, int K, int min_slice, int threads) {
  const GemvSplitK plan = gemv_plan_splitk(N, K, min_slice);
  GemvLaunchShape s;
  s.grid = (N + threads - 1) / threads * plan.splits;
  s.block = threads;
  s.bytes_in_flight_per_thread = 2;
  return s;
}

void gemv_check_padded_rows(const char* mapping, const GemvWeight& w) {
  if (w.ld % 8 != 0 || w.ld < w.K || (reinterpret_cast<uintptr_t>(w.data) & 15) != 0)
    fail("gemv '", mapping, "': weight [", w.N, ", ", w.K, "] needs 16-byte aligned rows, found ld = ", w.ld,
         " (prepack with this mapping)");
}

// One thread per output; reads are coalesced along n. Fixed summation order = same bits on every run. The final
// writer of the split-K mappings, so it runs their epilogue (every thread reaches gemv_epilogue_finish).
__global__ void gemv_sum_partials_kernel(const float* __restrict__ partial, int splits, int N, float* __restrict__ y,
                                         int accumulate, GemvEpilogue ep) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  float ss = 0.0f;
  if (n < N) {
    float s = 0.0f;
    for (int i = 0; i < splits; ++i) s += partial[size_t(i) * N + n];
    gemv_store_row(ep, y, n, s, accumulate, &ss);
  }
  gemv_epilogue_finish(ep, ss, N);
}

void gemv_sum_partials(const float* partial, int splits, int N, float* y, bool accumulate, const GemvEpilogue& ep,
                       cudaStream_t stream) {
  const int block = 256;
  const int grid = (N + block - 1) / block;
  gemv_check_epilogue("split-K sum", ep, grid);
  gemv_sum_partials_kernel<<<grid, block, 0, stream>>>(partial, splits, N, y, accumulate ? 1 : 0, ep);
  CUDA_CHECK_LAUNCH("gemv_sum_partials_kernel");
}

float* gemv_partial_buffer(const char* mapping, GemvContext* ctx, int splits, int N) {
  const size_t need = size_t(splits) * size_t(N);
  if (ctx == nullptr || ctx->partial == nullptr || ctx->partial_capacity < need)
    fail("gemv '", mapping, "': context partial buffer holds ", ctx ? ctx->partial_capacity : 0,
         " floats, need ", need, " (", splits, " slices x ", N, " rows); call gemv_context_init first");
  return ctx->partial;
}

}  // namespace llm
