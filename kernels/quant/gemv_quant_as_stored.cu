// "as-stored" (quantized): lanes along K over GGUF's blocks exactly as stored (lane j takes block j of the row, one warp
// per row), 4-byte loads where the block size allows (20/24/144 bytes), 2-byte loads otherwise (18/22/34/210): the
// baseline that says what prepacking is worth.
//
// Per lane: a block's loads (Q4_0: 9 x 2 B; Q4_1: 5 x 4 B; Q5_0: 11 x 2 B; Q5_1: 6 x 4 B; Q8_0: 17 x 2 B; Q4_K:
// 36 x 4 B; Q6_K: 105 x 2 B), the 32 lanes block_bytes apart, so one warp request of 2 (4) bytes spans 32 * block_bytes
// bytes: e.g. Q4_0 18 or 19 sectors for 64 useful bytes, Q4_K 32 sectors (144 > 32) for 128; the rest of each sector
// is read again by the block's later loads (from L1 when it stayed there). The K-quants have K / 256 blocks per row:
// at K = 4096 only 16 lanes of 32 have a block. Same code -> float conversion and FP32 accumulation as "warp"; scales
// computed exactly as models/quant.cpp's dequantizers (two-level: f16(d) * float(sc) and -(f16(dmin) * float(m))).
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_internal.h"  // gemv_check_epilogue
#include "kernels/quant/gemv_quant_device.cuh"
#include "kernels/quant/gemv_quant_internal.h"
#include "kernels/ops/pdl.cuh"

namespace llm {
namespace {

constexpr int kWarps = kQuantWarpsPerBlock;

// Warp w of block b: row b * (8 / splits) + w / splits, K slice w % splits (blocks [slice * slice_units, +
// slice_units) clipped); lane l takes blocks b_begin + l + 32 i. Plain launch; pdl_wait is a no-op without PDL.
template <int kType, bool kVecX>
__global__ void __launch_bounds__(kQuantGemvThreads, kQuantAsStoredMinBlocks)
    quant_gemv_as_stored_kernel(AsStoredArgs a) {
  __shared__ float slice_sums[kWarps];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int splits = a.splits;
  const QuantWarpCoords at = quant_warp_coords(int(blockIdx.x), warp, splits, a.slice_units, a.units, 1);
  const int64_t row = at.row0;
  pdl_launch_dependents();
  pdl_wait();
  const float acc = row < a.n ? quant_as_stored_lane<kType, kVecX>(a, row, at.begin, at.end, lane) : 0.0f;
  const float s = warp_sum(acc);
  float ss = 0.0f;  // the RMSNorm fold's sum of squares of this thread's row (producer)
  if (splits == 1) {
    if (lane == 0 && row < a.n) gemv_store_row(a.ep, a.y, row, s, a.accumulate, &ss);
  } else {  // block-uniform branch: every thread reaches the barrier
    if (lane == 0) slice_sums[warp] = s;
    __syncthreads();
    if (at.slice == 0 && lane == 0 && row < a.n) {
      float t = 0.0f;
      for (int i = 0; i < splits; ++i) t += slice_sums[warp + i];
      gemv_store_row(a.ep, a.y, row, t, a.accumulate, &ss);
    }
  }
  gemv_epilogue_finish(a.ep, ss, a.n);
}

using Kernel = void (*)(AsStoredArgs);

// The kernel for a type (quant_kernel_for): kVecX = x 16-byte aligned.
template <bool kVecX>
struct Pick {
  template <int kType>
  static Kernel get() {
    return quant_gemv_as_stored_kernel<kType, kVecX>;
  }
};

}  // namespace

void quant_gemv_as_stored_launch(const QuantGemvWeight& w, const QuantGemvPlan& plan, const float* x, float* y,
                                 bool accumulate, const GemvEpilogue& ep, cudaStream_t stream) {
  if (plan.grid <= 0 || plan.splits < 1 || plan.splits > kWarps || kWarps % plan.splits != 0 ||
      int64_t(plan.grid) * (kWarps / plan.splits) < plan.row_groups ||
      int64_t(plan.slice_units) * plan.splits < plan.units)
    fail("quantized gemv 'as-stored': bad plan (grid ", plan.grid, ", splits ", plan.splits, ", rows ",
         plan.row_groups, ")");
  if ((reinterpret_cast<uintptr_t>(w.blocks) & 3) != 0)
    fail("quantized gemv 'as-stored': the blocks must be 4-byte aligned");
  AsStoredArgs a;
  a.blocks = w.blocks;
  a.row_bytes = w.row_bytes;
  a.n = int(w.n);
  a.units = plan.units;
  a.splits = plan.splits;
  a.slice_units = plan.slice_units;
  a.x = x;
  a.y = y;
  a.accumulate = accumulate ? 1 : 0;
  a.ep = ep;
  gemv_check_epilogue("as-stored", ep, plan.grid);
  const bool vec_x = (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  const Kernel kernel = vec_x ? quant_kernel_for<Pick<true>>(w.type_id, "as-stored")
                              : quant_kernel_for<Pick<false>>(w.type_id, "as-stored");
  kernel<<<plan.grid, kQuantGemvThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH("quant_gemv_as_stored_kernel");
}

}  // namespace llm
