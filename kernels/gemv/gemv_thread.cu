// "thread": one thread per output row walking K with 2-byte loads: the deliberately uncoalesced mapping (the 32 lanes
// of a warp read 32 rows, K * 2 bytes apart: 32 sectors per load for 64 useful bytes), kept as the honest baseline.
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_epilogue.cuh"
#include "kernels/gemv/gemv_internal.h"

namespace llm {
namespace {

constexpr int kThreads = 256;

// W [N, ld] row-major BF16 bits (ld = K: no padding, no staging, plain loads); x [K]; y [N].
__global__ void gemv_thread_per_row_bf16(const uint16_t* W, int64_t ld, int N, int K, const float* x, float* y,
                                         int accumulate, GemvEpilogue ep) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  float ss = 0.0f;
  if (row < N) {  // no early return: every thread reaches the epilogue's block sum
    const uint16_t* w = W + int64_t(row) * ld;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc = fmaf(__uint_as_float(uint32_t(w[k]) << 16), x[k], acc);
    gemv_store_row(ep, y, row, acc, accumulate, &ss);
  }
  gemv_epilogue_finish(ep, ss, N);
}

void prepack(const uint16_t* w_rowmajor, int N, int K, GemvWeight* out, cudaStream_t stream) {
  gemv_prepack_rowmajor(w_rowmajor, N, K, 1, out, stream);
}

GemvLaunchShape shape(int N, int K) {
  (void)K;
  GemvLaunchShape s;
  s.grid = (N + kThreads - 1) / kThreads;
  s.block = kThreads;
  s.bytes_in_flight_per_thread = 2;
  return s;
}

void launch(const GemvWeight& w, const float* x, float* y, bool accumulate, const GemvEpilogue& ep,
            GemvContext* ctx) {
  gemv_check_launch("thread", w, x, y);
  const GemvLaunchShape s = shape(w.N, w.K);
  gemv_check_epilogue("thread", ep, s.grid);
  gemv_thread_per_row_bf16<<<s.grid, s.block, 0, gemv_stream(ctx)>>>(w.data, w.ld, w.N, w.K, x, y,
                                                                     accumulate ? 1 : 0, ep);
  CUDA_CHECK_LAUNCH("gemv_thread_per_row_bf16");
}

}  // namespace

extern const GemvMapping gemv_mapping_thread = gemv_mapping_of(GemvBf16Form::Thread, prepack, launch, shape, 1);

}  // namespace llm
