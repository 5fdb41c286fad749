// Helpers shared by the GEMV mapping implementations (kernels/gemv_*.cu only; the engine uses kernels/gemv/gemv.h).
#pragma once
#include <cstdint>

#include "kernels/gemv/gemv.h"

namespace llm {

inline int64_t gemv_round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// SM count of the current device, queried once per process (132 on the H200). Falls back to 132 where no device
// answers, so launch shapes can still be reported on a machine without a GPU.
int gemv_sm_count();

// Checks the common preconditions of every launch (shape, pointers) and fails naming the mapping.
void gemv_check_launch(const char* mapping, const GemvWeight& w, const float* x, const float* y);
// A producer epilogue's buffers are all set and its partials hold one float per block of a `grid`-block launch; a
// consumer of block sums (GemvEpilogue::scale_sums) is refused unless the launch reads them (reads_norm_sums).
void gemv_check_epilogue(const char* mapping, const GemvEpilogue& ep, int64_t grid, bool reads_norm_sums = false,
                         bool x_forms = false, bool token_axis = false);
cudaStream_t gemv_stream(const GemvContext* ctx);

// Copies a row-major BF16 [N, K] device matrix into a fresh allocation with row stride ld = K rounded up to a
// multiple of align_elems, the padding zero-filled (align_elems = 8 gives 16-byte aligned rows).
void gemv_prepack_rowmajor(const uint16_t* w_rowmajor, int N, int K, int align_elems, GemvWeight* out,
                           cudaStream_t stream);

// How a split-K mapping cuts K: `splits` slices of `slice` elements (the last may be shorter), chosen so that
// N * splits threads fill the GPU (about 2,048 resident threads per SM), each slice is at least min_slice elements
// (a multiple of min_slice), and N * splits fits the context's partial buffer (kGemvPartialFloats).
struct GemvSplitK {
  int splits = 1;
  int slice = 0;
};
GemvSplitK gemv_plan_splitk(int N, int K, int min_slice);
// Launch shape of a one-thread-per-output split-K mapping (colmajor, thread-splitk): blocks of `threads` over N,
// times the slices, each thread with one 2-byte load in flight.
GemvLaunchShape gemv_splitk_shape(int N, int K, int min_slice, int threads);

// Fails naming the mapping unless w has the 16-byte aligned, padded row-major layout of warp_gemv_prepack.
void gemv_check_padded_rows(const char* mapping, const GemvWeight& w);

// y[n] (+)= sum over s = 0 .. splits-1, in that order, of partial[s * N + n]: the deterministic second pass.
void gemv_sum_partials(const float* partial, int splits, int N, float* y, bool accumulate, const GemvEpilogue& ep,
                       cudaStream_t stream);

// The context's partial buffer, checked to hold splits * N floats.
float* gemv_partial_buffer(const char* mapping, GemvContext* ctx, int splits, int N);

// The warp-per-row kernel (kernels/gemv/gemv_warp.cu), shared by "warp" and its control "warp-few".
// Blocks of kWarpGemvThreads threads = 8 warps; each warp covers one K-slice of one row (splits warps per row,
// 8 / splits rows per block); blocks walk rows grid-stride, so a grid smaller than N / rows_per_block is allowed.
constexpr int kWarpGemvThreads = 256;
constexpr int kWarpGemvUnroll = 8;  // independent 16-byte loads in flight per lane before the first FMA
struct WarpGemvPlan {
  int splits = 1;     // 1, 2, 4 or 8 warps per row
  int grid = 0;       // blocks
  bool pdl = false;   // launch with programmatic dependent launch (kernels/ops/pdl.cuh); "warp" and "warp-few" do
};
WarpGemvPlan warp_gemv_plan_fill(int N, int K);  // what "warp" launches: fills every SM
GemvLaunchShape warp_gemv_shape(int N, int K, const WarpGemvPlan& plan);
void warp_gemv_prepack(const uint16_t* w_rowmajor, int N, int K, GemvWeight* out, cudaStream_t stream);
void warp_gemv_launch(const char* mapping, const GemvWeight& w, const float* x, float* y, bool accumulate,
                      const GemvEpilogue& ep, const WarpGemvPlan& plan, cudaStream_t stream);

}  // namespace llm
